"""HBN's ablations and sensitivities: Table 6 (each component of HBN replaced), Fig. 5 (lambda of
eq. 11 against the client activation ratio C) and Fig. 6 (the number of local epochs).

Quick profile (issue 25): 3 seeds in lock-step, claims as 95% t-intervals paired by seed; HBN with
eq. 11's lambda scaled to T = 60 (Fig. 5 scales each of the paper's lambdas the same way) and tested
with the statistics of the evaluated round's clients (Sec. 4.1). Table 6 and Fig. 5 (CIFAR-10) train
at HBN's rate chosen by 3 seeds (``setups.Q_LR3``, hbn-tab1's protocol); Fig. 6 (CIFAR-100) at the
catalog's 0.005 x B / 4 for every method, as hbn-tab2.
"""

from __future__ import annotations

import math
from typing import Any

from bnfl.experiments.claims import Claim, info
from bnfl.experiments.core import Context, Result
from bnfl.experiments.drawing import grouped_bars, line_panels
from bnfl.experiments.evidence import finals
from bnfl.experiments.papers.hbn import numbers as N
from bnfl.experiments.papers.hbn import regime
from bnfl.experiments.papers.hbn import setups as S
from bnfl.experiments.registry import entry, plotter
from bnfl.experiments.training import mean_std
from bnfl.plots import color_for, new_figure

_Q_NOTE = "CIFAR -> Q-DIG, K = 20 Dirichlet(0.6) clients, Q-SCNN, E = 1 epoch, T = 60"
_LR_NOTE = ("HBN's rate chosen at B = 4 on a validation split by the mean of 3 seeds (hbn-tab1's protocol, setups.Q_LR3), "
            "scaled linearly with B")
_Q_HBN = S.hbn_options("CIFAR-10")
#: Table 6 at the headline seeds (issue 36).
TAB6_SEEDS = {**S.SEEDS, "quick": regime.SEEDS}
#: Why hbn-tab6's full HBN (94.91 +- 2.33 before issue 25) sat below the reference-variants benchmark's
#: 97.04 +- 0.16 (benchmarks/hbn_reference_variants.py, docs/hbn-reference-code.md): measured by
#: benchmarks/hbn_tab6_gap.py (same lr 0.005, lambda 0.01, EMA evaluation, seeds 0 1 2, T = 60).
TAB6_GAP_NOTE = (
    "Why full HBN read 94.91 ± 2.33 here before issue 25 and 97.04 ± 0.16 in benchmarks/hbn_reference_variants.py: "
    "both train HBN at lr 0.005 (HBN's one-seed pick was 0.005), lambda = 0.01, EMA test statistics, seeds 0 1 2, "
    "T = 60; they differ in the lr decay (this entry x0.998 a round, the benchmark none) and the engine (3 seeds in "
    "lock-step on the batched engine vs one by one on the sequential engine). Measured by benchmarks/hbn_tab6_gap.py "
    "(seed 0 / 1 / 2): sequential, no decay 97.22 / 96.94 / 96.94 (the benchmark); sequential with the decay 96.11 / "
    "97.78 / 96.39 (96.76 ± 0.89); lock-step, no decay 97.22 / 96.67 / 96.67 (96.85 ± 0.32); lock-step with the decay "
    "(this entry's setting before issue 25) 96.11 / 93.61 / 96.94 (95.56 ± 1.75). Neither difference lowers accuracy by itself (decay "
    "alone: -1.11 / +0.84 / -0.55; engine alone: 0 / -0.28 / -0.28, at most one test sample): seed 1 lands 3 pts "
    "lower only under both, a perturbation (the batched engine's rounding) sending one trajectory elsewhere. The gap "
    "is HBN's seed spread at the quick scale with 3 seeds, not a bug or a protocol effect. (The committed 94.91 ± "
    "2.33 was computed at an earlier revision; at this one the same setting gives 95.56 ± 1.75; not traced further.)")

