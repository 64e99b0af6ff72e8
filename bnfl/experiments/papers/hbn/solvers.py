"""Table 4: HBN as a plug-in to FL solvers (CIFAR-10, B = 4, phi = 0.6).

Each solver runs with its base normalisation (BN; GN for FedAdam and FedACG; none for FedWon,
whose weight-standardised convolutions and adaptive gradient clipping replace it) and with HBN:
bnfl's :class:`~bnfl.fl.HBN` composed with the solver (``HBN(solver=...)``: the solver's local
and server updates, HBN's statistics protocol on top).
"""

from __future__ import annotations

import math
from typing import Any

from bnfl.experiments.claims import linked
from bnfl.experiments.core import Context, Result
from bnfl.experiments.evidence import count_of, fmt, mean_of, paired_at_least, per_seed, rounded
from bnfl.experiments.papers.hbn import numbers as N
from bnfl.experiments.papers.hbn import regime
from bnfl.experiments.papers.hbn.normalisers import _plot_bars
from bnfl.experiments.papers.hbn.setups import DECAY_NOTE, P_BASES, P_LR, profiles, run
from bnfl.experiments.registry import entry, plotter
from bnfl.plots import color_for, new_figure

#: Table 4's rows: name -> (base method id, the normaliser whose chosen rate it uses,
#: the bnfl algorithm HBN composes with, its options).
SOLVERS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "FedAvg": ("fedavg+bn", "BN", "fedavg", {}),
    "FedProx": ("fedprox", "BN", "fedprox", {"mu": 0.01}),
    "FedAdam": ("fedadam+gn", "GN", "fedadam", {}),
    "SCAFFOLD": ("scaffold", "BN", "scaffold", {}),
    "MOON": ("moon", "BN", "moon", {}),
    "FedSAM": ("fedsam", "BN", "fedsam", {}),
    "FedACG": ("fedacg+gn", "GN", "fedacg", {}),
    "FedWon": ("fedwon", "FedFN", "fedwon", {}),
}
_NOTE = ("each base solver at the rate chosen for its normaliser (hbn-tab8, 3 seeds: BN's, GN's for FedAdam and FedACG, "
         "FedFN's for the normalisation-free FedWon); every +HBN run at HBN's rate; solver options at their "
         "papers' defaults (FedProx mu = 0.01 as the catalog says); SCAFFOLD's option-II control variates scaled "
         "for SGD momentum 0.9 (bnfl.fl.Scaffold)")
#: The catalog's quick solvers (hbn-tab4: FedAvg, FedProx, SCAFFOLD, FedAdam; "> base for at least 3 of 4").
QUICK_SOLVERS = ["FedAvg", "FedProx", "SCAFFOLD", "FedAdam"]
_TAB4_QUICK = {**regime.quick_config("skew-0.6", "CIFAR-10"), "solvers": QUICK_SOLVERS}
_TAB4_QUICK["deviations"] = ["the catalog's four quick solvers (FedAvg, FedProx, SCAFFOLD, FedAdam); the paper profile runs "
                             "all eight", "each base solver and each +HBN run tuned on its own spec (regime.fair); "
                             "solver options at their papers' defaults (FedProx mu = 0.01 as the catalog says); SCAFFOLD's "
                             "option-II control variates scaled for SGD momentum 0.9 (bnfl.fl.Scaffold); FedAdam's GN "
                             "normalises MLP features on this stand-in", *_TAB4_QUICK["deviations"]]
_TAB4 = profiles(_TAB4_QUICK,
                 {"base": P_BASES["CIFAR-10"], "lr": P_LR["CIFAR-10"], "solvers": list(SOLVERS),
                  "deviations": [_NOTE.replace("hbn-tab8", "the paper's Table 8 choices"), DECAY_NOTE]},
                 smoke={"solvers": ["FedAvg", "FedProx"]})


def needed(n: int) -> int:
    """How many of ``n`` solvers must gain: the catalog's 3 of 4, i.e. three quarters, rounded up."""
    return max(1, math.ceil(0.75 * n))


