"""Figs. 6, 7, 8 and 13: the same comparison on other data: MNIST, CIFAR-100, and feature shift.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments.claims import at_most
from bnfl.experiments.core import Context
from bnfl.experiments.curves import curve, merge_specs, train_runs
from bnfl.experiments.evidence import Seeds, finals
from bnfl.experiments.papers.fedtan import setups
from bnfl.experiments.papers.fedtan.layouts import domains_plot, iid_noniid_plot
from bnfl.experiments.papers.fedtan.setups import IID, NONIID, variant_spec
from bnfl.experiments.registry import entry
from bnfl.experiments.setups import config_deviations, method_row, spec, with_data
from bnfl.experiments.setups import label as method_label


def _iid_noniid_entry(ctx: Context, config: dict[str, Any], methods: Sequence[str], noniid: Mapping[str, Any],
                      gap: float, soft_gap: bool) -> dict[str, Any]:
    runs = {(s, k): train_runs(ctx, merge_specs(config["base"], {"partition": p}, variant_spec(k)))
            for s, p in (("iid", IID), ("non-iid", noniid)) for k in methods}
    rows = [method_row(s, k, r) for (s, k), r in runs.items() if not (k == "centralized" and s == "non-iid")]
    ev = Seeds(ctx.seeds, runs[("iid", "centralized")])
    c = finals(runs[("iid", "centralized")])
    tan_iid, tan_non = finals(runs[("iid", "fedtan")]), finals(runs[("non-iid", "fedtan")])
    avg_non = finals(runs[("non-iid", "fedavg+bn")])
    gap_claim = (ev.at_most("fedavg-noniid", f"non-iid: FedAvg+BN <= FedTAN - {gap:g} pts", avg_non, -gap,
                            baseline=tan_non, detail=f"FedAvg+BN {np.mean(avg_non):.2f} vs FedTAN {np.mean(tan_non):.2f}",
                            why=(f"the proxy does not show the gap: FedAvg+BN ends only "
                                 f"{np.mean(tan_non) - np.mean(avg_non):.2f} pts below FedTAN (the effect needs clients "
                                 "whose BN statistics differ strongly; in this 100-class Gaussian-mixture proxy they "
                                 "evidently differ too little)"))
                 if not soft_gap else
                 at_most("fedavg-noniid", f"non-iid: FedAvg+BN <= FedTAN - {gap:g} pts (uncalibrated: reported, not "
                         "asserted)", float(np.mean(avg_non)), float(np.mean(tan_non)) - gap, soft=True,
                         detail=f"FedAvg+BN {np.mean(avg_non):.2f} vs FedTAN {np.mean(tan_non):.2f}"))
    claims = [
        ev.within("fedtan-iid", "iid: FedTAN within 2 pts of Central", tan_iid, c, 2.0),
        ev.within("fedtan-noniid", "non-iid: FedTAN within 8 pts of Central", tan_non, c, 8.0),
        gap_claim,
    ]
    series = {f"{s}/{k}": curve(r) for (s, k), r in runs.items() if not (k == "centralized" and s == "non-iid")}
    return {"rows": rows, "paper": [], "claims": claims, "series": series, "deviations": config_deviations(config)}


@entry(
    "fedtan-fig6",
    title="MNIST (784x30x10 + one BN layer), iid and non-iid",
    summary=("Fig. 6: MNIST test accuracy; FedTAN is even closer to centralized, other baselines drop on non-iid "
             "data. No numbers."),
    look_for=("MNIST with the 784x30x10 network and a single BN layer ($L=1$, so FedTAN costs only 4 rounds per "
              "iteration). FedTAN should track centralized training even more closely; the other schemes drop on "
              "non-iid data. With one BN layer the FedAvg+BN gap may be small, so the catalog asks to report it "
              "rather than assert it."),
    kind="training", seeds=setups.SEEDS, configs=setups.profiles(
        quick={"base": spec(setups.Q_BASE, setups.Q_MLP1), "methods": ["centralized", "fedtan", "fedavg+bn", "fedavg+alg2"],
           "deviations": ["4 of the 6 methods (FedBN and SiloBN left out)"]},
        paper={"base": dict(setups.P_MNIST), "methods": list(setups.ALL6)},
    ),
    plot=iid_noniid_plot("FedTAN Fig. 6: MNIST-like, one BN layer"),
)
def compute_fig6(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    out = _iid_noniid_entry(ctx, config, config["methods"], NONIID, 3.0, True)
    out["notes"] = ["The MNIST activation is not stated in the paper; bnfl uses ReLU.",
                    "R = 500 iterations is inferred from Table 5 (CATALOG §5.3)."]
    return out


@entry(
    "fedtan-fig7",
    title="CIFAR-100 (20 classes per client), iid and non-iid",
    summary="Fig. 7: CIFAR-100 with ResNet-20; the same picture as Fig. 6. No numbers.",
    look_for=("CIFAR-100 with 20 disjoint classes per client: the same picture as Fig. 6 on a harder task. Our "
              "quick proxy is a 100-class Gaussian mixture (Q-GAUSS(100))."),
    kind="training", seeds=setups.SEEDS, configs=setups.profiles(
        quick={"base": with_data(spec(setups.Q_BASE, {"train": {"momentum": 0.9, "weight_decay": 5e-4, "lr": 0.05,
                                                         "fractions": [0.4, 0.6, 0.8], "gamma": 0.2}}),
                                 {"name": "gaussian_mixture", "num_classes": 100, "n_train": 10000, "n_test": 1000}),
           "methods": ["centralized", "fedtan", "fedavg+bn"],
           "deviations": []},
        paper={"base": spec(setups.P_C10, {"data": {"name": "cifar100"},
                                    "train": {"momentum": 0.9, "weight_decay": 5e-4, "lr": 0.1,
                                              "milestones": [4000, 6000, 8000], "gamma": 0.2}}),
           "methods": list(setups.ALL6)},
        smoke={"base": {"data": {"n_train": 2000, "n_test": 200}}},
    ),
    plot=iid_noniid_plot("FedTAN Fig. 7: CIFAR-100 analogue"),
)
def compute_fig7(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    out = _iid_noniid_entry(ctx, config, config["methods"], {"kind": "classes_per_client", "k": 20}, 5.0, False)
    out["notes"] = ["Non-iid: 20 disjoint classes per client (5 x 20 = 100) [inferred].", setups.REFERENCE_MOMENTUM_NOTE]
    return out


@entry(
    "fedtan-fig8",
    title="Office-Caltech10 feature shift: every model on every domain",
    summary=("Fig. 8 (N=4: Amazon, Caltech, DSLR, Webcam; AlexNet-BN): FedBN beats SingleNet on cross-domain tests; "
             "FedBN-D is poor on Amazon and FedBN-A on DSLR; FedTAN is good on every test set and more robust than "
             "FedAvg+BN. No numbers."),
    look_for=("Feature shift instead of label shift: each of 4 clients is one domain (Office-Caltech10: Amazon, "
              "Caltech, DSLR, Webcam; quick proxy: 4 transformed copies of the digits). Every model is tested on "
              "every domain. FedBN-X (client X's personalised model) should beat SingleNet-X off its own domain, "
              "but some FedBN-X models are poor on other domains; FedTAN (one global model) should be good "
              "everywhere and at least as good as FedAvg+BN on the union."),
    kind="training", seeds=setups.SEEDS, configs=setups.profiles(
        quick={"base": spec(setups.Q_DOM, {"data": {"domains": ["clean", "contrast", "blur", "thick"]}, "partition": {"num_clients": 4}}),
           "deviations": []},
        paper={"base": dict(setups.OFFICE), "deviations": [setups.UNSTATED_R]},
        smoke={"base": {"data": {"train_per_domain": 24}}},
    ),
    plot=domains_plot("FedTAN Fig. 8: feature shift (4 domains)"),
)
@entry(
    "fedtan-fig13",
    title="DomainNet feature shift (Supp. F): every model on every domain",
    summary=("Fig. 13 (N=6: clipart, infograph, painting, quickdraw, real, sketch; top-10 classes; AlexNet): FedBN-Q "
             "and FedBN-S are poor off their own domain, FedTAN is good on all, FedAvg+BN is less robust. No numbers."),
    look_for=("DomainNet (Supplement F): six clients, one domain each. As Fig. 8 with six domains: personalised "
              "FedBN models are poor off their own domain, FedTAN's single global model is good on all of them."),
    kind="training", seeds=setups.SEEDS, configs=setups.profiles(
        quick={"base": spec(setups.Q_DOM, {"data": {"domains": ["clean", "contrast", "blur", "noise", "thick", "gain"]},
                              "partition": {"num_clients": 6}}),
           "deviations": []},
        paper={"base": dict(setups.DOMAINNET), "deviations": [setups.UNSTATED_R]},
        smoke={"base": {"data": {"train_per_domain": 24}}},
    ),
    plot=domains_plot("FedTAN Fig. 13: feature shift (6 domains)"),
)
def compute_domains(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    base = merge_specs(config["base"], {"partition": {"kind": "by_domain"}})
    runs = {k: train_runs(ctx, merge_specs(base, variant_spec(k))) for k in ("fedtan", "fedavg+bn", "fedbn", "singlenet")}
    domains = runs["fedtan"][0]["domains"]
    nd = len(domains)
    names = [*domains, "union"]
    # Means over seeds: the global models' accuracy per test domain (nd+1,), the clients' own models' (nd, nd+1).
    glob = {k: np.mean([np.asarray(r["domain_acc_global"], dtype=float) for r in runs[k]], axis=0)
            for k in ("fedtan", "fedavg+bn")}
    per = {k: np.mean([np.asarray(r["domain_acc_clients"], dtype=float) for r in runs[k]], axis=0)
           for k in ("fedbn", "singlenet")}
    models = [(method_label(k), glob[k]) for k in ("fedtan", "fedavg+bn")]
    models += [(f"{method_label(k)}-{domains[x]}", per[k][x]) for k in ("fedbn", "singlenet") for x in range(nd)]
    rows = [{"model": model, **{n: round(float(v), 2) for n, v in zip(names, accs, strict=True)}} for model, accs in models]
    ev = Seeds(ctx.seeds, runs["fedtan"])
    claims = []
    for j, d in enumerate(domains):
        worst = float(per["fedbn"][:, j].min())
        tan_j = [float(r["domain_acc_global"][j]) for r in runs["fedtan"]]
        worst_j = [min(float(row[j]) for row in r["domain_acc_clients"]) for r in runs["fedbn"]]
        claims.append(ev.at_least(f"fedtan-{d}", f"test domain {d}: FedTAN >= min_X FedBN-X + 5 pts (per seed)",
                                  tan_j, 5.0, baseline=worst_j,
                                  detail=f"FedTAN {glob['fedtan'][j]:.2f} vs worst FedBN-X {worst:.2f} (mean matrices)"))
    pairs = [(x, j) for x in range(nd) for j in range(nd) if x != j]
    need = math.ceil(0.75 * len(pairs))
    wins = [float(sum(rb["domain_acc_clients"][x][j] >= rs["domain_acc_clients"][x][j] for x, j in pairs))
            for rb, rs in zip(runs["fedbn"], runs["singlenet"], strict=True)]
    claims.append(ev.at_least("fedbn-vs-singlenet", f"FedBN-X >= SingleNet-X on off-domain tests in >= {need} of "
                              f"{len(pairs)} (X, test-domain) pairs (count per seed)", wins, float(need)))
    union = {k: [float(r["domain_acc_global"][-1]) for r in runs[k]] for k in ("fedtan", "fedavg+bn")}
    claims.append(ev.at_least("fedtan-vs-fedavg-union", "union test set: FedTAN >= FedAvg+BN", union["fedtan"], 0.0,
                              baseline=union["fedavg+bn"],
                              detail=f"FedTAN {glob['fedtan'][-1]:.2f} vs FedAvg+BN {glob['fedavg+bn'][-1]:.2f}"))
    series = {"domains": names, "fedtan": glob["fedtan"].tolist(), "fedavg": glob["fedavg+bn"].tolist(),
              "fedbn": per["fedbn"].tolist(), "singlenet": per["singlenet"].tolist()}
    notes = ["FedBN-X / SingleNet-X: client X's own model; FedTAN and FedAvg+BN: the global model. Every model "
             "is tested on every domain's test set and on their union.",
             "The 9-of-12 rule for 4 domains is scaled to ceil(0.75 x pairs) for other domain counts."]
    return {"rows": rows, "paper": [], "claims": claims, "series": series, "notes": notes,
            "deviations": config_deviations(config)}


