"""The normalisers compared: Table 1 (accuracy by data set and heterogeneity) and Table 3
(accuracy by the number of clients), all with FedAvg, each method at its chosen learning rate
(:mod:`bnfl.experiments.papers.hbn.grids`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bnfl.experiments.claims import Claim, at_least, monotone, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.papers.hbn import numbers as N
from bnfl.experiments.papers.hbn.setups import (
    DECAY_NOTE,
    LAST_K,
    METHODS,
    P_BASES,
    P_LR,
    Q_BASE,
    Q_LR,
    Q_TINY,
    Q_TINY_LR,
    acc,
    dirichlet,
    explain,
    noise_of,
    profiles,
    reported,
    run,
)
from bnfl.experiments.registry import entry, plotter

_LR_NOTE = "each method at the rate chosen on a validation split from Table 8's grid (hbn-tab8; Table 10's for the Tiny stand-in)"

# -- Table 1 -------------------------------------------------------------------------------------
_TAB1_QUICK = {
    "base_c10": Q_BASE, "lr_c10": Q_LR, "base_tiny": Q_TINY, "lr_tiny": Q_TINY_LR,
    "columns": [["c10", 0.6], ["c10", 0.3], ["c10", 0.1], ["tiny", 0.1], ["tiny", 0.05]],
    "names": {"c10": "Q-DIG", "tiny": "Q-GAUSS(100)"}, "methods": list(N.NORMS),
    "deviations": [
        "CIFAR-10 and CIFAR-100 -> Q-DIG (10 classes; one proxy for both), K = 20 Dirichlet clients, 5 per round, "
        "Q-SCNN, B = 4, T = 60", "Tiny-ImageNet -> Q-GAUSS(100) with Q-MLP-BN, K = 50, 10 per round, B = 16, T = 60",
        _LR_NOTE, "1 seed (the paper does not state its repeats)", DECAY_NOTE],
}
#: Table 1's data sets -> the keys of the config's ``base_*`` / ``lr_*`` entries.
_KEYS = {"CIFAR-10": "c10", "CIFAR-100": "c100", "Tiny-ImageNet": "tiny"}
_TAB1_PAPER = {
    "base_c10": P_BASES["CIFAR-10"], "lr_c10": P_LR["CIFAR-10"], "base_c100": P_BASES["CIFAR-100"],
    "lr_c100": P_LR["CIFAR-100"], "base_tiny": P_BASES["Tiny-ImageNet"], "lr_tiny": P_LR["Tiny-ImageNet"],
    "columns": [[_KEYS[s], phi] for s, phi in N.TABLE1_COLUMNS],
    "names": {"c10": "CIFAR-10", "c100": "CIFAR-100", "tiny": "Tiny-ImageNet"}, "methods": list(N.NORMS),
    "deviations": ["each method at the rate the paper chose (the argmax of Tables 8-10)", DECAY_NOTE],
}
_TAB1 = profiles(_TAB1_QUICK, _TAB1_PAPER, smoke={"columns": [["c10", 0.6], ["tiny", 0.1]]})


def _column_runs(ctx: Context, config: dict[str, Any], setting: str, phi: float) -> dict[str, dict[str, Any]]:
    base, lr = config[f"base_{setting}"], config[f"lr_{setting}"]
    return {k: run(ctx, lr, base, k, dirichlet(phi)) for k in config["methods"]}


def _best_claims(tag: str, accs: dict[str, float], noise: tuple[float, str]) -> Claim:
    others = max(v for k, v in accs.items() if k != "HBN" and math.isfinite(v))
    return at_least(f"hbn-best-{tag}", f"{tag}: HBN is best or within 1 pt of the best", accs["HBN"] - others, -1.0,
                    noise=noise[0], noise_label=noise[1],
                    detail=", ".join(f"{k} {v:.2f}" for k, v in accs.items()))


@entry(
    "hbn-tab1",
    title="Normalisers with FedAvg across data sets and heterogeneity",
    summary=("Table 1: top-1 test accuracy of BN, GN, LN, FedFN, FixBN, FBN and HBN (all with FedAvg) on CIFAR-10, "
             "CIFAR-100 and Tiny-ImageNet at several Dirichlet coefficients; HBN is best in every column."),
    look_for=("One column per (data set, phi); smaller phi = more heterogeneous clients. Compare HBN with the best "
              "other normaliser in each column, and HBN and FixBN with BN at the most heterogeneous setting."),
    kind="training",
    configs=_TAB1,
)
def compute_tab1(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    cols, table, claims, every = [], {}, [], {}
    for setting, phi in config["columns"]:
        name = f"{config['names'][setting]} phi={phi}"
        runs = every[name] = _column_runs(ctx, config, setting, float(phi))
        accs = {k: acc(r) for k, r in runs.items()}
        cols.append(name)
        table[name] = accs
        claims.append(_best_claims(name, accs, noise_of(*runs.values())))
        if setting == "c10" and float(phi) == min(float(p) for s, p in config["columns"] if s == "c10"):
            nz = noise_of(*runs.values())
            claims.append(at_least(f"hbn-vs-bn-{name}", f"{name}: HBN - BN >= 1 pt", accs["HBN"] - accs["BN"], 1.0,
                                   noise=nz[0], noise_label=nz[1],
                                   detail=f"HBN {accs['HBN']:.2f} vs BN {accs['BN']:.2f}"))
            claims.append(at_least(f"fixbn-vs-bn-{name}", f"{name}: FixBN >= BN", accs["FixBN"] - accs["BN"], 0.0,
                                   noise=nz[0], noise_label=nz[1],
                                   detail=f"FixBN {accs['FixBN']:.2f} vs BN {accs['BN']:.2f}"))
    rows = [{"method": k, **{c: None if not math.isfinite(table[c][k]) else round(table[c][k], 2) for c in cols}}
            for k in config["methods"]]
    paper = [{"method": k, **{f"{d} phi={p}": v for (d, p), v in zip(N.TABLE1_COLUMNS, N.TABLE1[k], strict=True)}}
             for k in N.NORMS]
    notes = ["Evaluation: the global model on the test set; BN and FixBN with their averaged running "
             "statistics, HBN and FBN with the server's global statistics (eq. 8/11), alpha unused."]
    if ctx.profile == "paper":
        rows, more = reported_rows(rows, every, "method")
        notes.append(more)
    return {"rows": rows, "paper": paper, "claims": explain(ctx, claims), "deviations": list(config["deviations"]),
            "series": {"columns": cols, "acc": {c: table[c] for c in cols}}, "notes": notes}


def reported_rows(rows: list[dict[str, Any]], runs: dict[str, dict[str, Any]], label: str) -> tuple[list, str]:
    """The paper profile's rows: ``rows`` (the last round's accuracy, marked ``accuracy: last``)
    followed by the same table of the best round and of the last-10 mean (:func:`reported`), from
    ``runs`` = ``{column: {row label: run}}``; and the note that says so."""
    out = [{**r, "accuracy": "last"} for r in rows]
    for what in ("best", f"last-{LAST_K} mean"):
        for r in rows:
            vals = {c: reported(runs[c][r[label]])[what] for c in runs}
            out.append({label: r[label], **{c: None if not math.isfinite(v) else round(v, 2) for c, v in vals.items()},
                        "accuracy": what})
    return out, (f"Rows 'best' and 'last-{LAST_K} mean': the best evaluated round and the mean of the evaluations "
                 f"in the last {LAST_K} rounds (the authors' code reports these); the claims use the last round.")


def _plot_bars(ax: Any, groups: list[str], table: dict[str, dict[str, float]], methods: list[str]) -> None:
    from bnfl.plots import color_for

    w = 0.8 / len(methods)
    x = np.arange(len(groups))
    lo = min(v for g in groups for v in table[g].values() if v is not None and math.isfinite(v))
    bottom = max(0.0, lo - 10)
    for j, k in enumerate(methods):
        ys = [np.nan if table[g][k] is None else float(table[g][k]) for g in groups]  # JSON keeps NaN as null
        xs = x + (j - (len(methods) - 1) / 2) * w
        ax.bar(xs, ys, w, color=color_for(METHODS.get(k, k)), label=k)
        for xi, y in zip(xs, ys, strict=True):
            if not math.isfinite(y):  # a diverged run has no bar: say so
                ax.text(xi, bottom + 1, "diverged", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, fontsize=7)
    ax.set_ylim(bottom, 100)


@plotter("hbn-tab1")
def plot_tab1(result: Result) -> Any:
    from bnfl.plots import new_figure

    s = result.series
    fig, ax = new_figure(1, 1, width=9.0, height=3.6)
    methods = list(dict.fromkeys(r["method"] for r in result.rows))  # the table's order (stored results sort keys)
    _plot_bars(ax, s["columns"], s["acc"], methods)
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle("HBN Table 1: normalisers with FedAvg (ours)")
    return fig


# -- Table 3 -------------------------------------------------------------------------------------
_TAB3_QUICK = {"base": Q_BASE, "lr": Q_LR, "K": [10, 20, 50, 100], "per_round": 5, "methods": list(N.NORMS),
               "deviations": ["K in {10, 20, 50, 100} with 5 clients per round on Q-DIG (1437 digits; the paper: K in "
                              "{100, 200, 500, 1000}, 10 per round, on CIFAR-10's 50,000 images)", _LR_NOTE,
                              "1 seed", DECAY_NOTE]}
_TAB3_PAPER = {"base": P_BASES["CIFAR-10"], "lr": P_LR["CIFAR-10"], "K": list(N.TABLE3_K), "per_round": 10,
               "methods": list(N.NORMS), "deviations": ["each method at the rate the paper chose (Table 8)", DECAY_NOTE]}
_TAB3 = profiles(_TAB3_QUICK, _TAB3_PAPER, smoke={"K": [6, 12], "per_round": 3})


@entry(
    "hbn-tab3",
    title="Normalisers by the number of clients",
    summary=("Table 3: CIFAR-10 accuracy with K = 100 ... 1000 clients (10 per round, B = 4, phi = 0.6): every "
             "method degrades as K grows, HBN least."),
    look_for="Accuracy against the number of clients K at a fixed number of clients per round.",
    kind="training",
    configs=_TAB3,
)
def compute_tab3(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    Ks = [int(k) for k in config["K"]]
    table: dict[str, dict[str, float]] = {k: {} for k in config["methods"]}
    claims: list[Claim] = []
    all_runs, every = [], {}
    for K in Ks:
        part = {"partition": {"num_clients": K}, "train": {"participation": int(config["per_round"]) / K}}
        runs = every[f"K={K}"] = {k: run(ctx, config["lr"], config["base"], k, part) for k in config["methods"]}
        all_runs += list(runs.values())
        for k, r in runs.items():
            table[k][str(K)] = acc(r)
        claims.append(_best_claims(f"K={K}", {k: table[k][str(K)] for k in config["methods"]}, noise_of(*runs.values())))
    nz = noise_of(*all_runs)
    for k in config["methods"]:
        claims.append(monotone(f"degrades-{k}", f"{k} degrades as K grows (one step of up to 1 pt forgiven)",
                               [table[k][str(K)] for K in Ks], increasing=False, tolerance=round(nz[0], 3), allowed_violations=1,
                               max_violation=1.0, labels=Ks, noise_label=nz[1]))
    for k in N.NORMS:  # the paper's K = 100 column against Table 1's CIFAR-10 phi = 0.6 column
        claims.append(within(f"paper-K100-{k}", f"paper: Table 3 {k} at K = 100 equals Table 1 (CIFAR-10, phi = 0.6)",
                             float(N.TABLE3[k][0]), float(N.TABLE1[k][0]), 0.005, kind="consistency",
                             why=(f"Table 3 prints {N.TABLE3[k][0]}, Table 1 {N.TABLE1[k][0]} for the same setting "
                                  "(Table 8: 75.65 is FixBN at lr 0.01, 77.34 at its best lr 0.002)")))
    rows = [{"method": k, **{f"K={K}": None if not math.isfinite(table[k][str(K)]) else round(table[k][str(K)], 2)
                             for K in Ks}} for k in config["methods"]]
    paper = [{"method": k, **{f"K={K}": v for K, v in zip(N.TABLE3_K, N.TABLE3[k], strict=True)}} for k in N.NORMS]
    notes = []
    if ctx.profile == "paper":
        rows, more = reported_rows(rows, every, "method")
        notes.append(more)
    return {"rows": rows, "paper": paper, "claims": explain(ctx, claims), "deviations": list(config["deviations"]),
            "series": {"K": Ks, "acc": table}, "notes": notes}


@plotter("hbn-tab3")
def plot_tab3(result: Result) -> Any:
    from bnfl.plots import color_for, marker_for, new_figure

    s = result.series
    fig, ax = new_figure(1, 1, width=5.0, height=3.6)
    for k, d in s["acc"].items():
        ax.plot(s["K"], [d[str(K)] for K in s["K"]], marker=marker_for(METHODS[k]), color=color_for(METHODS[k]), label=k)
    ax.set_xscale("log")
    ax.set_xticks(s["K"])
    ax.set_xticklabels([str(K) for K in s["K"]])
    ax.set_xlabel("clients K (fixed number per round)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7)
    fig.suptitle("HBN Table 3: accuracy by the number of clients (ours)")
    return fig
