"""``bench-bn-fixes``: the four BN fixes, FedAvg+BN and FedAvg+GN on the same three settings.

No paper compares these six methods on common ground: FedTAN compares with FedAvg+BN/GN and FedBN
on label skew, HBN with BN/GN/FixBN under small batches, FixBN with FedTAN and GN, FedBN with FedAvg
under feature shift, each on its own setting. Here every method trains on the same partitions with
the same seeds (:mod:`.bn_fixes_settings`), so each comparison with FedAvg+BN is a paired difference
over seeds, judged by its 95% t-interval (:func:`bnfl.experiments.interval_claims.interval_claim`).

Every method trains at its own learning rate, tuned in each setting on a validation split over
:data:`GRID` (the same grid, seeds and budget for all; :func:`bnfl.experiments.tuning.tuned_runs`);
the damage the fixes repair is FedAvg+BN at the shared recipe's rate, as the calibration measured it.
A fix's claim asks it to repair the whole damage (the calibration's rule for the benchmark,
:data:`bnfl.experiments.calibration.BENCH_REPAIR`): the paired interval of (fix - FedAvg+BN) above
the setting's measured damage (iid control - skewed); the rows print the gain itself beside it.

A method whose run diverges (non-finite training loss) on some seed has no interval: its claim fails,
says on which seeds and at which rounds, and stores the per-seed values it has
(:func:`bnfl.experiments._claim.no_interval`). FixBN in the feature-shift setting did so before the
rates were tuned: with the shared recipe (plain SGD, lr 0.1) it diverged on 4 of 5 seeds, each at round 51, the first round
after T* = 50 in which it normalises with the frozen (FedAvg-averaged) running statistics. Diagnosed
on seed 0 from the round-50 global model: the blur client's features have 0.1-0.67x the frozen
variance of each channel; with the frozen statistics its 5 local SGD steps at lr 0.1 grow the
gradient norm 7 -> 32 -> 95 -> 243 -> 11,611 (loss 0.69 -> 15,146), while with batch statistics
(train-mode BN) the same steps keep it at 1.2-2.4, and at lr 0.02 the frozen steps stay stable: the
frozen network loses BN's self-normalisation, and the shared learning rate is too large for it.
Its tuning grid says the same: every rate from 0.1 up diverges on a validation seed, and it trains at
0.05 (the rows' ``lr tuning``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bnfl.experiments.benchmarks.bn_fixes_settings import (
    CALIBRATION,
    CHOSEN,
    DAMAGE_MIN,
    ROUNDS,
    SETTINGS,
    metric,
    score,
    setting_spec,
)
from bnfl.experiments.calibration import BENCH_REPAIR, scaled_effect
from bnfl.experiments.core import Context, Result, deep_merge
from bnfl.experiments.curves import train_runs
from bnfl.experiments.interval_claims import interval_claim
from bnfl.experiments.registry import entry, plotter
from bnfl.experiments.tuning import EDGE_RULE, SMOKE_TUNE, tuned_runs
from bnfl.fl.algorithms import FixBN
from bnfl.intervals import estimate
from bnfl.methods import METHODS as ALL
from bnfl.methods import get
from bnfl.plots import color_for, new_figure

__all__ = ["FIXES", "METHODS"]

#: The four fixes, in the order of the which-fix page.
FIXES: tuple[str, ...] = ("fedtan", "hbn", "fixbn", "fedbn")
#: Every method of the benchmark: the damaged baseline, the BN-free alternative, the fixes.
METHODS: tuple[str, ...] = ("fedavg+bn", "fedavg+gn", *FIXES)

_SMOKE = {"rounds": 2, "train": {"local_steps": 2, "eval_every": 2}}
#: The learning-rate grid every method is tuned over, in every setting (the shared recipe's rates,
#: 0.1 and 0.05, inside it). Widened once: with 0.02-0.5, 6 of the 18 chosen rates were 0.5.
GRID: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

_QUICK: dict[str, Any] = {"settings": {s: CHOSEN.get(s, "") for s in SETTINGS}, "tune": {"grid": list(GRID)},
                          "deviations": []}
_SMOKE_CFG: dict[str, Any] = {**_QUICK, "override": _SMOKE, "tune": {"grid": [0.05, 0.2], **SMOKE_TUNE},
                              "deviations": ["smoke profile: 2 rounds of 2 local steps, 2 seeds: checks the "
                                             "machinery, not the comparison"]}
_PAPER: dict[str, Any] = {"settings": _QUICK["settings"],
                          "deviations": ["no paper has this benchmark: the paper profile runs the quick settings (the "
                                         "embedded data) with 5 seeds, every method at the shared recipe's rate (the "
                                         "quick profile tunes each method's)"]}


#: Row names of the two FedAvg+BN runs at the shared recipe's rate that measure the damage.
_ROW_NAMES = {"damaged": "FedAvg+BN, shared recipe's rate (damage)", "control": "FedAvg+BN, iid split (control)"}


def _label(method: str) -> str:
    return ALL[method].label


def _fmt(iv: Any) -> str:
    return f"{iv.estimate:+.2f} [{iv.low:+.2f}, {iv.high:+.2f}]"


def _setting(ctx: Context, config: dict[str, Any], setting: str) -> dict[str, Any]:
    """Per-seed scores in ``setting``: every method at its own rate, tuned on a validation split over
    the config's ``tune`` grid (same grid, seeds and budget for all; scored as the setting scores its
    test runs), and FedAvg+BN at the shared recipe's rate on the skewed split (``"damaged"``) and
    its iid split (``"control"``): the damage the fixes repair, measured before any fix, as the
    calibration measured it."""
    cand = config["settings"][setting]
    over = config.get("override") or {}
    scores: dict[str, list[float]] = {}
    stopped: dict[str, list[int]] = {}  # the round each diverged run stopped at
    rates: dict[str, Any] = {}
    n_test = 0
    for m in (*METHODS, "damaged", "control"):
        method = "fedavg+bn" if m in ("damaged", "control") else m
        spec = deep_merge(setting_spec(setting, cand, method, control=m == "control"), over)
        if m in METHODS and config.get("tune"):
            rates[m], runs = tuned_runs(ctx, spec, config["tune"], score=lambda r: score(setting, r))
        else:
            runs = train_runs(ctx, spec)
        scores[m] = [score(setting, r) for r in runs]
        stopped[m] = [int(r.get("rounds_done", 0)) for r in runs if r.get("diverged")]
        n_test = int(runs[0].get("n_test") or 0)
    if metric(setting) == "own domain":  # each domain's own test set: one sample of the smallest
        n_test = n_test // max(1, len(setting_spec(setting, cand, "fedbn")["data"].get("domains") or [1]))
    return {"scores": scores, "n_test": n_test, "scale": cand, "stopped": stopped, "rates": rates}


def _t_star(method: str) -> int | None:
    """The last round FixBN updates its statistics under the benchmark's recipe (None for other methods)."""
    alg = get(method).algorithm()
    if not isinstance(alg, FixBN):
        return None
    return int(alg.switch) if alg.switch is not None else int(math.floor(alg.switch_fraction * ROUNDS))