# -- Table 6 -------------------------------------------------------------------------------------
#: Table 6's rows as HBN options (bnfl.fl.HBN).
ABLATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    # tested with the server's statistics: recomputing them at test would run eq. 7, the piece (1) replaces
    "(1)": ("Equation 7 <- moving average", {"client_stats": "moving-average", "eval_stats": "global"}),
    "(2)": ("Equation 8 <- weighted average", {"pooling": "average"}),
    "(3)": ("Equation 9 <- only global statistics", {"alpha": "global"}),
    "(4)": ("Equation 9 <- only batch statistics", {"alpha": "batch"}),
    "(5)": ("Equation 9 <- fix ratio at 1:1", {"alpha": "equal"}),
    "": ("FedAvg+HBN", {}),
}
_TAB6_QUICK = regime.quick_config("skew-0.6", "CIFAR-10")
_TAB6_QUICK["deviations"] = ["every ablation tuned on its own spec (regime.fair; the paper trains each at HBN's rate); "
                             "ablations (1) and (3)-(5) train seed by seed (the batched engine cannot take them)",
                             *_TAB6_QUICK["deviations"]]
#: Row 11 on the other stand-ins (issue 47, part 2): each MLP stand-in whose BN-only calibration shows the label
#: skew's damage at phi = 0.6 (regime.ALSO_CHOSEN); the same ablations and fair rates there.
_TAB6_QUICK["stand_ins"] = regime.also_stand_ins("skew-0.6")
_TAB6_QUICK["deviations"] = [*_TAB6_QUICK["deviations"], regime.also_note("skew-0.6")]
_TAB6 = S.profiles(_TAB6_QUICK,
                   {"base": S.P_BASES["CIFAR-10"], "lr": S.P_LR["CIFAR-10"], "hbn": S.P_HBN,
                    "deviations": ["every ablation at HBN's chosen rate (Table 8)", S.DECAY_NOTE]})


def _ablation_runs(ctx: Context, config: dict[str, Any], base: dict[str, Any]) -> tuple[dict, dict, list]:
    """Every ablation's runs on ``base``: ``{index: runs}``, ``{index: per-seed accuracies}`` and all runs."""
    runs = {idx: S.run(ctx, config["lr"], base, "HBN", hbn=config.get("hbn"), **opts)
            for idx, (_, opts) in ABLATIONS.items()}
    return runs, {idx: finals(rs) for idx, rs in runs.items()}, [r for rs in runs.values() for r in rs]


def _worst(ctx: Context, per_seed: dict[str, list[float]], every: list, suffix: str = "") -> Any:
    """Row 11's claim ``moving-average-worst`` (``... <suffix>`` on another stand-in): (1) below the worst
    of the other ablations by mean."""
    others = {i: S.mean(v) for i, v in per_seed.items() if i != "(1)" and math.isfinite(S.mean(v))}
    worst = min(others, key=lambda i: others[i]) if others else ""
    at, on = (f" {suffix}", f"{suffix}: ") if suffix else ("", "")
    return S.compare(ctx, f"moving-average-worst{at}", f"{on}(1) (moving averages for eq. 7) is the worst of the six",
                     per_seed["(1)"], 0.0, baseline=per_seed[worst], side="below", runs=every,
                     detail=f"(1) {S.fmt(per_seed['(1)'])}; worst of the rest {worst or 'HBN'} {S.fmt(per_seed[worst])}")


