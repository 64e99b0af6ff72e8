"""The digits benchmark: Fig. 3 (convergence), Fig. 5 / Table 11 (state of the art), Fig. 7 (E),
Table 12 (centralized), Table 17 (unseen-domain clients, App. G); Tables 15-16 (unequal client
sizes, App. E.6) are :mod:`bnfl.experiments.papers.fedbn.unequal`, on this setting.

All runs share one setting (``_SOTA``): Q-DOM D0-D4, Q-ALEX, one client per domain, B = 32,
lr 0.01, E = 1 local epoch, at quick R = 50 rounds, 5 seeds; every entry reads the runs it needs
from the run cache, so Fig. 3, Fig. 5, Tables 11, 12 and 17 train SingleSet, FedAvg, FedProx and
FedBN once. Tables 15-16 give the clients unequal sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bnfl.data.domains import most_shifted_domain
from bnfl.experiments.calibration import DECIDING_SEED_COUNTS
from bnfl.experiments.claims import at_most, linked, per_seed_claim, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.curves import upticks
from bnfl.experiments.drawing import bar_figure, drawn_by, grouped_bars_on, series_panels
from bnfl.experiments.interval_claims import interval_within
from bnfl.experiments.papers.fedbn import numbers as N
from bnfl.experiments.papers.fedbn import setups as S
from bnfl.experiments.printed import parse_mean_std
from bnfl.experiments.registry import entry, plotter
from bnfl.experiments.training import canonical, load_data
from bnfl.experiments.tuning import EDGE_RULE, SMOKE_TUNE, Tuned
from bnfl.plots import color_for, new_figure

__all__ = ["SOTA_GRID", "sota_runs", "tuned_sota_runs"]

Q_EPOCHS = 50
UNSEEN = ("thin", "fracture")
BUDGET = (f"R = {Q_EPOCHS} rounds of 1 local epoch instead of the reference code's 100 (the text says 300 "
          "epochs): the whole FedBN quick reproduction must fit in 15 minutes on a 2-core CPU")
_QUICK = {"base": S.spec(S.Q_DIGITS, {"rounds": Q_EPOCHS, "train": {"eval_every": Q_EPOCHS}}), "epochs": Q_EPOCHS,
          "unseen": list(UNSEEN), "deviations": [BUDGET]}
_PAPER = {"base": S.P_DIGITS, "epochs": N.ROUNDS_CODE, "unseen": [],
          "deviations": ["R = 100 rounds x 1 local epoch (the reference code's default; the text says 300 epochs)"]}
_SMOKE = {"epochs": 2}
_SOTA = S.profiles(_QUICK, _PAPER, smoke=_SMOKE)
#: the federated methods of Tables 15-17
_KEYS = ("FedAvg", "FedProx", "FedBN")
#: Issue 36: Fig. 5 / Table 11's "best on the mean" (headline row 18) compares the four methods each
#: at its own rate, tuned on a validation split with the same grid, seeds and budget
#: (:func:`bnfl.experiments.tuning.tune_rate`) in exactly the setting of the compared runs, the grid
#: from the paper's common 0.01 upwards, every method scored as the claim judges it (each domain's accuracy
#: under FedBN's protocol, equal-weight mean over domains). The common-rate runs stay as they are: the
#: table, the per-domain checks and the other FedBN entries read them.
#: On Q-DOM every method chose the grid's top rate with grids 0.005-0.05, 0.005-0.1 and 0.01-0.2 (none
#: chose below 0.05), so the grid runs from 0.02 to 0.5, five rates as before.
SOTA_GRID = (0.02, 0.05, 0.1, 0.2, 0.5)
_TUNE_NOTE = ("FedBN best on the mean: each method at its own learning rate, tuned on a 20% validation split of "
              f"the training set over {list(SOTA_GRID)} with seeds 0-2 ({EDGE_RULE}), scored by the mean over domains of each "
              f"domain's validation accuracy (the paper states one rate, {N.LR:g}, for all); the table and the "
              "per-domain checks stay at the common rate")
_FIG3 = S.profiles(_QUICK | {"tune": {"grid": list(SOTA_GRID)}, "deviations": [BUDGET, (
    "FedBN converges faster ('fair-' claims, headline row 20): FedAvg and FedBN each at its own learning rate, tuned "
    f"as in Fig. 5 / Table 11 (a 20% validation split, {list(SOTA_GRID)}, seeds 0-2, the mean over domains; {EDGE_RULE}); the "
    "curves and the other claims stay at the paper's common rate")]}, _PAPER,
    smoke=_SMOKE | {"tune": {"grid": [0.01, 0.05], **SMOKE_TUNE}})
_T17 = S.profiles(_QUICK | {"tune": {"grid": list(SOTA_GRID)}, "deviations": [BUDGET, (
    "Table 17's comparisons (headline row 22): FedAvg, FedProx and FedBN each at its own learning rate, tuned as in "
    f"Fig. 5 / Table 11 (a 20% validation split, {list(SOTA_GRID)}, seeds 0-2, the mean over domains; {EDGE_RULE}); the table's "
    "first rows and the figure stay at the paper's common rate")]}, _PAPER | {"unseen": ["morpho:global", "morpho:local"]},
    smoke=_SMOKE | {"tune": {"grid": [0.01, 0.05], **SMOKE_TUNE}})
_SOTA_TUNED = S.profiles(_QUICK | {"tune": {"grid": list(SOTA_GRID)}, "deviations": [BUDGET, _TUNE_NOTE]}, _PAPER,
                         smoke=_SMOKE | {"tune": {"grid": [0.01, 0.05], **SMOKE_TUNE}})


def sota_runs(ctx: Context, config: dict[str, Any], keys: tuple[str, ...] = tuple(S.ROWS)) -> dict[str, list]:
    """The runs of Fig. 5 / Table 11 (paper row name -> runs over the context's seeds)."""
    return {k: S.fedbn_runs(ctx, S.spec(config["base"], S.variant(k)), unseen=config.get("unseen", ())) for k in keys}


def tuned_sota_runs(ctx: Context, config: dict[str, Any],
                    keys: tuple[str, ...] = tuple(S.ROWS)) -> tuple[dict[str, list], dict[str, Tuned]]:
    """Each method ``keys`` of Fig. 5 / Table 11 at its own tuned rate over the context's seeds, and the
    rates (:data:`SOTA_GRID`, ``config["tune"]``). A method whose tuned rate is the common one reads the
    common-rate runs (the same spec and protocol: the run cache holds them)."""
    return S.tuned_fedbn_runs(ctx, config["base"], keys, config["tune"], unseen=config.get("unseen", ()))


def _domains(runs: dict[str, list]) -> list[str]:
    return list(next(iter(runs.values()))[0]["domains"])


def _n_test(runs: dict[str, list]) -> int:
    return min(min(r.get("n_test_domain") or [r["n_test"]]) for rs in runs.values() for r in rs)


def _fmt(m: float, s: float) -> str:
    return f"{m:.2f}" if not np.isfinite(s) else f"{m:.2f} ({s:.2f})"


def _table(runs: dict[str, list], domains: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, stats = [], {}
    for k, rs in runs.items():
        m, s = S.per_domain_stats(rs)
        means = [float(np.mean(r["domain_acc"])) for r in rs]
        stats[k] = {"mean": m, "std": s, "avg": float(np.mean(means)),
                    "avg_std": float(np.std(means, ddof=1)) if len(means) > 1 else float("nan")}
        rows.append({"method": k, **{d: _fmt(a, b) for d, a, b in zip(domains, m, s, strict=True)},
                     "mean": _fmt(stats[k]["avg"], stats[k]["avg_std"]), "seeds": len(rs)})
    return rows, stats


def _paper_rows(table: tuple[tuple[str, tuple[str, ...]], ...], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for name, cells in table:
        vals = [parse_mean_std(c)[0] if "(" in c else float(c) for c in cells]
        out.append({"method": name, **dict(zip(columns, cells, strict=True)), "mean": f"{np.mean(vals):.2f}"})
    return out


def _bar_series(domains: list[str], stats: dict[str, Any], paper_table: Any, *, std: bool = True) -> dict[str, Any]:
    """What the per-domain bar figures draw: our mean (and seed std) per method and domain beside the
    means the paper prints (its "Single" row named SingleSet, as ours)."""
    return {"domains": domains, "methods": list(stats),
            "mean": {k: list(map(float, v["mean"])) for k, v in stats.items()},
            **({"std": {k: [float(x) for x in v["std"]] for k, v in stats.items()}} if std else {}),
            "paper_columns": list(N.DIGITS),
            "paper": {{"Single": "SingleSet"}.get(n, n): [float(c.split()[0]) for c in cells] for n, cells in paper_table}}


def _sota_result(ctx: Context, config: dict[str, Any], paper_table: Any, counted_in: str = "") -> dict[str, Any]:
    runs = sota_runs(ctx, config)
    domains = _domains(runs)
    rows, st = _table(runs, domains)
    split = load_data(config["base"]["data"], data_root=ctx.data_root)
    shifted, dist = most_shifted_domain(split)
    n_test = _n_test(runs)
    fb = st["FedBN"]
    others = [k for k in runs if k != "FedBN"]
    seeds = list(ctx.seeds)
    acc = {k: np.array([r["domain_acc"] for r in rs], dtype=float) for k, rs in runs.items()}  # (seeds, domains)
    claims = []
    for j, d in enumerate(domains):
        best = max(others, key=lambda k: st[k]["mean"][j])
        claims.append(per_seed_claim(f"fedbn-{d}", f"{d}: FedBN >= max(others) - 0.5", acc["FedBN"][:, j], -0.5,
                                     baseline=acc[best][:, j], seeds=seeds, n_test=n_test,
                                     detail=f"FedBN {fb['mean'][j]:.2f} vs {best} {st[best]['mean'][j]:.2f}"))
    claims.append(S.shift_damage(ctx, config["base"], runs["FedAvg"]))  # the headline's precondition (row 18)
    tuned, rates = tuned_sota_runs(ctx, config) if config.get("tune") else ({}, {})
    if tuned:  # the headline claim: each method at its own tuned rate
        t_rows, t_st = _table(tuned, domains)
        rows += [{**r, "method": f"{r['method']} (tuned lr {rates[r['method']].rate:g})"} for r in t_rows]
    judged, j_st = (tuned, t_st) if tuned else (runs, st)
    best = max(others, key=lambda k: j_st[k]["avg"])
    at = " (each at its own tuned rate)" if tuned else ""
    lr = {k: f" (lr {t.rate:g})" for k, t in rates.items()}
    chosen = [f"{k} {t.describe()}" + (" (the grid's edge)" if t.at_edge else "") for k, t in rates.items()]
    claims.append(per_seed_claim("fedbn-best-mean", f"FedBN is strictly best on the mean over domains{at}",
                                 S.seed_means(judged["FedBN"]), 0.0, baseline=S.seed_means(judged[best]), seeds=seeds,
                                 n_test=n_test * len(domains),
                                 detail=f"FedBN{lr.get('FedBN', '')} {j_st['FedBN']['avg']:.2f} vs {best}{lr.get(best, '')} "
                                        f"{j_st[best]['avg']:.2f}"))
    gains = acc["FedBN"] - acc["FedAvg"]  # (seeds, domains), paired by seed
    gain = gains.mean(axis=0)
    runner_up = max((j for j in range(len(gain)) if j != shifted), key=lambda j: gain[j])
    claims.append(per_seed_claim("gain-largest-on-most-shifted",
                                 f"FedBN's gain over FedAvg is largest on the most-shifted domain ({domains[shifted]})",
                                 gains[:, shifted] - gains[:, runner_up], 0.0, seeds=seeds, n_test=n_test,
                                 detail="gains " + ", ".join(f"{d} {g:+.2f}" for d, g in zip(domains, gain, strict=True))
                                        + f"; runner-up {domains[runner_up]}; Wasserstein to " + domains[0] + ": "
                                        + ", ".join(f"{d} {v:.3f}" for d, v in zip(domains, dist, strict=True))))
    if all(np.isfinite(v["avg_std"]) for v in st.values()):
        claims.append(at_most("fedbn-smaller-variance", "FedBN's seed std of the mean is the smallest (reported)",
                              fb["avg_std"], min(st[k]["avg_std"] for k in others), soft=True,
                              detail=", ".join(f"{k} {v['avg_std']:.2f}" for k, v in st.items())))
    if counted_in:  # the same runs and checks as another entry's: shown here, counted there
        claims = [linked(c, counted_in) for c in claims]
    return {"rows": rows, "paper": _paper_rows(paper_table, N.DIGITS), "claims": claims,
            "deviations": list(config.get("deviations", [])), "series": _bar_series(domains, st, paper_table),
            "notes": ["Columns: our Q-DOM domains stand in for the paper's datasets (SVHN, USPS, SynthDigits, "
                      "MNIST-M, MNIST); they are not matched one to one. The paper's most-shifted domain is SVHN; "
                      f"ours is defined from the data: {domains[shifted]}.",
                      "FedBN and SingleSet: each client's own model on its own test set; FedAvg and FedProx: the "
                      "global model (FedBN's protocol). FedProx mu = 0.01 (the reference code's default).",
                      *([f"Tuned rates (validation: mean over domains, %): "
                         f"{'; '.join(chosen)}. The rows marked "
                         "'tuned' are those runs, at the entry's seeds; 'FedBN best on the mean' is judged on "
                         "them."] if rates else [])]}


_SOTA_PROSE = dict(
    look_for=("FedBN (local BN) against the three baselines on every domain. The catalog's checks: FedBN at "
              "least as good as the best other method on each domain (within 0.5), best on the mean, and its "
              "gain over FedAvg largest on the domain whose pixel statistics are farthest from the clean one. "
              "One test sample of a domain is 1.39 points at quick scale."),
    kind="training",
    # Fig. 5 / Table 11's headline (FedBN best on the mean, row 18) was undecided at 5 seeds with about
    # 10 deciding it: 10 seeds, the first 5 the same lock-step group as the other digits entries' runs
    seeds=DECIDING_SEED_COUNTS,
    seed_groups=(S.SEEDS["quick"],),
    configs=_SOTA_TUNED,
)


@entry("fedbn-fig5", title="Comparison with the state of the art on digits (FedBN, FedProx, FedAvg, SingleSet)",
       summary=("Fig. 5: test accuracy per digits dataset, mean over 5 seeds: FedBN has the highest accuracy, "
                "its largest gain is on SVHN, the dataset most different from the others."), **_SOTA_PROSE)
def compute_fig5(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    return _sota_result(ctx, config, N.TABLE11)


@entry("fedbn-tab11", title="Fig. 5 in numbers: digits, 10%, E = 1, mean (std) over 5 seeds",
       summary=("Table 11: FedBN 71.04 / 96.97 / 83.19 / 78.33 / 96.57 on SVHN / USPS / SynthDigits / MNIST-M / "
                "MNIST, best on every dataset; mean 85.22 vs FedAvg 82.68."), **_SOTA_PROSE)
def compute_tab11(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    return _sota_result(ctx, config, N.TABLE11, counted_in="fedbn-fig5")


def _bars(result: Result, title: str) -> Any:
    s = result.series
    colors = {k: color_for(S.ROWS.get(k, k), i) for i, k in enumerate(s["methods"])}
    fig, (a, b) = new_figure(1, 2, width=5.0, height=3.4)
    for ax, cols, data, err, name in ((a, s["domains"], s["mean"], s.get("std"), f"ours ({result.profile})"),
                                      (b, s["paper_columns"], s["paper"], None, "paper")):
        shown = {k: data[k] for k in s["methods"] if k in data}
        grouped_bars_on(ax, cols, shown, colors=colors, errors=err, title=name, rotation=20)
    a.legend(fontsize=7, loc="lower left")
    fig.suptitle(title)
    return fig


plotter("fedbn-fig5")(drawn_by(_bars, "FedBN Fig. 5: accuracy per domain (mean ± std over seeds)"))
plotter("fedbn-tab11")(drawn_by(_bars, "FedBN Table 11: accuracy per domain"))


# -- Fig. 3 and Fig. 7: convergence ---------------------------------------------------------------
def _curve(runs: list[dict[str, Any]], key: str = "eval_loss") -> np.ndarray:
    return np.mean([r[key] for r in runs], axis=0)


def _loss_claims(tag: str, avg_runs: list[dict[str, Any]], bn_runs: list[dict[str, Any]], seeds: Sequence[int],
                 slug: str = "") -> list[Any]:
    """"Faster" (FedBN's loss at or below FedAvg's in >= 80% of rounds) and "smoother" (no more
    upticks than FedAvg), each per seed (paired: the two methods share seeds and partitions)."""
    avg, bn = _curve(avg_runs), _curve(bn_runs)
    below = [float(np.mean(np.asarray(b["eval_loss"]) <= np.asarray(a["eval_loss"])))
             for a, b in zip(avg_runs, bn_runs, strict=True)]
    out = [per_seed_claim(f"{slug}faster", f"{tag}FedBN's training loss <= FedAvg's at >= 80% of rounds", below, 0.8,
                          seeds=seeds, detail=f"{100 * float(np.mean(below)):.0f}% of {avg.size} rounds (mean over "
                          f"seeds); last round FedAvg {avg[-1]:.4f}, FedBN {bn[-1]:.4f}")]
    if avg.size > 2:
        ups_avg = [upticks(r["eval_loss"]) for r in avg_runs]
        ups_bn = [upticks(r["eval_loss"]) for r in bn_runs]
        out.append(per_seed_claim(f"{slug}smoother", f"{tag}rounds where the loss rose: FedBN <= FedAvg", ups_bn, 0.0,
                                  baseline=ups_avg, seeds=seeds, side="below",
                                  detail=f"upticks per seed: FedAvg {ups_avg}, FedBN {ups_bn} of {avg.size - 1} steps"))
    return out


@entry(
    "fedbn-fig3",
    title="Training loss: FedBN converges faster and more smoothly than FedAvg",
    summary=("Fig. 3: training loss against communication rounds on the digits benchmark (E = 1): FedBN's "
             "loss goes down faster and more smoothly than FedAvg's, as Corollary 4.6 predicts."),
    look_for=("The loss after each round's aggregation, of the model each client then holds, in eval mode, "
              "on its whole training set (the curve the reference code prints). FedAvg's global model "
              "normalises every domain with averaged statistics; FedBN's clients keep theirs."),
    kind="training", seeds=S.SEEDS, configs=_FIG3,
)
def compute_fig3(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = sota_runs(ctx, config, ("FedAvg", "FedBN"))
    avg, bn = _curve(runs["FedAvg"]), _curve(runs["FedBN"])
    r = np.arange(1, avg.size + 1)
    marks = [t for t in (1, 10, 30, len(r)) if t <= len(r)]
    rows = [{"round": int(t), "FedAvg loss": round(float(avg[t - 1]), 4), "FedBN loss": round(float(bn[t - 1]), 4)}
            for t in marks]
    claims = _loss_claims("", runs["FedAvg"], runs["FedBN"], list(ctx.seeds))
    claims.append(S.shift_damage(ctx, config["base"], runs["FedAvg"]))  # the headline's precondition (row 20)
    if config.get("tune"):  # headline row 20: each method at its own rate
        tuned, rates = tuned_sota_runs(ctx, config, ("FedAvg", "FedBN"))
        claims += _loss_claims("each at its own tuned rate: ", tuned["FedAvg"], tuned["FedBN"], list(ctx.seeds),
                               slug="fair-")
        rows += [{"round": f"last, {k} at its tuned lr {t.rate:g}", f"{k} loss": round(float(_curve(tuned[k])[-1]), 4)}
                 for k, t in rates.items()]
    return {"rows": rows, "paper": [], "claims": claims, "deviations": list(config["deviations"]),
            "series": {"round": r.tolist(), "FedAvg": avg.round(5).tolist(), "FedBN": bn.round(5).tolist(),
                       "train_FedAvg": _curve(runs["FedAvg"], "train_loss").round(5).tolist(),
                       "train_FedBN": _curve(runs["FedBN"], "train_loss").round(5).tolist()},
            "notes": ["Mean over seeds. The dashed lines are bnfl's own training loss (the clients' mini-batch "
                      "losses during the round, in train mode): there the two methods nearly coincide, because "
                      "in train mode every client normalises with its own batch statistics in both methods.",
                      "The paper plots the curve without numbers; no printed values to compare."]}


plotter("fedbn-fig3")(lambda r: series_panels(
    [("FedBN Fig. 3: training loss on the digit domains",
      {f"{k} ({how})": (r.series["round"], r.series[pre + k], own) for k in ("FedAvg", "FedBN")
       for pre, how, own in (("", "eval mode, after aggregation", {}), ("train_", "mini-batches", {"ls": "--", "lw": 1}))})],
    "", styles=S.STYLES, xlabel="communication round", ylabel="training loss", logy=True, width=5.0, height=3.4))


_E7 = (1, 4, 16)


@entry("fedbn-fig7", title="Convergence for several local epochs E (App. E.1)",
       summary="Fig. 7: FedBN converges faster than FedAvg for every number of local epochs E.",
       look_for=("One panel per E, at a fixed budget of T epochs (T/E rounds): FedBN's loss below FedAvg's in each. "
                 "The paper's list of E is stripped; the catalog uses {1, 4, 16}."),
       kind="training",
       seeds=S.SWEEP_SEEDS,  # fedbn-fig4 (a)'s runs (same E, budget and seeds): trained once
       configs=S.profiles(_QUICK | {"E": list(_E7)}, _PAPER | {"E": list(_E7)}, smoke=_SMOKE | {"E": [1, 2]}))
def compute_fig7(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    series, claims, rows = {}, [], []
    for E in config["E"]:
        specs = {k: S.spec(config["base"], S.variant(k), S.local_epochs(int(E), int(config["epochs"])))
                 for k in ("FedAvg", "FedBN")}
        runs = {k: S.fedbn_runs(ctx, s) for k, s in specs.items()}
        avg, bn = _curve(runs["FedAvg"]), _curve(runs["FedBN"])
        series[str(E)] = {"epoch": (np.arange(1, avg.size + 1) * int(E)).tolist(), "FedAvg": avg.round(5).tolist(),
                          "FedBN": bn.round(5).tolist()}
        mine = _loss_claims(f"E = {E}: ", runs["FedAvg"], runs["FedBN"], list(ctx.seeds), slug=f"e{E}-")
        if all(canonical(s) == canonical(S.spec(config["base"], S.variant(k))) for k, s in specs.items()):
            mine = [linked(c, "fedbn-fig3") for c in mine]  # fedbn-fig3's setting and checks (5 seeds there)
        claims += mine
        rows.append({"E": int(E), "rounds": int(avg.size), "FedAvg final loss": round(float(avg[-1]), 4),
                     "FedBN final loss": round(float(bn[-1]), 4)})
    return {"rows": rows, "paper": [], "claims": claims, "deviations": list(config["deviations"]),
            "series": series, "notes": ["Loss as in fedbn-fig3: eval mode, after aggregation, on the clients' "
                                        "training sets; mean over seeds."]}


plotter("fedbn-fig7")(lambda r: series_panels(
    [(f"E = {E}", {k: (c["epoch"], c[k]) for k in ("FedAvg", "FedBN")}) for E, c in r.series.items()],
    "FedBN Fig. 7: convergence for several local epochs E", styles=S.STYLES, xlabel="local epochs trained",
    ylabel="training loss", logy=True, width=3.3, height=3.0, legend_size=10))


# -- Table 12: centralized ---------------------------------------------------------------------------
@entry(
    "fedbn-tab12",
    title="FedBN vs centralized training on digits (App. E.3)",
    summary=("Table 12: centralized training on the pooled digits (one shared BN) reaches 86.28 on average, "
             "FedBN 85.22: federated with local BN is close to pooling the data."),
    look_for=("Centralized pools all domains into one model with one set of BN statistics; FedBN trains "
              "apart but keeps its statistics local. The catalog's check: FedBN within 3 points of it."),
    kind="training", seeds=S.SEEDS, configs=_SOTA,
)
def compute_tab12(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = {"Centralized": S.fedbn_runs(ctx, S.spec(config["base"], S.variant("centralized")), unseen=config.get("unseen", ())),
            "FedBN": sota_runs(ctx, config, ("FedBN",))["FedBN"]}
    domains = _domains(runs)
    rows, st = _table(runs, domains)
    claims = [per_seed_claim("fedbn-near-centralized", "FedBN mean >= Centralized mean - 3",
                             S.seed_means(runs["FedBN"]), -3.0, baseline=S.seed_means(runs["Centralized"]),
                             seeds=list(ctx.seeds), n_test=_n_test(runs) * len(domains),
                             detail=f"FedBN {st['FedBN']['avg']:.2f} vs Centralized {st['Centralized']['avg']:.2f}")]
    return {"rows": rows, "paper": _paper_rows(N.TABLE12, N.DIGITS), "claims": claims,
            "deviations": list(config["deviations"]), "series": _bar_series(domains, st, N.TABLE12),
            "notes": ["Centralized: SGD on the pooled training data of all domains with batch K*B = 160 "
                      "(bnfl's centralized baseline), evaluated on every domain's test set."]}


plotter("fedbn-tab12")(drawn_by(_bars, "FedBN Table 12: FedBN vs centralized training"))


# -- Table 17: unseen domains ------------------------------------------------------------------------
@entry("fedbn-tab17", title="Testing on unseen-domain clients (App. G)",
       summary=("Table 17: a client from a new domain (Morpho-MNIST thinning/thickening, swelling/fractures) uses "
                "the average of the trained BN affine parameters with its own batch statistics: FedBN 92.45 / "
                "94.61 vs FedProx 92.35 / 94.31, comparable."),
       look_for=("Trained on the five domains, tested on two styles never seen ('thin', 'fracture' of the same test "
                 "digits). FedBN has no BN of its own for a new client; the paper's rule averages the clients' "
                 "affine parameters and normalises with the new client's statistics. The paper: FedBN 92.45 / "
                 "94.61, FedProx 92.35 / 94.31, FedAvg 91.28 / 93.55."),
       kind="training", seeds=S.SEEDS, configs=_T17)
def compute_tab17(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = sota_runs(ctx, config, _KEYS)
    styles = list(config.get("unseen") or [])
    if not styles:
        raise ValueError("fedbn-tab17 needs unseen domains (config 'unseen')")
    acc = {k: {s: [r["unseen_acc"][s] for r in rs] for s in styles} for k, rs in runs.items()}
    mean = {k: {s: float(np.mean(v)) for s, v in a.items()} for k, a in acc.items()}
    n = runs["FedBN"][0]["n_test_unseen"]
    tuned, rates = tuned_sota_runs(ctx, config, _KEYS) if config.get("tune") else ({}, {})
    at = " (each at its own tuned rate)" if tuned else ""
    table = acc  # the rows: the paper's common rate
    if tuned:  # the claims (headline row 22): each method at its own rate
        acc = {k: {s: [r["unseen_acc"][s] for r in rs] for s in styles} for k, rs in tuned.items()}
        mean = {k: {s: float(np.mean(v)) for s, v in a.items()} for k, a in acc.items()}

    seeds = list(ctx.seeds)
    why = ("FedBN's new client normalises with statistics of its own data (a held-apart half), which absorbs a style that moves the "
           "pixel statistics ('thin' removes ink); the shared model normalises with the averaged statistics of the "
           "training domains. Morpho-MNIST's perturbations, on 28x28 digits, move them less")
    claims = [S.shift_damage(ctx, config["base"], runs["FedAvg"])]  # the headline's precondition (row 22)
    for s in styles:
        detail = f"FedBN {mean['FedBN'][s]:.2f} vs FedProx {mean['FedProx'][s]:.2f}"
        if len(seeds) >= 2:
            claims.append(interval_within(f"fedbn-fedprox-{s}", f"{s}: |FedBN - FedProx| <= 3 (comparable){at}",
                                          acc["FedBN"][s], acc["FedProx"][s], 3.0, seeds=seeds, n_test=n,
                                          detail=detail, why=why))
        else:  # one seed (smoke): the single difference
            claims.append(within(f"fedbn-fedprox-{s}", f"{s}: |FedBN - FedProx| <= 3 (comparable){at}", mean["FedBN"][s],
                                 mean["FedProx"][s], 3.0, noise=100.0 / n, noise_label=f"one test sample of {n}",
                                 detail=detail, why=why))
        claims.append(per_seed_claim(f"fedbn-fedavg-{s}", f"{s}: FedBN >= FedAvg - 1{at}", acc["FedBN"][s], -1.0,
                                     baseline=acc["FedAvg"][s], seeds=seeds, n_test=n,
                                     detail=f"FedBN {mean['FedBN'][s]:.2f} vs FedAvg {mean['FedAvg'][s]:.2f}"))
    rows = [{"method": k, **{s: f"{np.mean(table[k][s]):.2f}" + (f" ({np.std(table[k][s], ddof=1):.2f})"
                                                                  if len(table[k][s]) > 1 else "")
                             for s in styles}} for k in _KEYS]
    rows += [{"method": f"{k} (tuned lr {t.rate:g})", **{s: f"{mean[k][s]:.2f}" for s in styles}} for k, t in rates.items()]
    paper = [{"method": n_, **dict(zip(N.TABLE17_COLUMNS, cells, strict=True))} for n_, cells in N.TABLE17]
    return {"rows": rows, "paper": paper, "claims": claims, "deviations": list(config["deviations"]),
            "series": {"styles": styles, "methods": list(_KEYS),
                       "mean": {k: {s: float(np.mean(v)) for s, v in a.items()} for k, a in table.items()},
                       "paper": {n_: [float(c) for c in cells] for n_, cells in N.TABLE17}},
            "notes": [f"Unseen test sets: the {n} test digits of the five training domains, redrawn as 'thin' "
                      "(2x2 min-filter) and 'fracture' (a 2-pixel band dropped), stand-ins for Morpho-MNIST's "
                      "global and local perturbations.",
                      "FedBN's new client, as the paper's App. G describes it (after SiloBN): the shared weights, the "
                      "mean of the five clients' BN gamma and beta, and BN statistics computed on the new client's own "
                      "data. Here those statistics come from one half of each unseen set (seeded split) and every "
                      "method is scored on the other half, so no test digit is normalised by statistics it took part "
                      "in; FedAvg/FedProx: the global model on the same half.",
                      *([f"Tuned rates (Fig. 5 / Table 11's tuning; the claims read these runs, the figure the common "
                         f"rate): {'; '.join(f'{k} {t.describe()}' for k, t in rates.items())}."] if rates else [])]}


plotter("fedbn-tab17")(lambda r: bar_figure(
    [f"unseen '{st}'" for st in r.series["styles"]],
    {k: [r.series["mean"][k][st] for st in r.series["styles"]] for k in r.series["methods"]},
    "FedBN Table 17: clients from unseen domains", colors={k: color_for(S.ROWS[k]) for k in r.series["methods"]}))