def _diverged_why(method: str, stopped: list[int], seeds: int, lr: float) -> str:
    """Why a method's claim has no interval: it diverged (on how many seeds, at which rounds), and for
    FixBN stopping right after T*, that this is its first round with frozen statistics."""
    text = (f"{_label(method)} diverged (non-finite training loss) on {len(stopped)} of {seeds} seeds, at "
            f"round(s) {', '.join(map(str, stopped))}")
    t = _t_star(method)
    if t is not None and set(stopped) == {t + 1}:
        text += (f": round T* + 1 = {t + 1}, its first round with frozen BN statistics (lr {lr:g}, plain "
                 "SGD, the benchmark's shared recipe); a fix that diverges does not repair the damage")
    else:
        text += "; a fix that diverges does not repair the damage"
    return text


def _mean_iv(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2 or not all(math.isfinite(v) for v in values):  # one seed, or a diverged run
        m = float(np.mean(values)) if values else float("nan")
        return m, float("nan"), float("nan")
    iv = estimate(values, method="t")
    return iv.estimate, iv.low, iv.high


@entry(
    "bench-bn-fixes",
    title="FedTAN, HBN, FixBN, FedBN, FedAvg+BN and FedAvg+GN on the same settings",
    summary=("A benchmark no paper has: the four BN fixes (FedTAN, HBN, FixBN, FedBN), FedAvg+BN (the damage) and "
             "FedAvg+GN (the BN-free alternative) on three common settings at quick scale: label skew (Q-DIG, "
             "clients with k classes), feature shift (Q-DOM, one client per styled domain) and small batches with "
             "strong skew (Dirichlet clients, B <= 4). Every method trains on the same partitions with the same "
             "5 seeds, each at its own learning rate tuned on a validation split (same grid, seeds and budget); "
             "each comparison with FedAvg+BN is a paired 95% t-interval over seeds. The settings' scales were "
             "chosen from FedAvg+BN-only calibration runs before any fix ran."),
    look_for=("Each panel is one setting; the dashed line is FedAvg+BN with an iid split of the same data (what BN "
              "reaches without the shift) and the dotted line FedAvg+BN on the skewed split, both at the shared "
              "recipe's rate, so the gap between them is the damage. The bars are every method at its own tuned "
              "rate. A fix repairs the damage when its bar reaches the dashed line; its claim passes when the paired "
              "interval of (fix - FedAvg+BN, both tuned) lies above that damage (the calibration's rule for the "
              "benchmark: repair the whole damage); the rows' 'vs FedAvg+BN' intervals show the gain itself. FedBN keeps one model per client: on the "
              "label-skew settings its client models are scored on the global test set, which is not what FedBN was "
              "designed for (it targets feature shift)."),
    kind="training", seeds={"smoke": 2, "quick": 5, "paper": 5},
    configs={"smoke": _SMOKE_CFG, "quick": _QUICK, "paper": _PAPER},
)
def compute_bench_bn_fixes(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, dict[str, Any]] = {}
    for setting in tqdm(SETTINGS, desc="bench-bn-fixes", unit="setting", disable=not ctx.progress):
        data[setting] = _setting(ctx, config, setting)
    rows: list[dict[str, Any]] = []
    claims = []
    series: dict[str, Any] = {"settings": list(SETTINGS), "methods": list(METHODS),
                              "labels": [_label(m) for m in METHODS], "panels": {}}
    for setting in SETTINGS:
        d = data[setting]
        sc, n_test = d["scores"], d["n_test"]
        bn = sc["fedavg+bn"]
        panel = {"mean": [], "low": [], "high": [], "scale": d["scale"], "metric": metric(setting)}
        for m in (*METHODS, "damaged", "control"):
            mean, lo, hi = _mean_iv(sc[m])
            tuned = d["rates"].get(m)
            row = {"setting": setting, "scale": d["scale"], "method": _ROW_NAMES.get(m) or _label(m),
                   "lr": tuned.rate if tuned else setting_spec(setting, d["scale"], "fedavg+bn")["train"]["lr"],
                   "acc (%)": round(mean, 2),
                   "95% t-interval of the mean": f"[{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else None,
                   "per seed": [round(v, 2) for v in sc[m]]}
            if tuned:
                row["lr tuning"] = tuned.describe()
            bad = sum(not math.isfinite(v) for v in sc[m])
            if bad:
                row["note"] = f"diverged (non-finite loss) on {bad} of {len(sc[m])} seeds"
            if m in METHODS and m != "fedavg+bn" and len(bn) > 1:
                if bad or not all(math.isfinite(v) for v in bn):
                    row["vs FedAvg+BN, paired t"] = row["vs FedAvg+BN, paired bootstrap"] = "a run diverged"
                else:
                    row["vs FedAvg+BN, paired t"] = _fmt(estimate(sc[m], bn, method="t"))
                    row["vs FedAvg+BN, paired bootstrap"] = _fmt(estimate(sc[m], bn, method="bootstrap"))
            rows.append(row)
            if m in METHODS:
                panel["mean"].append(mean)
                panel["low"].append(lo)
                panel["high"].append(hi)
        panel["control"] = _mean_iv(sc["control"])[0]
        panel["damaged"] = _mean_iv(sc["damaged"])[0]
        panel["rates"] = [d["rates"][m].rate if m in d["rates"] else None for m in METHODS]
        series["panels"][setting] = panel
        if len(bn) < 2:
            continue
        slug = setting.replace(" + ", "-").replace(" ", "-")
        claims.append(interval_claim(
            f"{slug}-damage", f"{setting}: the shift hurts FedAvg+BN (iid control - skewed > 0, the shared recipe's "
            "rate)", sc["control"], sc["damaged"],
            seeds=ctx.seeds, n_test=n_test, why="BN is not hurt at this scale: nothing for the fixes to repair"))
        # the calibration's rule (BENCH_REPAIR, ratio 1): a fix repairs the whole damage this entry measures
        damage = float(np.mean(np.asarray(sc["control"], float) - np.asarray(sc["damaged"], float)))
        need = scaled_effect(BENCH_REPAIR, damage) if math.isfinite(damage) else 0.0
        for m in ("fedavg+gn", *FIXES):
            lr = d["rates"][m].rate if m in d["rates"] else setting_spec(setting, d["scale"], m)["train"]["lr"]
            c = interval_claim(
                f"{slug}-{m}", f"{setting}: {_label(m)} repairs FedAvg+BN's whole damage (paired difference >= the "
                f"damage, {need:.2f} pts; each at its tuned rate)", sc[m], bn, threshold=need, seeds=ctx.seeds,
                n_test=n_test, why=_diverged_why(m, d["stopped"][m], len(ctx.seeds), lr) if d["stopped"][m]
                else f"{_label(m)} does not repair FedAvg+BN's whole damage here")
            if d["stopped"][m] and c.interval:  # the rounds the diverged runs stopped at, beside their values
                c = dataclasses.replace(c, interval={**c.interval, "stopped_at": list(d["stopped"][m])})
            claims.append(c)
    notes = [
        "Verdicts: 95% Student t-interval of the per-seed paired difference (the methods share each seed's "
        "initialisation draw and partition); the rows also give the stratified percentile bootstrap of the same "
        "difference (10,000 resamples, seed 0) for comparison. Claims whose interval contains their threshold "
        "(0 for a setting's damage; the setting's measured damage for a fix, which must repair all of it) are "
        "inconclusive and state the smallest effect 5 seeds could detect and about how many seeds would decide them.",
        "Protocols: label-skew settings score every model on the whole test set (FedBN and its per-client models: "
        "their mean there, FedTAN's protocol); the feature-shift setting scores each domain on its own test set "
        "with its client's model (FedBN's protocol; a shared model is the same model on every domain).",
        f"All settings: Q-MLP-BN (GN with 2 groups for FedAvg+GN), R = {ROUNDS} rounds of E = 5 local steps, "
        "plain SGD; HBN with lambda = 0.01, FixBN switching at 50% of the rounds (bnfl's defaults).",
        "Fair rates: every method's learning rate is tuned in every setting on a validation split held out of "
        f"the training set ({', '.join(f'{r:g}' for r in (config.get('tune') or {}).get('grid', []))}; seeds "
        f"0-2; the same budget; each setting's own score; {EDGE_RULE}), then trained at that rate on the 5 seeds (the rows' "
        "'lr' and 'lr tuning'). The damage (iid control - skewed) is FedAvg+BN at the shared recipe's rate "
        "(0.1; 0.05 with small batches), as the calibration measured it before any fix ran.",
        "Calibration (FedAvg+BN only, before any fix ran; rule: among the candidate scales whose damage, iid "
        f"control minus skewed, has its 95% interval above {DAMAGE_MIN:g} pts, the one with the smallest damage, "
        "else the largest): " + "; ".join(
            f"{s}: " + ", ".join(f"{c} damage {v['damage'][1]:+.2f} [{v['damage'][0]:.2f}, {v['damage'][2]:.2f}] "
                                 f"(iid {v['iid']:.2f}, skewed {v['skewed']:.2f})"
                                 for c, v in CALIBRATION.get(s, {}).get("candidates", {}).items())
            + f" -> chose {CHOSEN.get(s, '?')}" for s in SETTINGS) + ".",
    ]
    edges = [f"{setting}: {_label(m)} {t.rate:g}" for setting in SETTINGS
             for m, t in data[setting]["rates"].items() if t.at_edge]
    if edges:
        notes.append("Rates chosen at the grid's edge (the best may lie outside it; the validation scores are in "
                     "the rows' 'lr tuning'): " + "; ".join(edges) + ".")
    for setting in SETTINGS:
        for m, at in data[setting]["stopped"].items():
            if at:
                notes.append(f"{setting}: {_ROW_NAMES.get(m) or _label(m)} diverged (non-finite "
                             f"loss) on {len(at)} of {len(ctx.seeds)} seeds, stopping at round(s) "
                             f"{', '.join(map(str, at))}; no interval exists, so its claim fails and stores the "
                             "per-seed values it has (the diagnosis is in bnfl.experiments.benchmarks.bn_fixes' "
                             "docstring).")
    return {"rows": rows, "paper": [], "claims": claims, "series": series,
            "deviations": list(config.get("deviations", [])), "notes": notes}


@plotter("bench-bn-fixes")
def plot_bench_bn_fixes(result: Result) -> Any:
    s = result.series
    settings = s["settings"]
    fig, axes = new_figure(1, len(settings), width=3.6, height=3.4, squeeze=False)
    x = np.arange(len(s["methods"]))

    def num(v: Any) -> float:
        return float("nan") if v is None else float(v)

    for ax, setting in zip(axes[0], settings, strict=True):
        p = s["panels"][setting]
        mean = np.array([num(v) for v in p["mean"]])
        low, high = np.array([num(v) for v in p["low"]]), np.array([num(v) for v in p["high"]])
        err = np.vstack([mean - low, high - mean])
        err = np.where(np.isfinite(err), err, 0.0)
        ax.bar(x, mean, 0.7, color=[color_for(m) for m in s["methods"]], yerr=err, capsize=3,
               error_kw={"elinewidth": 1.0, "ecolor": "#333333"})
        if p.get("control") is not None and math.isfinite(num(p["control"])):
            ax.axhline(num(p["control"]), color=color_for("fedavg+bn"), ls="--", lw=1.0,
                       label=f"{ALL['fedavg+bn'].label}, iid split")
        if p.get("damaged") is not None and math.isfinite(num(p["damaged"])):
            ax.axhline(num(p["damaged"]), color=color_for("fedavg+bn"), ls=":", lw=1.0,
                       label=f"{ALL['fedavg+bn'].label}, skewed (shared rate)")
        ax.set_xticks(x, s["labels"], rotation=40, ha="right", fontsize=8)
        finite = [v for v in np.concatenate([low, mean]) if math.isfinite(v)]
        bottom = max(0.0, min(finite) - 5.0) if finite else 0.0
        ax.set_ylim(bottom, 100)
        for j, v in enumerate(mean):
            if not math.isfinite(v):  # a method that diverged on some seed has no mean
                ax.text(x[j], bottom + 2.0, "diverged", rotation=90, ha="center", va="bottom", fontsize=7)
        ax.set_title(f"{setting}\n({p['scale']}; {p['metric']})", fontsize=9)
        ax.set_ylabel("test accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:  # outside the panels: the bars fill their lower part
        fig.legend(handles, labels, loc="upper left", fontsize=7, frameon=False)
    fig.suptitle(f"bench-bn-fixes: mean over {len(result.seeds)} seeds, 95% t-interval whiskers "
                 f"({result.profile} profile)", fontsize=10)
    return fig