@entry(
    "hbn-tab6",
    title="Ablations of HBN",
    summary=("Table 6: replacing eq. 7 by moving averages collected during training costs the most (72.25 vs "
             "78.22); the naive weighted average for eq. 8, fixed alphas (global only, batch only, 1:1) each cost "
             "less; full HBN is best."),
    look_for="Each row replaces one piece of HBN; compare with the last row (full HBN).",
    kind="training", configs=_TAB6, seeds=TAB6_SEEDS,
)
def compute_tab6(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs, per_seed, every = _ablation_runs(ctx, config, config["base"])
    full = per_seed[""]
    claims = regime.preconditions(ctx, config, config["base"])
    for idx, (name, _) in ABLATIONS.items():
        if not idx:
            continue
        claims.append(S.compare(ctx, f"full-vs-{idx}", f"full HBN >= {idx} {name} - 0.5 pt", full, -0.5,
                                baseline=per_seed[idx], runs=every, detail=f"HBN {S.fmt(full)} vs {S.fmt(per_seed[idx])}"))
    claims.append(_worst(ctx, per_seed, every))
    rows = [{"index": idx, "ablation": name, "acc (%)": S.fmt(per_seed[idx]), "seeds": len(runs[idx])}
            for idx, (name, _) in ABLATIONS.items()]
    for at, other in (config.get("stand_ins") or {}).items():  # row 11 on the other stand-ins, after its damage
        claims.append(regime.precondition_claim(ctx, other["base"], config["precondition"], name=f"bn-damage {at}"))
        o_runs, o_seed, o_every = _ablation_runs(ctx, config, other["base"])
        claims.append(_worst(ctx, o_seed, o_every, at))
        rows += [{"index": f"{idx or 'full'} on {at}", "ablation": name, "acc (%)": S.fmt(o_seed[idx]), "seeds": len(o_runs[idx])}
                 for idx, (name, _) in ABLATIONS.items()]
    paper = [{"index": i, "ablation": n, "acc (%)": a} for i, n, a in N.TABLE6]
    stats = {idx: mean_std(v) for idx, v in per_seed.items()}
    notes = ["Table 6's (2) = 77.90 equals HBN at lr 0.005 in Table 8 (flagged by the catalog as a possible "
             "coincidence).", "acc: mean ± sample std over seeds."]
    if TAB6_GAP_NOTE and "precondition" not in config:  # the gap note is about the Q-DIG runs before issue 36
        notes.append(TAB6_GAP_NOTE)
    rnote, rates = regime.rates_note(ctx, config, {idx or "HBN": S.method_spec(config, "HBN", **opts)
                                                   for idx, (_, opts) in ABLATIONS.items()})
    if rnote:
        notes.insert(0, rnote)
    return {"rows": rows, "paper": paper, "claims": regime.explained(ctx, config, claims), "deviations": list(config["deviations"]),
            "series": {"acc": {i or "HBN": stats[i][0] for i in stats}, "std": {i or "HBN": stats[i][1] for i in stats},
                       "per_seed": {i or "HBN": v for i, v in per_seed.items()}},
            "notes": notes}


@plotter("hbn-tab6")
def plot_tab6(result: Result) -> Any:
    s = result.series
    fig, axes = new_figure(1, 2, width=4.4, height=3.4)
    names = list(s["acc"])
    ys = [s["acc"][k] for k in names]
    err = [0.0 if not math.isfinite(s["std"][k] or float("nan")) else s["std"][k] for k in names]
    col = [color_for("hbn") if k == "HBN" else "#BBBBBB" for k in names]
    axes[0].bar(range(len(names)), ys, yerr=err, color=col)
    axes[0].set_title("ours (quick proxy)")
    axes[1].bar(range(len(N.TABLE6)), [float(a) for *_, a in N.TABLE6], color=col)
    axes[1].set_title("paper (CIFAR-10)")
    for ax, vals in zip(axes, (ys, [float(a) for *_, a in N.TABLE6]), strict=True):
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        finite = [v for v in vals if math.isfinite(v)]
        ax.set_ylim(max(0, min(finite) - 6), min(100, max(finite) + 3))  # each panel on its own scale
    axes[0].set_ylabel("test accuracy (%)")
    fig.suptitle("HBN Table 6: ablations (1) eq. 7 as moving average, (2) naive eq. 8, (3)-(5) fixed alpha")
    return fig


# -- Fig. 5 --------------------------------------------------------------------------------------
#: The paper's lambdas (Fig. 5) and the quick ones with the same weight left on the initial statistics
#: after T = 60 as after the paper's T = 500 (CIFAR-10): 1, 0.585, 0.0803.
_FIG5_LAMS = [1.0, 0.1, 0.01]
_FIG5_C = [1.0, 0.7, 0.4, 0.1]
#: Quick: the two extreme lambdas and C = 1, 0.4, 0.1 (cost, issue 25): the claims compare the extreme lambdas
#: at the extreme ratios, and C = 1 (20 clients a round) costs as much as C = 0.4 and 0.1 together.
_Q_FIG5_LAMS = [_FIG5_LAMS[0], _FIG5_LAMS[-1]]
_Q_FIG5_C = [1.0, 0.4, 0.1]
_Q_LAMS = [round(S.scaled_lambda(lam, 500, 60), 4) for lam in _Q_FIG5_LAMS]
_FIG5 = S.profiles({"base": S.batch(S.Q_BASE, 32), "lr": S.Q_LR3, "hbn": _Q_HBN, "lams": _Q_LAMS, "paper_lams": _Q_FIG5_LAMS,
                    "C": _Q_FIG5_C,
                    "variants": {"lambda=0.01": {"lam": 0.01}, "EMA": {"eval_stats": "global"}},
                    "deviations": [_Q_NOTE + ", B = 32 (C = 0.1 is 2 clients per round)", _LR_NOTE,
                                   "lambda: the paper's {1, 0.01} at T = 500 scaled to T = 60 (1 - (1 - lambda)^(500/60)"
                                   f" = {', '.join(f'{v:g}' for v in _Q_LAMS)}), so each leaves the initial statistics the "
                                   "paper's weight; the unscaled 0.01 and the EMA test statistics (at the smallest lambda) "
                                   "beside them at the smallest C", "tested with the statistics of the evaluated round's clients (Sec. 4.1)",
                                   "quick grid thinned for cost (issue 25): the paper's middle lambda 0.1 and C = 0.7 are "
                                   "left out (the claims compare the extreme lambdas at the extreme ratios; the paper "
                                   "profile runs lambda in {1, 0.1, 0.01} and C in {1, 0.7, 0.4, 0.1})",
                                   "3 seeds in lock-step", S.DECAY_NOTE]},
                   {"base": S.batch(S.P_BASES["CIFAR-10"], 32), "lr": S.P_LR["CIFAR-10"], "hbn": S.P_HBN, "lams": _FIG5_LAMS,
                    "paper_lams": _FIG5_LAMS, "C": _FIG5_C, "variants": {"EMA": {"eval_stats": "global"}},
                    "deviations": ["HBN's Table 8 rate x 32 / 4", S.DECAY_NOTE]},
                   smoke={"lams": [1.0, 0.0803], "paper_lams": [1.0, 0.01], "C": [1.0, 0.5]})


@entry(
    "hbn-fig5",
    title="lambda of eq. 11 against the client activation ratio",
    summary=("Fig. 5: with few clients per round a small lambda (a slow EMA of the global statistics) helps; with "
             "all clients active the choice of lambda barely matters."),
    look_for="Accuracy for each lambda at each activation ratio C.",
    kind="training", configs=_FIG5, seeds=S.SEEDS,
)
def compute_fig5(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    lams, Cs = [float(v) for v in config["lams"]], [float(c) for c in config["C"]]
    paper_lams = [float(v) for v in config.get("paper_lams") or lams]
    if len(paper_lams) != len(lams):  # lams overridden without their paper values: label them as they are
        paper_lams = lams
    names = {lam: f"{lam:g}" + (f" (paper {p:g})" if p != lam else "") for lam, p in zip(lams, paper_lams, strict=True)}
    table: dict[str, dict[str, list[float]]] = {str(c): {} for c in Cs}
    every = []
    hbn = dict(config.get("hbn") or {})
    lo, hi = str(min(Cs)), str(max(Cs))
    # the variants where lambda matters, at the fewest clients a round; a variant of a headline lambda (the paper
    # profile's) is its column already
    variants = {f"{v} (variant)": {"lam": min(lams), **o} for v, o in (config.get("variants") or {}).items()
                if not ("lam" in o and float(o["lam"]) in lams)}
    for c in Cs:
        for col, opts in [(names[lam], {"lam": lam}) for lam in lams] + (list(variants.items()) if str(c) == lo else []):
            rs = S.run(ctx, config["lr"], config["base"], "HBN", {"train": {"participation": c}}, hbn={**hbn, **opts})
            every += rs
            table[str(c)][col] = finals(rs)
    small, big = names[min(lams)], names[max(lams)]
    claims: list[Claim] = [
        S.compare(ctx, "low-C", f"C = {lo}: acc(lambda = {small}) >= acc(lambda = {big}) + 1 pt", table[lo][small], 1.0,
                  baseline=table[lo][big], runs=every,
                  detail=", ".join(f"{_col(k)}: {S.fmt(v)}" for k, v in table[lo].items())),
    ]
    # the spread over lambda at C = hi: the largest paired |difference| of a lambda with the best one
    heads = [names[lam] for lam in lams]
    best, worst = S.best_of(table[hi], heads), S.best_of(table[hi], heads, lowest=True)
    claims.append(S.compare(ctx, "high-C", f"C = {hi}: max - min over lambda <= 1 pt", table[hi][best], 1.0,
                            baseline=table[hi][worst], side="below", runs=every,
                            detail=", ".join(f"{_col(k)}: {S.fmt(v)}" for k, v in table[hi].items())
                            + f" (best {best} paired with worst {worst})"))
    for col in [k for k in table[lo] if k.endswith("(variant)")]:
        claims.append(info(f"variant-{col}-C{lo}", f"C = {lo}: {col}", S.mean(table[lo][col]), detail=S.fmt(table[lo][col])))
    cols = list(dict.fromkeys(k for d in table.values() for k in d))
    rows = [{"C": c, **{_col(k, "="): S.fmt(table[str(c)][k]) if k in table[str(c)] else None for k in cols}} for c in Cs]
    return {"rows": rows, "paper": [], "claims": S.explain(ctx, claims), "deviations": list(config["deviations"]),
            "series": {"acc": {c: {k: S.mean(v) for k, v in d.items() if not k.endswith("(variant)")}
                               for c, d in table.items()}, "per_seed": table},
            "notes": ["The figure has no printed numbers. Cells: mean ± std over seeds; columns name the quick lambda "
                      "and the paper's it stands for."]}


def _col(k: str, sep: str = " ") -> str:
    """A Fig. 5 column's label: ``lambda 0.0803 (paper 0.01)``, a variant by its own name."""
    return k if k.endswith("(variant)") else f"lambda{sep}{k}"


@plotter("hbn-fig5")
def plot_fig5(result: Result) -> Any:
    t = result.series["acc"]
    Cs = sorted(t, key=float, reverse=True)  # C = 1 first, as the rows
    lams = sorted(t[Cs[0]], key=lambda k: float(k.split()[0]), reverse=True)
    shades = ["#332288", "#6699CC", "#AACCEE", "#DDDDDD"]
    return grouped_bars([f"C = {c}" for c in Cs], {f"C = {c}": t[c] for c in Cs}, lams, width=5.0, floor=8.0,
                        colors={lam: shades[j % len(shades)] for j, lam in enumerate(lams)},
                        labels={lam: f"lambda = {lam}" for lam in lams},
                        title="HBN Fig. 5: lambda (eq. 11) against the activation ratio C (ours)")


# -- Fig. 6 --------------------------------------------------------------------------------------
_FIG6 = S.profiles({"base": S.batch(S.Q_BASE, 32), "lr": S.Q_CAT_LR, "hbn": S.hbn_options("CIFAR-100"), "E": [1, 5, 10],
                    "methods": S.THREE,
                    "deviations": ["CIFAR-100 -> Q-DIG, K = 20 Dirichlet(0.6) clients, Q-SCNN, B = 32, T = 60",
                                   "the E values are not listed beyond 'reaches 10': {1, 5, 10} (the paper profile "
                                   "also runs E = 2; left out of the quick profile for cost, issue 25: the claims need "
                                   "a moderate E <= 5 and the end point E = 10)",
                                   "learning rate = the catalog's 0.005 x 32 / 4 for every method (as hbn-tab2)",
                                   "3 seeds in lock-step", S.hbn_note("CIFAR-100"), S.DECAY_NOTE]},
                   {"base": S.batch(S.P_BASES["CIFAR-100"], 32), "lr": S.P_LR["CIFAR-100"], "hbn": S.P_HBN, "E": [1, 2, 5, 10],
                    "methods": S.THREE, "deviations": ["the E values are not listed beyond 'reaches 10'",
                                                                   "Table 9's rates x 32 / 4", S.DECAY_NOTE]},
                   smoke={"E": [1, 2]})


@entry(
    "hbn-fig6",
    title="Accuracy against the number of local epochs",
    summary=("Fig. 6 (App. B.3): HBN keeps its advantage for moderate numbers of local epochs; at E = 10 client "
             "drift dominates and the normalisers no longer differ."),
    look_for="The three normalisers' accuracy against E, and the gap HBN - BN shrinking as E grows.",
    kind="training", configs=_FIG6, seeds=S.SEEDS,
)
def compute_fig6(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    Es = [int(e) for e in config["E"]]
    runs = {(k, E): S.run(ctx, config["lr"], config["base"], k, {"train": {"local_steps": E}}, hbn=config.get("hbn"))
            for E in Es for k in config["methods"]}
    table = {k: {str(E): finals(runs[(k, E)]) for E in Es} for k in config["methods"]}
    every = [r for rs in runs.values() for r in rs]
    claims: list[Claim] = []
    for E in [e for e in Es if e <= 5]:
        best = S.best_of({k: table[k][str(E)] for k in table}, ["BN", "GN"])
        claims.append(S.compare(ctx, f"E{E}", f"E = {E}: HBN >= BN and GN", table["HBN"][str(E)], 0.0,
                                baseline=table[best][str(E)], runs=every,
                                detail=", ".join(f"{k} {S.fmt(table[k][str(E)])}" for k in table) + f" (paired with {best})"))
    # the signed gap HBN - BN (issue 25: |HBN - BN| also "shrinks" when HBN's deficit shrinks)
    gap = {E: [h - b for h, b in zip(table["HBN"][str(E)], table["BN"][str(E)], strict=True)] for E in (Es[0], Es[-1])}
    claims.append(S.compare(ctx, "gap-shrinks", f"HBN's advantage HBN - BN (signed) at E = {Es[-1]} < at E = {Es[0]}",
                            gap[Es[0]], 0.0, baseline=gap[Es[-1]], runs=every,
                            detail=f"HBN - BN: E = {Es[0]}: {S.fmt(gap[Es[0]])}; E = {Es[-1]}: {S.fmt(gap[Es[-1]])}"))
    claims.append(info("hbn-e-max", f"HBN at E = {Es[-1]}", S.mean(table["HBN"][str(Es[-1])]),
                       detail=S.fmt(table["HBN"][str(Es[-1])])))
    rows = [{"E": E, **{k: S.fmt(table[k][str(E)]) for k in table}} for E in Es]
    return {"rows": rows, "paper": [], "claims": S.explain(ctx, claims), "deviations": list(config["deviations"]),
            "series": {"E": Es, "acc": {k: {E: S.mean(v) for E, v in d.items()} for k, d in table.items()},
                       "per_seed": table},
            "notes": ["The figure has no printed numbers. Cells: mean ± std over seeds."]}


@plotter("hbn-fig6")
def plot_fig6(result: Result) -> Any:
    return line_panels([{"curves": result.series["acc"], "xlabel": "local epochs E"}], rows=S.ROWS,
                       ylabel="test accuracy (%)", title="HBN Fig. 6: accuracy against local epochs (ours)", width=5.0)