@entry(
    "hbn-tab4",
    title="HBN as a plug-in to FL solvers",
    summary=("Table 4: FedAvg, FedProx, FedAdam, SCAFFOLD, MOON, FedSAM, FedACG and FedWon each gain when their "
             "normalisation is replaced by HBN (CIFAR-10, phi = 0.6, B = 4)."),
    look_for="Each solver with its base normalisation and with HBN; the gain column (mean over seeds).",
    kind="training", configs=_TAB4, seeds={"smoke": 1, "quick": regime.SEEDS, "paper": 3},
)
def compute_tab4(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    seeds = [int(s) for s in ctx.seeds]
    table: dict[str, tuple[list[float], list[float]]] = {}
    n_test = 0
    for name in config["solvers"]:
        method, norm_key, algorithm, options = SOLVERS[name]
        base = run(ctx, config["lr"], config["base"], method, lr_key=norm_key, seeds=True, **options)
        composed = {} if algorithm == "fedavg" else {"solver": algorithm, "solver_options": options}
        plus = run(ctx, config["lr"], config["base"], "HBN", lr_key="HBN", seeds=True, hbn=config.get("hbn"), **composed)
        table[name] = (per_seed(base), per_seed(plus))
        n_test = int(base[0]["n_test"])

    def why(n: str) -> str:
        return ("a run diverged (non-finite loss) at the chosen rate with SGD momentum 0.9"
                if not all(math.isfinite(v) for v in table[n][0] + table[n][1]) else "")

    owners = dict(config.get("counted_in") or {})  # a row whose runs another entry's claims already count
    pre = [regime.precondition_claim(ctx, config["base"], config["precondition"])] if config.get("precondition") else []
    claims = [paired_at_least(f"not-worse-{n}", f"{n}: +HBN >= base - 0.5 pt", p, b, -0.5, seeds=seeds,
                              n_test=n_test, detail=f"+HBN {fmt(p)} vs base {fmt(b)}", why=why(n))
              for n, (b, p) in table.items()]
    claims = [linked(c, owners[n]) if n in owners else c for c, n in zip(claims, table, strict=True)]
    gains = {n: paired_at_least(f"gain-{n}", f"{n}: +HBN > base", p, b, 0.0, seeds=seeds, n_test=n_test,
                                detail=f"{mean_of(p) - mean_of(b):+.2f}") for n, (b, p) in table.items()}
    need = needed(len(table))
    claims = pre + claims
    claims.append(count_of("gains", f"+HBN > base (paired 95% interval above 0) for at least {need} of "
                           f"{len(table)} solvers", gains, need))
    rows = [{"method": n, "+BN/GN/-": rounded(mean_of(b)), "+HBN": rounded(mean_of(p)), "gain": rounded(mean_of(p) - mean_of(b)),
             "base per seed": fmt(b), "+HBN per seed": fmt(p), "seeds": len(seeds)} for n, (b, p) in table.items()]
    paper = [{"method": n, "+BN/GN/-": b, "+HBN": p} for n, b, p in N.TABLE4]
    both = [n for n, (b, p) in table.items() if not any(math.isfinite(v) for v in b + p)]
    specs = {}
    for n in config["solvers"]:
        method, _, algorithm, options = SOLVERS[n]
        specs[n] = regime.method_spec(config, method, **options)
        specs[f"{n}+HBN"] = regime.method_spec(config, "HBN", **({} if algorithm == "fedavg" else
                                                                {"solver": algorithm, "solver_options": options}))
    rnote, rates = regime.rates_note(ctx, config, specs)
    notes = ([rnote] if rnote else []) + ["The paper prints 'Scafflod' (sic). FedWon's +HBN run keeps FedWon's adaptive gradient clipping "
             "and puts HBN layers where FedWon has none (plain convolutions).",
             "A solver whose base and +HBN runs both diverged is reported (an info claim), not counted as a fail "
             "of HBN." + (f" Both diverged: {', '.join(both)}." if both else "")]
    return {"rows": rows, "paper": paper, "claims": regime.explained(ctx, config, claims), "deviations": list(config["deviations"]),
            "series": {"acc": {n: {"base": mean_of(b), "HBN": mean_of(p)} for n, (b, p) in table.items()},
                       "per_seed": {n: {"base": b, "HBN": p} for n, (b, p) in table.items()},
                       **({"rates": rates} if rates else {})},
            "notes": notes}


@plotter("hbn-tab4")
def plot_tab4(result: Result) -> Any:
    t = result.series["acc"]
    fig, ax = new_figure(1, 1, width=8.0, height=3.4)
    _plot_bars(ax, [r["method"] for r in result.rows], t, ["base", "HBN"])  # the table's order (JSON sorts keys)
    for p, c in zip(ax.patches, ["#BBBBBB"] * len(t) + [color_for("hbn")] * len(t), strict=False):
        p.set_color(c)
    ax.legend(["base normalisation", "+HBN"], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_ylabel("test accuracy (%)")
    fig.suptitle("HBN Table 4: HBN plugged into FL solvers (ours)")
    return fig
