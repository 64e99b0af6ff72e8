"""Fig. 4, Fig. 5, Fig. 6: the local-step count E under fixed budgets: momentum, and "is GN always
better than BN?".

FixBN Secs. 6.2 and 7. Budgets: a fixed number of local SGD steps per client (the fixed-epoch
budget: rounds = steps / E) or a fixed number of rounds. The runs of one (model, partition, norm,
E, budget) cell are shared by every entry that asks for them (run cache).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments.calibration import DECIDING_SEED_COUNTS, HEADLINE_SEED_GROUPS
from bnfl.experiments.claims import Claim, at_least, info, linked
from bnfl.experiments.core import Context, Result
from bnfl.experiments.curves import final_stats, train_runs
from bnfl.experiments.evidence import Seeds, finals
from bnfl.experiments.papers.fixbn.numbers import E_GRID, FIG5_CAPTION
from bnfl.experiments.papers.fixbn.setups import (
    DECAY,
    P_C10,
    P_TINY,
    PARTITIONS,
    Q_LENET,
    Q_MLP,
    SEEDS,
    SHARDS,
    profiles,
    rounds_for_steps,
    variant,
)
from bnfl.experiments.registry import entry, plotter
from bnfl.experiments.setups import label, spec
from bnfl.experiments.tuning import (
    EDGE_RULE,
    EXTEND,
    SMOKE_TUNE,
    TUNE_SEEDS,
    VALIDATION,
    Tuned,
    tune_rate,
)
from bnfl.plots import color_for, new_figure


def cell_spec(base: Mapping[str, Any], method: dict[str, Any], partition: Mapping[str, Any], e: int,
              budget: str, amount: int) -> dict[str, Any]:
    """Run spec of one cell: ``budget`` "steps" (``amount`` local steps per client) or "rounds"."""
    rounds = rounds_for_steps(amount, e) if budget == "steps" else int(amount)
    return spec(base, method, {"partition": dict(partition), "rounds": rounds,
                               "train": {"local_steps": int(e), "eval_every": rounds}})


# -- Fig. 4: maintained momentum -------------------------------------------------------------------

#: (norm, momentum) -> run-spec fields. BN and GN keep momentum through the engine's momentum_mode.
def momentum_variant(norm: str, mode: str) -> dict[str, Any]:
    if norm == "fixbn":
        return variant({"reset": "fixbn", "local": "fixbn-local", "global": "fixbn-global"}[mode])
    out = variant(norm)
    if mode != "reset":
        out["train"] = {"momentum_mode": mode}
    return out


F4_NORMS = ("fedavg+bn", "fedavg+gn", "fixbn")
F4_MODES = (("reset", "plain"), ("local", "* local"), ("global", "† global"))
#: The rate grid of the momentum comparison (quick): the base 0.02 up to 25x, past the point where plain SGD (momentum
#: restarted every round; at E = 1, every step) runs at the effective rate lr / (1 - 0.9) that
#: maintained momentum reaches. Every (norm, momentum, E) cell picks its own rate from it.
F4_GRID = (0.02, 0.05, 0.1, 0.2, 0.5)
#: Seeds and validation fraction of the rate choice (held out of the training set).
F4_TUNE = {"seeds": list(TUNE_SEEDS), "validation": VALIDATION}


_F4_QUICK = {"base": spec(Q_MLP, DECAY), "partition": SHARDS, "e_grid": [1, 5, 25, 100], "steps": 200,
             "tune": {**F4_TUNE, "grid": list(F4_GRID)},
             "deviations": ["Q-MLP-BN instead of Q-RES and 200 local steps per client instead of 1500 (15-minute "
                            "budget); E in {1, 5, 25, 100}"]}
_F4_PAPER = {"base": spec(P_C10, DECAY), "partition": SHARDS, "e_grid": list(E_GRID), "steps": 64_000,
             "deviations": ["fixed 128 epochs = 64,000 local steps per client (B = 20, |D_m| = 10,000); E = 2500 "
                            "gives 25.6 rounds, run as 26 (CATALOG §5.6)"]}
_F4_SMOKE = {"e_grid": [1, 2], "steps": 2, "base": {"train": {"batch_size": 8}},
             "tune": {"grid": [0.02, 0.2], **SMOKE_TUNE}}


def _momentum_cell(config: Mapping[str, Any], norm: str, mode: str, e: int) -> dict[str, Any]:
    """Run spec of one Fig. 4 cell: ``norm`` with momentum ``mode`` at E = ``e``, fixed steps per client."""
    return cell_spec(config["base"], momentum_variant(norm, mode), config["partition"], e, "steps", config["steps"])


def tuned_runs(ctx: Context, config: Mapping[str, Any]) -> tuple[dict[tuple[str, str, int], list],
                                                                 dict[tuple[str, str, int], Tuned]]:
    """Runs of every (norm, momentum, E <= 5) cell at its own rate, tuned on a validation split with
    the same grid, seeds and budget (:func:`bnfl.experiments.tuning.tune_rate`), and the rate choices."""
    cells = [(n, mode, e) for n in F4_NORMS for mode, _ in F4_MODES for e in config["e_grid"] if e <= 5]
    tune = config["tune"]
    rates = {c: tune_rate(ctx, _momentum_cell(config, *c), tune["grid"], seeds=tune["seeds"],
                          validation=tune["validation"], extend=tune.get("extend", EXTEND)) for c in cells}
    return {c: train_runs(ctx, spec(_momentum_cell(config, *c), {"train": {"lr": rates[c].rate}})) for c in cells}, rates


def _against_e(es: list[int], lines: list[tuple[str, list[float], str, str]], title: str, *, width: float,
               height: float, **legend: Any) -> Any:
    """Test accuracy against E on a log axis (fixed steps per client): ``lines`` of (label, accuracy per E,
    matplotlib format, colour)."""
    fig, ax = new_figure(1, 1, width=width, height=height)
    for name, ys, fmt, color in lines:
        ax.plot(es, ys, fmt, color=color, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("local steps per round E (fixed steps per client)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(**legend)
    fig.suptitle(title)
    return fig


@entry(
    "fixbn-fig4",
    title="Maintained momentum across E (Shards, fixed epochs)",
    summary=("Fig. 4: BN, GN and FixBN, each plain, with global momentum (†) and with local momentum (*), over "
             "E in {1, 20, 100, 500, 2500} at a fixed epoch budget: FixBN >= BN > GN; FixBN stays accurate at small "
             "E unlike BN; the two momenta help similarly, more at small E."),
    look_for=("Nine lines against E. FixBN's lines should stay on top, and at E = 1 far above BN (which collapses "
              "when clients communicate every step). Keeping the SGD momentum across rounds (* locally, † "
              "averaged on the server) should help most when E is small, where a momentum reset every round "
              "throws away most of its history."),
    kind="training",
    # 10 seeds (issue 36): at 5 the headline momentum claim was undecided, +0.61 [-0.14, 1.36], and its
    # observed spread put the seeds that decide it at about 7.
    seeds=DECIDING_SEED_COUNTS,
    seed_groups=HEADLINE_SEED_GROUPS,
    configs=profiles(_F4_QUICK, _F4_PAPER, _F4_SMOKE),
)
def compute_fig4(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    es = list(config["e_grid"])
    runs = {(n, mode, e): train_runs(ctx, _momentum_cell(config, n, mode, e))
            for n in F4_NORMS for mode, _ in F4_MODES for e in es}
    m = {k: final_stats(r)[0] for k, r in runs.items()}
    rows = [{"norm": label(n), "momentum": name, **{f"E={e}": round(m[(n, mode, e)], 2) for e in es}}
            for n in F4_NORMS for mode, name in F4_MODES]
    ev = Seeds(ctx.seeds, runs[("fixbn", "reset", es[0])])
    # E = es[0] is judged once, by "fixbn-small-e" below (the same two run sets)
    claims = [ev.versus(f"fixbn-bn-E{e}", f"E = {e}: FixBN >= BN (plain)", runs[("fixbn", "reset", e)],
                        runs[("fedavg+bn", "reset", e)], names=("FixBN", "BN"),
                        why=("with many local steps client drift dominates for every normaliser and FixBN and BN are "
                             "a few test samples apart")) for e in es[1:]]
    claims.append(ev.versus("fixbn-small-e", f"E = {es[0]}: FixBN >= BN + 10", runs[("fixbn", "reset", es[0])],
                            runs[("fedavg+bn", "reset", es[0])], 10.0, names=("FixBN", "BN"),
                            why=("FixBN does beat BN here, by less than the paper's 10 pts: the digits MLP suffers less "
                                 "from mismatched BN statistics than ResNet-20 on CIFAR-10")))
    tuned, rates = tuned_runs(ctx, config) if "tune" in config else ({}, {})
    tm = {k: final_stats(r)[0] for k, r in tuned.items()}
    # At E = 1 with every client in every round, the average of the clients' momentum buffers obeys the
    # server momentum's recursion: local and global momentum are one algorithm, judged once (local).
    # With partial participation they differ, and both are judged.
    full = float(config["base"].get("train", {}).get("participation", 1.0)) >= 1.0
    for n in F4_NORMS:
        for mode, name in F4_MODES[1:]:
            for e in [x for x in es if x <= 5 and not (x == 1 and mode == "global" and full)]:
                cell, plain = (n, mode, e), (n, "reset", e)
                if tuned:  # each side at its own tuned rate: the gain is not a larger effective rate
                    claims.append(ev.at_least(
                        f"{n}-{mode}-E{e}", f"E = {e}: {label(n)} with {name} momentum >= plain (each at its own "
                        "tuned rate)", finals(tuned[cell]), 0.0, baseline=finals(tuned[plain]),
                        detail=f"{tm[cell]:.2f} at lr {rates[cell].rate:g} vs plain {tm[plain]:.2f} at lr {rates[plain].rate:g}",
                        why=("with its rate tuned, plain SGD (momentum restarted every round) takes steps as large "
                             "as maintained momentum's, and within the short quick budget the two reach the "
                             "same accuracy")))
                else:
                    claims.append(ev.at_least(f"{n}-{mode}-E{e}", f"E = {e}: {label(n)} with {name} momentum >= plain",
                                              finals(runs[cell]), 0.0, baseline=finals(runs[plain]),
                                              detail=f"{m[cell]:.2f} vs plain {m[plain]:.2f}"))
    names = dict(F4_MODES)
    rows += [{"norm": label(n), "momentum": names[mode], "tuned at E": e, "lr": t.rate,
              "test acc (%)": round(tm[(n, mode, e)], 2), "lr tuning": t.describe()} for (n, mode, e), t in rates.items()]
    order = [m[("fedavg+bn", "reset", e)] - m[("fedavg+gn", "reset", e)] for e in es]
    claims.append(info("bn-vs-gn", "BN - GN (plain) per E: the paper's 'BN > GN' (reported)", float(np.mean(order)),
                       detail=", ".join(f"E={e}: {d:+.2f}" for e, d in zip(es, order, strict=True))))
    series = {f"{label(n)} {name}": [m[(n, mode, e)] for e in es] for n in F4_NORMS for mode, name in F4_MODES}
    return {"rows": rows, "claims": claims, "deviations": list(config.get("deviations", [])),
            "series": {"e": es, "lines": series,
                       "tuned_rates": {f"{label(n)} {names[mode]} E={e}": t.rate for (n, mode, e), t in rates.items()}},
            "notes": ["The momentum claims compare each variant at its own rate, tuned on a 20% validation split "
                      f"of the training set over {list(config.get('tune', {}).get('grid', []))} with seeds "
                      f"{config.get('tune', {}).get('seeds', [])} (the same grid, seeds and budget for every cell; {EDGE_RULE}); "
                      "the curves of the figure keep the common rate 0.02.",
                      "Plain = SGD momentum 0.9 restarted every round (the paper's 'FixBN (w/o momentum)' keeps the "
                      "SGD momentum inside a round; CATALOG §5.6 discusses the wording).",
                      "The paper prints no numbers for Fig. 4."]}


@plotter("fixbn-fig4")
def plot_fig4(result: Result) -> Any:
    colors = {"FedAvg+BN": "#0072B2", "FedAvg+GN": "#009E73", "FixBN": "#117733"}
    styles = {"plain": "o-", "* local": "o--", "† global": "o:"}
    lines = [(name, ys, styles[name.partition(" ")[2]], colors.get(name.partition(" ")[0], "#777777"))
             for name, ys in result.series["lines"].items()]
    return _against_e(result.series["e"], lines, f"FixBN Fig. 4: maintained momentum, Shards ({result.profile} profile)",
                      width=5.6, height=3.6, fontsize=6, ncols=3)


# -- Fig. 5 / Fig. 6: GN vs BN heat maps --------------------------------------------------------------

_F5_QUICK = {
    "grids": {"Q-MLP-BN": {"base": spec(Q_MLP, DECAY), "partitions": ["IID", "Dir(0.3)", "Shards"],
                           "budgets": ["steps", "rounds"]},
              "Q-LeNet": {"base": spec(Q_LENET, DECAY), "partitions": ["IID", "Shards"], "budgets": ["steps"]}},
    "e_grid": [1, 5, 25, 100], "steps": 200, "rounds": 4,
    "deviations": ["reduced grid (CATALOG): Q-MLP-BN (ResNet-20 stand-in; Q-RES is 5x slower per step) over "
                   "{IID, Dir(0.3), Shards} x E in {1, 5, 25, 100} x {200 local steps per client, 4 rounds}; Q-LeNet "
                   "on {IID, Shards} with the fixed-steps budget only"]}
#: The paper's grid: every partition of Fig. 3, both budgets, for each model.
_PAPER_GRID = {"partitions": [p for p, _ in PARTITIONS], "budgets": ["steps", "rounds"]}
_F5_PAPER = {
    "grids": {"CIFAR-10 / ResNet-20": {"base": spec(P_C10, DECAY), **_PAPER_GRID},
              "CIFAR-10 / LeNet": {"base": spec(P_C10, DECAY, {"model": {"name": "lenet"}}), **_PAPER_GRID},
              "Tiny-ImageNet / ResNet-18": {"base": spec(P_TINY, DECAY), **_PAPER_GRID, "shards_k": 40,
                                            "steps": 128_000}},
    "e_grid": list(E_GRID), "steps": 64_000, "rounds": 128,
    "deviations": ["fixed 128 epochs = 64,000 local steps per client on CIFAR-10 (128,000 on Tiny-ImageNet, 10 "
                   "clients); E = 2500 at the epoch budget gives 25.6 rounds, run as 26"]}
_F5_SMOKE = {"e_grid": [1, 2], "steps": 2, "rounds": 1,
             "grids": {g: {"base": {"train": {"batch_size": 8}}, "partitions": ["Shards"]} for g in ("Q-MLP-BN", "Q-LeNet")}}


def heat_runs(ctx: Context, config: Mapping[str, Any]) -> dict[tuple[str, str, str, int, str], list]:
    """(grid, partition, norm, E, budget) -> runs, for GN and BN."""
    out = {}
    for g, grid in config["grids"].items():
        for p in grid["partitions"]:
            part = {**dict(PARTITIONS)[p], **({"k": grid["shards_k"]} if p == "Shards" and "shards_k" in grid else {})}
            for b in grid.get("budgets", ["steps"]):
                amount = grid.get("steps", config["steps"]) if b == "steps" else config["rounds"]
                out |= {(g, p, n, e, b): train_runs(ctx, cell_spec(grid["base"], variant(n), part, e, b, amount))
                        for e in config["e_grid"] for n in ("fedavg+gn", "fedavg+bn")}
    return out


def _gap_table(runs: Mapping[tuple, list], es: Sequence[int]) -> dict[tuple[str, str, str], list[float]]:
    """(grid, partition, budget) -> Acc(GN) - Acc(BN) per E."""
    keys = sorted({(g, p, b) for g, p, _, _, b in runs})
    return {(g, p, b): [final_stats(runs[(g, p, "fedavg+gn", e, b)])[0] - final_stats(runs[(g, p, "fedavg+bn", e, b)])[0]
                        for e in es] for g, p, b in keys}


def _seed_gaps(runs: Mapping[tuple, list], g: str, p: str, e: int, b: str) -> list[float]:
    """Acc(GN) - Acc(BN) per seed in one cell."""
    return [x - y for x, y in zip(finals(runs[(g, p, "fedavg+gn", e, b)]), finals(runs[(g, p, "fedavg+bn", e, b)]),
                                  strict=True)]


def _gap_falls(ev: Seeds, runs: Mapping[tuple, list], g: str, p: str, es: Sequence[int], name: str) -> Claim:
    """GN - BN decreases in E under the fixed-steps budget (one step's interval may lie wholly the wrong way)."""
    return ev.monotone(name, f"{g}, {p}, fixed steps: GN - BN decreases in E (a step smaller than its 95% "
                       "interval is no violation; one violation allowed)",
                       [_seed_gaps(runs, g, p, e, "steps") for e in es], increasing=False,
                       labels=[f"E={e}" for e in es], allowed_violations=1,
                       why=("not monotone on the quick grid: few seeds, 4 values of E and a small budget per cell; "
                            "the paper's trend needs its larger runs"))


@entry(
    "fixbn-fig5",
    title="Is GN always better than BN? Heat maps over partition x E x budget",
    summary=("Fig. 5: Acc(GN), Acc(BN) and Acc(GN) - Acc(BN) over {IID, Dir(0.6/0.3/0.1), Shards} x E in {1, 20, "
             "100, 500, 2500} x {fixed 128 epochs, fixed 128 rounds}, for ResNet-20 and a LeNet-like CNN on CIFAR-10 "
             "and ResNet-18 on Tiny-ImageNet: no definite winner; BN >= GN in most cells; GN wins only with extreme "
             "non-IID and frequent communication."),
    look_for=("Red cells are where GN beats BN. The paper finds them only in the corner of extreme label skew "
              "(Shards) and small E; elsewhere BN is as good or better. Under the fixed-steps budget, GN's "
              "advantage should shrink as E grows."),
    kind="training", seeds=SEEDS, configs=profiles(_F5_QUICK, _F5_PAPER, _F5_SMOKE),
)
def compute_fig5(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = heat_runs(ctx, config)
    es = list(config["e_grid"])
    gaps = _gap_table(runs, es)
    rows = [{"grid": g, "partition": p, "budget": b, **{f"GN-BN E={e}": round(v, 2) for e, v in zip(es, d, strict=True)}}
            for (g, p, b), d in gaps.items()]
    ev = Seeds(ctx.seeds, next(iter(runs.values())))
    claims = []
    for g in config["grids"]:
        mine = {(p, b, e): v for (h, p, b), d in gaps.items() if h == g for e, v in zip(es, d, strict=True)}
        top = max(mine, key=lambda c: mine[c])
        corner = ("Shards", "steps", es[0])
        if corner in mine:
            # Per seed: the corner's gap minus the largest gap of the other cells of this grid.
            others = [_seed_gaps(runs, g, p, e, b) for p, b, e in mine if (p, b, e) != corner]
            here = _seed_gaps(runs, g, "Shards", es[0], "steps")
            margin = [h - max(col) for h, col in zip(here, zip(*others, strict=True), strict=True)] if others else here
            claims.append(ev.at_least(f"{g}-corner", f"{g}: GN - BN is largest in the (Shards, smallest E) cell (per "
                                      "seed: the corner minus the largest other cell)", margin, 0.0,
                                      detail=f"(Shards, E={es[0]}, steps): {mine[corner]:+.2f}; largest: ({top[0]}, "
                                             f"E={top[2]}, {top[1]}) {mine[top]:+.2f} (seed means)",
                                      why="on this reduced grid the largest GN - BN cell is elsewhere"))
        claims += [_gap_falls(ev, runs, g, p, es, f"{g}-{p}-gap-falls") for p in config["grids"][g]["partitions"]
                   if (g, p, "steps") in gaps]
        claims.append(info(f"{g}-bn-share", f"{g}: share of cells with BN >= GN (paper: most)",
                           float(np.mean([v <= 0 for v in mine.values()])),
                           detail=f"{sum(v <= 0 for v in mine.values())} of {len(mine)} cells"))
    a, k, r, ep = FIG5_CAPTION
    claims.append(at_least("caption-arithmetic", "caption: 20 E x 5 clients x 3200 rounds x batch 20 = 128 epochs of "
                           "CIFAR-10", -abs(a * k * r * 20 - ep * 50_000), 0.0,
                           detail=f"{a}*{k}*{r} = {a * k * r} steps; x 20 = {a * k * r * 20} = 128 x 50,000; without "
                                  "the batch factor it is not 128 epochs (CATALOG §5.6)", kind="consistency"))
    acc = {f"{g}|{p}|{n}|{e}|{b}": final_stats(rs)[0] for (g, p, n, e, b), rs in runs.items()}
    return {"rows": rows, "claims": claims, "deviations": list(config.get("deviations", [])),
            "series": {"e": es, "gaps": {f"{g}|{p}|{b}": d for (g, p, b), d in gaps.items()}, "acc": acc},
            "notes": ["Caption arithmetic: '20 E x 5 clients x 3200 rounds = 128 epochs' counts 320,000 SGD steps; "
                      "it equals 128 epochs of 50,000 images only with the implicit batch of 20 (CATALOG §5.6).",
                      "At E = 500 the fixed-epoch (128 rounds) and fixed-128-round budgets coincide in the paper."]}


@plotter("fixbn-fig5")
def plot_fig5(result: Result) -> Any:
    s = result.series
    panels: dict[tuple[str, str], dict[str, list[float]]] = {}
    for key, d in s["gaps"].items():
        g, p, b = key.split("|")
        panels.setdefault((g, b), {})[p] = d
    fig, axes = new_figure(1, len(panels), width=3.2, height=2.8, squeeze=False)
    vmax = max(1.0, max(abs(v) for d in s["gaps"].values() for v in d if v == v))
    im = None
    for ax, ((g, b), rows) in zip(axes[0], sorted(panels.items()), strict=True):
        names = list(rows)
        d = np.array([rows[n] for n in names])
        im = ax.imshow(d, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
        for i in range(d.shape[0]):
            for j in range(d.shape[1]):
                ax.text(j, i, f"{d[i, j]:+.1f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(s["e"])), [str(e) for e in s["e"]], fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_title(f"{g}, fixed {b}", fontsize=8)
        ax.set_xlabel("E", fontsize=7)
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="Acc(GN) - Acc(BN) (pts); red: GN better")
    fig.suptitle(f"FixBN Fig. 5: is GN always better than BN? ({result.profile} profile)")
    return fig


@entry(
    "fixbn-fig6",
    title="Accuracy vs E at a fixed number of SGD steps: BN vs GN",
    summary=("Fig. 6: CIFAR-10, test accuracy against E with the total SGD steps fixed: GN degrades as E grows, "
             "while BN benefits from larger E ('unreasonably effective')."),
    look_for=("Two lines against E (the Fig. 5 fixed-steps runs, Shards). GN falls as the clients drift further "
              "between averagings; BN should hold or even rise. The catalog warns that BN rising with E is only "
              "weakly reproducible at small scale: it is reported, not asserted."),
    kind="training", seeds=SEEDS, configs=profiles(_F5_QUICK, _F5_PAPER, _F5_SMOKE),
)
def compute_fig6(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = heat_runs(ctx, config)
    es = list(config["e_grid"])
    g = next(iter(config["grids"]))
    p = "Shards" if "Shards" in config["grids"][g]["partitions"] else config["grids"][g]["partitions"][0]
    gn = [final_stats(runs[(g, p, "fedavg+gn", e, "steps")])[0] for e in es]
    bn = [final_stats(runs[(g, p, "fedavg+bn", e, "steps")])[0] for e in es]
    rows = [{"E": e, "GN": round(a, 2), "BN": round(b, 2), "GN - BN": round(a - b, 2)} for e, a, b in zip(es, gn, bn, strict=True)]
    ev = Seeds(ctx.seeds, runs[(g, p, "fedavg+gn", es[0], "steps")])
    claims = [
        ev.monotone("gn-falls", f"{g}, {p}: Acc(GN) decreases in E (a step smaller than its 95% interval is no "
                    "violation; one violation allowed)", [finals(runs[(g, p, "fedavg+gn", e, "steps")]) for e in es],
                    increasing=False, labels=[f"E={e}" for e in es], allowed_violations=1,
                    why=("on the digits MLP GN first gains from more local steps and only falls at the largest E; "
                         "the paper's steady decline needs its longer budget")),
        # The same runs and statement as fixbn-fig5's claim for this grid and partition: counted there.
        linked(_gap_falls(ev, runs, g, p, es, "gap-falls"), "fixbn-fig5"),
        info("bn-rises", f"{g}, {p}: Acc(BN) at the largest E minus at the smallest (paper: BN improves with E)",
             bn[-1] - bn[0], detail=", ".join(f"E={e}: {v:.2f}" for e, v in zip(es, bn, strict=True))),
    ]
    return {"rows": rows, "claims": claims, "deviations": list(config.get("deviations", [])),
            "series": {"e": es, "gn": gn, "bn": bn, "setting": f"{g}, {p}"},
            "notes": ["The same runs as fixbn-fig5's fixed-steps cells (run cache)."]}


@plotter("fixbn-fig6")
def plot_fig6(result: Result) -> Any:
    s = result.series
    return _against_e(s["e"], [("GN", s["gn"], "o-", color_for("fedavg+gn")), ("BN", s["bn"], "s-", color_for("fedavg+bn"))],
                      f"FixBN Fig. 6: {s['setting']} ({result.profile} profile)", width=4.8, height=3.4, fontsize=8)
