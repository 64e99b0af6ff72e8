"""HBN's pictures and objects: Fig. 2 (normalisation choices on two toy clusters), Fig. 3 (the
Dirichlet label partitions) and Table 7 (Simple-CNN, checked against the model bnfl builds)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from bnfl import models
from bnfl.data import describe, partition
from bnfl.experiments.claims import at_least, at_most, info, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.drawing import table_figure
from bnfl.experiments.papers.hbn import numbers as N
from bnfl.experiments.registry import entry, plotter, same_for_all_profiles
from bnfl.experiments.training import load_data
from bnfl.fl.state import state_groups
from bnfl.nn import FeatureNorm, is_norm_layer
from bnfl.plots import new_figure
from bnfl.theory import hbn_toy as T

# -- Fig. 2 --------------------------------------------------------------------------------------
_FIG2 = same_for_all_profiles({"n": 300, "seed": 0, "alpha": 0.0, "deviations": [
    "the paper gives no parameters: the catalog's clusters (A ~ N((-1,0), diag(0.3^2, 1)), "
    "B ~ N((2,1), diag(1.5^2, 0.5^2)), 300 points each), hybrid with s = 0.5"]})


@entry(
    "hbn-fig2",
    title="Normalisation choices on two toy clusters",
    summary=("Fig. 2: local normalisation (each client its own statistics) makes the two clients' "
             "clusters overlap; global normalisation keeps their layout; hybrid normalisation (eq. 9) "
             "sits in between: it evens out the scales and keeps the global structure."),
    look_for=("Two clients, one 2-D Gaussian cluster each. Left to right: raw, local BN, global BN, hybrid "
              "(s = sigmoid(alpha) = 0.5 on the global statistics). Watch the distance between the two "
              "centres and the clusters' spreads."),
    kind="exact", configs=_FIG2,
)
def compute_fig2(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    clusters = T.make_clusters(n=int(config["n"]), seed=int(config["seed"]))
    panels = T.all_normalizations(clusters, alpha=float(config["alpha"]))
    hybrid = next(k for k in panels if k.startswith("hybrid"))
    d = {k: T.centre_distance(v) for k, v in panels.items()}
    r = {k: T.std_ratio(v) for k, v in panels.items()}
    claims = [
        at_most("local-overlap", "local normalisation: centre distance < 0.05", d["local BN"], 0.05),
        at_least("global-keeps", "global normalisation: centre distance > 1", d["global BN"], 1.0),
        at_least("hybrid-between-low", "hybrid: centre distance above local's", d[hybrid] - d["local BN"], 1e-9,
                 detail=f"{d[hybrid]:.3f} vs {d['local BN']:.3f}"),
        at_least("hybrid-between-high", "hybrid: centre distance below global's", d["global BN"] - d[hybrid], 1e-9,
                 detail=f"{d[hybrid]:.3f} vs {d['global BN']:.3f}"),
        at_least("hybrid-scales", "hybrid: per-cluster std ratio closer to 1 than under global normalisation",
                 r["global BN"] - r[hybrid], 1e-9, detail=f"hybrid {r[hybrid]:.3f} vs global {r['global BN']:.3f}"),
    ]
    rows = [{"panel": k, "centre distance": round(d[k], 4), "std ratio (1 = equal spread)": round(r[k], 4)}
            for k in panels]
    points = {k: [np.round(c, 4).tolist() for c in v] for k, v in panels.items() if k != "per-sample (LN/GN)"}
    return {"rows": rows, "paper": [], "claims": claims, "deviations": list(config["deviations"]),
            "series": {"points": points},
            "notes": ["Computed by bnfl.theory.hbn_toy; the hybrid panel runs bnfl.nn.hybrid_batch_norm (eq. 9-10) "
                      "with the union's moments as the global statistics. Per-sample normalisation (LN/GN) is "
                      "listed in the table for comparison (the paper's Fig. 2 has no such panel)."]}


@plotter("hbn-fig2")
def plot_fig2(result: Result) -> Any:
    pts = result.series["points"]
    order = [r["panel"] for r in result.rows if r["panel"] in pts]  # raw, local, global, hybrid
    fig, axes = new_figure(1, len(pts), width=2.8, height=2.8)
    for ax, (name, clusters) in zip(axes, [(k, pts[k]) for k in order], strict=True):
        for j, (c, col) in enumerate(zip(clusters, ("#0072B2", "#D55E00"), strict=False)):
            a = np.asarray(c)
            ax.scatter(a[:, 0], a[:, 1], s=3, alpha=0.5, color=col, label=f"client {'AB'[j]}")
        ax.set_title(name, fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
    axes[0].legend(fontsize=7, markerscale=3)
    fig.suptitle("HBN Fig. 2: local, global and hybrid normalisation of two clients' clusters")
    return fig


# -- Fig. 3 --------------------------------------------------------------------------------------
_FIG3_QUICK = {"data": {"name": "digits", "form": "flat"}, "num_clients": 100, "phis": [0.6, 0.1], "seed": 0,
               "deviations": ["Q-DIG (1437 digits, 10 classes) stands in for CIFAR-10's 50,000 images"]}
_FIG3 = {"smoke": {**_FIG3_QUICK, "num_clients": 20}, "quick": _FIG3_QUICK,
         "paper": {**_FIG3_QUICK, "data": {"name": "cifar10"}, "deviations": []}}


def _entropy(counts: np.ndarray) -> np.ndarray:
    p = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)


@entry(
    "hbn-fig3",
    title="Label distribution of Dirichlet clients",
    summary=("Fig. 3: the label distribution of 100 clients under Dirichlet(0.6) and Dirichlet(0.1); the "
             "smaller coefficient gives each client fewer classes."),
    look_for="Each column is a client, each row a class; darker = more samples. phi = 0.1 is much sparser.",
    kind="schematic", configs=_FIG3,
)
def compute_fig3(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    split = load_data(config["data"], data_root=ctx.data_root)
    y = split.y_train.numpy()
    counts, rows = {}, []
    for phi in config["phis"]:
        parts = partition.dirichlet(y, int(config["num_clients"]), float(phi), int(config["seed"]))
        c = describe(parts, y).class_counts  # (K, C)
        counts[str(phi)] = c.tolist()
        rows.append({"phi": phi, "mean label entropy (nats)": round(float(_entropy(c).mean()), 4),
                     "empty (client, class) cells": round(float((c == 0).mean()), 4),
                     "mean classes per client": round(float((c > 0).sum(1).mean()), 2)})
    hi, lo = rows[0], rows[-1]
    claims = [
        at_least("entropy", f"mean per-client label entropy is lower at phi = {lo['phi']} than at {hi['phi']}",
                 hi["mean label entropy (nats)"] - lo["mean label entropy (nats)"], 1e-9,
                 detail=f"{lo['mean label entropy (nats)']} vs {hi['mean label entropy (nats)']}"),
        at_least("empty-cells", f"more empty (client, class) cells at phi = {lo['phi']}",
                 lo["empty (client, class) cells"] - hi["empty (client, class) cells"], 1e-9,
                 detail=f"{lo['empty (client, class) cells']} vs {hi['empty (client, class) cells']}"),
    ]
    return {"rows": rows, "paper": [], "claims": claims, "deviations": list(config["deviations"]),
            "series": {"counts": counts}, "notes": ["bnfl.data.partition.dirichlet (Hsu et al. 2019), seed 0."]}


@plotter("hbn-fig3")
def plot_fig3(result: Result) -> Any:
    counts = result.series["counts"]
    fig, axes = new_figure(1, len(counts), width=5.0, height=2.6)
    for ax, (phi, c) in zip(axes, counts.items(), strict=True):
        im = ax.imshow(np.asarray(c).T, aspect="auto", cmap="Blues", interpolation="nearest")
        ax.set_title(f"Dirichlet phi = {phi}")
        ax.set_xlabel("client")
        ax.set_ylabel("class")
        fig.colorbar(im, ax=ax, label="samples")
    fig.suptitle("HBN Fig. 3: label distribution per client")
    return fig


# -- Table 7 -------------------------------------------------------------------------------------
@entry(
    "hbn-tab7",
    title="Simple-CNN architecture",
    summary=("Table 7: Simple-CNN, three conv-norm-ReLU-pool blocks (16, 32, 64 channels) and two FC layers; the "
             "FedFN variant has no norm in the blocks and normalises the features before the head."),
    look_for="The printed layers beside the layers of bnfl.models.build('simple_cnn'), and the parameter counts.",
    kind="schematic", configs=same_for_all_profiles({"deviations": []}),
)
def compute_tab7(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    def count(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    bn10, bn100 = models.build("simple_cnn", norm="bn"), models.build("simple_cnn", norm="bn", num_classes=100)
    hbn = models.build("simple_cnn", norm="hbn")
    fn = models.build("simple_cnn", norm="fedfn")
    groups = state_groups(bn10)
    sd = bn10.state_dict()
    affine = sum(sd[k].numel() for k in groups["bn_affine"])
    stats = sum(sd[k].numel() for k in groups["bn_stats"])
    alpha = sum(p.numel() for n, p in hbn.named_parameters() if n.endswith("alpha"))
    convs = [m for m in bn10.modules() if isinstance(m, nn.Conv2d)]
    fcs = [m for m in bn10.modules() if isinstance(m, nn.Linear)]
    built = [f"Conv2D({c.in_channels},{c.out_channels},{c.kernel_size[0]},{c.stride[0]},{c.padding[0]})" for c in convs]
    built += [f"FC({f.in_features},{f.out_features})" for f in fcs]
    fn_norms = [m for m in fn.modules() if is_norm_layer(m)]
    measured = {"params_n10": count(bn10), "params_n100": count(bn100), "bn_affine": affine, "bn_stats": stats,
                "hbn_alpha": alpha}
    claims = [within(k, f"{k.replace('_', ' ')} = {v:,} (CATALOG, inferred)", measured[k], v, 0,
                     detail=f"built {measured[k]:,} vs {v:,}", kind="consistency") for k, v in N.TABLE7_COUNTS.items()]
    claims.append(at_least("fedfn-layout", "FedFN variant: one FedFN layer, before the head, no norm in the blocks",
                           float(len(fn_norms) == 1 and isinstance(fn_norms[0], FeatureNorm)), 1.0))
    claims.append(info("layers", "layers built", len(built), detail="; ".join(built)))
    pools = [m for m in bn10.modules() if isinstance(m, nn.MaxPool2d)]
    norm_name = type(next(m for m in bn10.modules() if is_norm_layer(m))).__name__
    mine = [f"{built[i]} - {norm_name} - ReLU - MaxPool2D({pools[i].kernel_size},{pools[i].stride})" for i in range(3)]
    mine += [f"{type(fn_norms[0]).__name__} on the {fn_norms[0].num_features} flattened features; no norm in the blocks",
             f"{built[3]} - ReLU", built[4]]
    rows = [{"block": b, "paper (as printed)": p, "bnfl (built model)": m}
            for (b, p), m in zip(N.TABLE7, mine, strict=True)]
    return {"rows": rows, "paper": [{"block": b, "layers": p} for b, p in N.TABLE7], "claims": claims,
            "deviations": [], "series": {"counts": measured},
            "notes": [f"simple_cnn (BN): {measured['params_n10']:,} parameters for 10 classes, "
                      f"{measured['params_n100']:,} for 100; HBN adds {alpha} alphas (one per channel, never sent)."]}


@plotter("hbn-tab7")
def plot_tab7(result: Result) -> Any:
    c = result.series["counts"]
    return table_figure(result.rows, ["block", "paper (as printed)", "bnfl (built model)"], width=9.0, row_height=0.35,
                        col_widths=[0.1, 0.42, 0.48], title=f"HBN Table 7, Simple-CNN: {c['params_n10']:,} parameters "
                                                            f"(10 classes), {c['params_n100']:,} (100 classes)")
