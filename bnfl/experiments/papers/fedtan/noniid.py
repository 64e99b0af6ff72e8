"""Fig. 3, Fig. 4 and Table 1: BN under non-iid clients, without and with momentum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bnfl.experiments.claims import Claim, at_least, at_most, info, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.curves import (
    curve,
    final_stats,
    fmt_mean_std,
    late_loss,
    loss_curve,
    merge_specs,
    roughness,
    train_runs,
)
from bnfl.experiments.papers.fedtan.drawing import bars_vs_paper, curve_panels
from bnfl.experiments.papers.fedtan.numbers import (
    TABLE1,
)
from bnfl.experiments.papers.fedtan.setups import (
    IID,
    NONIID,
    P_C10,
    P_MOM,
    Q_BASE,
    Q_MOM,
    REFERENCE_MOMENTUM_NOTE,
    SEEDS,
    acc_noise,
    config_deviations,
    method_color,
    method_label,
    method_row,
    profiles,
    spec,
    variant_spec,
)
from bnfl.experiments.printed import parse_mean_std
from bnfl.experiments.registry import entry, plotter

# -- fig3 ------------------------------------------------------------------------------------


@entry(
    "fedtan-fig3",
    title="FL with BN at E=1: no BN fails, FedAvg+BN collapses on non-iid data",
    summary=("Fig. 3 (ResNet-20, CIFAR-10, E=1): (a) FedAvg cannot train ResNet-20 without BN, "
             "FedAvg+BN can; (b) FedAvg+BN collapses under non-iid data even at E=1, and FedProx "
             "and SCAFFOLD are also poor. No numbers are printed."),
    look_for=("Panel (a): without BN a deep network barely trains with FedAvg, with BN it does. "
              "Panel (b): even with a single local step ($E=1$), where FedAvg is close to "
              "large-batch SGD in theory, FedAvg+BN collapses on non-iid clients, and FedProx and "
              "SCAFFOLD do not repair it: the problem is the local BN statistics and "
              "stat-gradients, not client drift."),
    kind="training",
    seeds=SEEDS,
    configs=profiles(
        quick={"base_a": spec(Q_BASE, {"model": {"name": "q_plain"}, "rounds": 1500,
                                       "train": {"local_steps": 1, "lr": 0.5, "eval_every": 75}}),
               "base_b": spec(Q_BASE, {"rounds": 1500, "train": {"local_steps": 1, "eval_every": 75}}),
           "deviations": []},
        paper={"base_a": spec(P_C10, {"train": {"local_steps": 1}}),
               "base_b": spec(P_C10, {"train": {"local_steps": 1}})},
    ),
)
def compute_fig3(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    a = {k: train_runs(ctx, merge_specs(config["base_a"], {"partition": IID}, variant_spec(k))) for k in ("fedavg+bn", "fedavg+none")}
    cells = [("iid", "fedavg+bn", IID), ("non-iid", "fedavg+bn", NONIID), ("non-iid", "fedprox", NONIID),
             ("non-iid", "scaffold", NONIID), ("pooled", "centralized", IID)]
    b = {(s, k): train_runs(ctx, merge_specs(config["base_b"], {"partition": p}, variant_spec(k))) for s, k, p in cells}
    rows = [method_row("(a) iid, deep plain MLP", k, r) for k, r in a.items()]
    rows += [method_row(f"(b) {s}", k, r) for (s, k), r in b.items()]
    bn, nobn = final_stats(a["fedavg+bn"])[0], final_stats(a["fedavg+none"])[0]
    diverged = any(r.get("diverged") for r in a["fedavg+none"])
    central = final_stats(b[("pooled", "centralized")])[0]
    claims = []
    if diverged:
        claims.append(Claim("a-no-bn", "(a) the no-BN run ends >= 20 pts below the BN run, or diverges",
                            "pass", None, None, None, "the no-BN run diverged (non-finite loss)"))
    else:
        claims.append(at_most("a-no-bn", "(a) the no-BN run ends >= 20 pts below the BN run, or diverges",
                              nobn, bn - 20, detail=f"no-BN {nobn:.2f} vs BN {bn:.2f} (needs <= {bn - 20:.2f})"))
    pooled = b[("pooled", "centralized")]
    for k in ("fedavg+bn", "scaffold"):
        v = final_stats(b[("non-iid", k)])[0]
        claims.append(at_most(f"b-{k}", f"(b) {method_label(k)} non-iid <= Central - 10 pts", v, central - 10,
                              detail=f"{method_label(k)} {v:.2f} vs Central {central:.2f}",
                              **acc_noise(b[("non-iid", k)], pooled)))
    # At E = 1 FedProx's proximal gradient mu (w - w_global) is zero at the only local step: FedProx
    # is FedAvg, and its run is the same evidence again. Checked as such, not counted as a reproduction.
    prox, avg = final_stats(b[("non-iid", "fedprox")])[0], final_stats(b[("non-iid", "fedavg+bn")])[0]
    claims.append(within("b-fedprox-is-fedavg", "(b) at E=1 FedProx equals FedAvg+BN exactly (the proximal "
                         "term has zero gradient at the only local step)", prox, avg, 0.0,
                         detail=f"FedProx {prox:.2f} vs FedAvg+BN {avg:.2f}", kind="consistency"))
    iid = final_stats(b[("iid", "fedavg+bn")])[0]
    claims.append(within("b-fedavg-iid", "(b) FedAvg+BN iid within 2 pts of Central", iid, central, 2.0,
                         **acc_noise(b[("iid", "fedavg+bn")], pooled)))
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
    from bnfl.plots import new_figure

    fig, (a1, a2) = new_figure(1, 2, width=4.4, height=3.2)
    for key in ("fedavg+bn", "fedavg+none"):
        c = result.series[f"a/{key}"]
        a1.plot(c["x"], c["y"], color=method_color(key), label=method_label(key) + (" (diverged)" if c["diverged"] else ""))
    a1.set_title("(a) deep plain MLP, iid, E=1")
    for name, c in result.series.items():
        if not name.startswith("b/"):
            continue
        _, setting, key = name.split("/")
        ls = "--" if setting == "iid" else "-"
        # FedAvg+BN, FedProx and SCAFFOLD can nearly coincide: draw the later ones thinner.
        lw = {"fedavg+bn": 3.0, "fedprox": 1.8, "scaffold": 1.0}.get(key, 1.6)
        a2.plot(c["x"], c["y"], ls, color=method_color(key), lw=lw, label=f"{method_label(key)} {setting}")
    a2.set_title("(b) Q-MLP-BN, E=1")
    for ax in (a1, a2):
        ax.set_xlabel("iteration")
        ax.set_ylabel("test accuracy (%)")
        ax.legend(fontsize=7)
    fig.suptitle("FedTAN Fig. 3: FL with BN at E=1")
    return fig

# -- fig4 / tab1 -----------------------------------------------------------------------------

#: Why FedBN misses the catalog's 30% bound on the digits proxy (the paper: 19.46% on CIFAR-10).
FEDBN_WHY = ("FedBN averages every weight but BN's, so each client model still knows all 10 classes and "
             "only normalises them with its own 2-class statistics; on the small digits MLP that costs less "
             "than on CIFAR-10's ResNet-20, so accuracy stays above the 20% of a 2-class predictor")

_FIG4_METHODS = ("centralized", "fedtan", "fedavg+bn", "fedavg+alg2", "fedbn", "silobn")


def _fig4_runs(ctx: Context, base: Mapping[str, Any], methods: Sequence[str]) -> dict[tuple[str, str], list]:
    return {(s, k): train_runs(ctx, merge_specs(base, {"partition": p}, variant_spec(k)))
            for s, p in (("iid", IID), ("non-iid", NONIID)) for k in methods}


def _ordering_claims(runs: Mapping[tuple[str, str], list], tag: str) -> list[Claim]:
    keys = ("fedavg+bn", "fedavg+alg2", "fedtan", "fedbn", "silobn")
    f = {k: final_stats(runs[("non-iid", k)])[0] for k in keys}
    gap = min(f["fedavg+alg2"] - f["fedavg+bn"], f["fedtan"] - f["fedavg+alg2"])
    nz = acc_noise(*(runs[("non-iid", k)] for k in ("fedavg+bn", "fedavg+alg2", "fedtan")))
    return [
        at_least(f"{tag}ordering", "non-iid ordering FedAvg+BN < FedAvg+Alg2 < FedTAN", gap, 0.0,
                 detail=f"FedAvg+BN {f['fedavg+bn']:.2f} < Alg2 {f['fedavg+alg2']:.2f} < FedTAN {f['fedtan']:.2f} "
                        f"(smallest step {gap:+.2f})", **nz),
        at_least(f"{tag}fedtan-gap", "non-iid FedTAN - FedAvg+BN >= 8 pts", f["fedtan"] - f["fedavg+bn"], 8.0, **nz),
        at_most(f"{tag}fedbn", "non-iid FedBN test accuracy <= 30%", f["fedbn"], 30.0,
                **acc_noise(runs[("non-iid", "fedbn")]), why=FEDBN_WHY),
    ]


@entry(
    "fedtan-fig4",
    title="CIFAR-10 without momentum: loss and accuracy curves, iid and non-iid",
    summary=("Fig. 4: training loss and test accuracy of Centralized+BN, FedTAN, FedAvg+BN, "
             "FedAvg+Algorithm 2, FedBN and SiloBN (SGD without momentum). iid: all comparable to "
             "centralized. Non-iid: FedTAN stays close to centralized, FedAvg+Alg2 beats FedAvg+BN,"
             " FedBN/SiloBN reach low local loss but poor global accuracy."),
    look_for=("Without momentum: on iid data all schemes should be comparable to centralized "
              "training (Property 1: local and global statistics agree, $B_i = 0$). On non-iid data"
              " FedTAN should stay close to centralized, FedAvg+Algorithm 2 (global statistics, "
              "local stat-gradients; Property 3) should beat FedAvg+BN but not reach FedTAN, and "
              "FedBN/SiloBN should reach a low *local* training loss but a poor accuracy on the "
              "global test set (each client's model only knows its own BN statistics)."),
    kind="training",
    seeds=SEEDS,
    configs=profiles(
        quick={"base": dict(Q_BASE), "deviations": []},
        paper={"base": dict(P_C10)},
    ),
)
def compute_fig4(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = _fig4_runs(ctx, config["base"], _FIG4_METHODS)
    rows = [method_row(s, k, r, **({"late train loss": round(late_loss(r), 4)})) for (s, k), r in runs.items()]
    central = final_stats(runs[("iid", "centralized")])[0]
    claims = [within(f"iid-{k}", f"iid: {method_label(k)} within 2 pts of Central", final_stats(runs[("iid", k)])[0],
                     central, 2.0, **acc_noise(runs[("iid", k)], runs[("iid", "centralized")]))
              for k in _FIG4_METHODS if k != "centralized"]
    claims += _ordering_claims(runs, "")
    tan = final_stats(runs[("non-iid", "fedtan")])[0]
    silo = final_stats(runs[("non-iid", "silobn")])[0]
    claims.append(at_most("silobn", "non-iid SiloBN <= FedTAN - 15 pts", silo, tan - 15,
                          detail=f"SiloBN {silo:.2f} vs FedTAN {tan:.2f}",
                          **acc_noise(runs[("non-iid", "silobn")], runs[("non-iid", "fedtan")])))
    c_loss = late_loss(runs[("non-iid", "centralized")])
    for k in ("fedbn", "silobn"):
        v = late_loss(runs[("non-iid", k)])
        claims.append(at_most(f"{k}-loss", f"non-iid {method_label(k)} mean local training loss < Central's "
                              "(after the first 20% of rounds)", v, c_loss,
                              detail=f"{method_label(k)} {v:.4f} vs Central {c_loss:.4f}",
                              why=("centralized training of the small digits MLP already drives the loss to "
                                   f"{c_loss:.3f} (it nearly memorises 1,437 samples), leaving no room for the lower "
                                   "local loss the paper sees on CIFAR-10")))
    r_alg2, r_tan = roughness(runs[("non-iid", "fedavg+alg2")]), roughness(runs[("non-iid", "fedtan")])
    claims.append(info("roughness", "curve roughness (mean |delta acc| between evaluations), FedAvg+Alg2 vs "
                       "FedTAN (reported, not asserted)", r_alg2 - r_tan,
                       detail=f"Alg2 {r_alg2:.2f} pts vs FedTAN {r_tan:.2f} pts"))
    series = {f"{s}/{k}": curve(r) for (s, k), r in runs.items()}
    series.update({f"{s}/{k}/loss": loss_curve(r) for (s, k), r in runs.items()})
    paper = [{"setting": "iid", "method": "FedTAN", "test acc (%)": "89.32 ±0.28", "source": "Table 2 (w/o momentum)"},
             {"setting": "non-iid", "method": "FedTAN", "test acc (%)": "86.69 ±0.82", "source": "Table 2 (w/o momentum)"}]
    notes = ["The paper prints curves only; the final FedTAN values of this setting are in Table 2.",
             "FedBN and SiloBN follow FedTAN's protocol: each client's model on the global test set, averaged; "
             "their training loss is the clients' local loss."]
    return {"rows": rows, "paper": paper, "claims": claims, "series": series, "notes": notes,
            "deviations": config_deviations(config)}


@plotter("fedtan-fig4")
def plot_fig4(result: Result) -> Any:
    return curve_panels(result, [("iid", "loss", "(a) training loss, iid"), ("iid", "acc", "(b) test accuracy, iid"),
                                  ("non-iid", "loss", "(c) training loss, non-iid"),
                                  ("non-iid", "acc", "(d) test accuracy, non-iid")],
                         f"FedTAN Fig. 4: SGD without momentum ({result.profile} profile)")


@entry(
    "fedtan-tab1",
    title="Test accuracy with momentum (CIFAR-10)",
    summary=("Table 1: final test accuracy with SGD momentum 0.9 and wd 1e-4 (lr 0.5 -> 0.05 @6000 "
             "-> 0.005 @8000), 5 runs. FedTAN beats FedAvg+BN by 41.76 pts on non-iid data; FedBN "
             "and SiloBN ~19.4%."),
    look_for=("The paper's main table (SGD with momentum 0.9, weight decay 1e-4). Non-iid: FedTAN "
              "87.66 vs FedAvg+BN 45.90 (the '+41.76%' of the text is this difference in points); "
              "FedBN and SiloBN sit at ~19.4%, just under the 20% of a model that only predicts its"
              " two local classes."),
    kind="training",
    seeds=SEEDS,
    configs=profiles(
        quick={"base": spec(Q_BASE, Q_MOM), "deviations": []},
        paper={"base": spec(P_C10, P_MOM)},
    ),
)
def compute_tab1(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    runs = _fig4_runs(ctx, config["base"], _FIG4_METHODS)
    rows = []
    keys = {"Centralized+BN": "centralized", "FedTAN": "fedtan", "FedAvg+BN": "fedavg+bn",
            "FedAvg+Algorithm 2": "fedavg+alg2", "FedBN": "fedbn", "SiloBN": "silobn"}
    bars: dict[str, list[float]] = {"i.i.d. ours": [], "non-i.i.d. ours": []}
    for name, p_iid, p_non in TABLE1:
        k = keys[name]
        rows.append({"FL scheme": name, "i.i.d. ours": fmt_mean_std(*final_stats(runs[("iid", k)])), "i.i.d. paper": p_iid,
                     "non-i.i.d. ours": fmt_mean_std(*final_stats(runs[("non-iid", k)])), "non-i.i.d. paper": p_non})
        bars["i.i.d. ours"].append(final_stats(runs[("iid", k)])[0])
        bars["non-i.i.d. ours"].append(final_stats(runs[("non-iid", k)])[0])
    claims = _ordering_claims(runs, "")
    iid = [final_stats(runs[("iid", k)])[0] for k in _FIG4_METHODS]
    claims.append(at_most("iid-spread", "all iid entries within 2 pts of each other", max(iid) - min(iid), 2.0))
    tan, avg = final_stats(runs[("non-iid", "fedtan")])[0], final_stats(runs[("non-iid", "fedavg+bn")])[0]
    paper_gap = parse_mean_std(TABLE1[1][2])[0] - parse_mean_std(TABLE1[2][2])[0]
    claims.append(info("gain", "FedTAN gain over FedAvg+BN on non-iid (paper: '+41.76%' = 87.66 - 45.90 pts)",
                       tan - avg, detail=f"ours {tan - avg:+.2f} pts vs paper {paper_gap:+.2f} pts"))
    series = {f"{s}/{k}": curve(r) for (s, k), r in runs.items()}
    series["bars"] = bars  # our means, per column of the table (the plot reads numbers, not strings)
    paper = [{"FL scheme": n, "i.i.d. (%)": a, "Non-i.i.d. (%)": b} for n, a, b in TABLE1]
    notes = ["'+41.76%' in Sec. 6.2.2 is a difference in percentage points: 87.66 - 45.90.",
             "Sanity: FedBN and SiloBN at ~19.4% are just under the 20% a model predicting only its 2 "
             "local classes can reach on the 10-class test set.", REFERENCE_MOMENTUM_NOTE]
    return {"rows": rows, "paper": paper, "claims": claims, "series": series, "notes": notes,
            "deviations": config_deviations(config)}


@plotter("fedtan-tab1")
def plot_tab1(result: Result) -> Any:
    return bars_vs_paper(result, ["i.i.d.", "non-i.i.d."],
                          f"FedTAN Table 1: with momentum (ours: {result.profile} profile)",
                          ["i.i.d. paper", "non-i.i.d. paper"], ["i.i.d. ours", "non-i.i.d. ours"])
