"""The setting: Fig. 1 (centralized vs federated), Fig. 2 (the layer graphs with their BN layers counted) and
Supplement D (the class table of each client for k = 2..10 classes per client).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from bnfl import models
from bnfl.data import describe, partition
from bnfl.experiments.claims import at_most, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.drawing import arrow, box
from bnfl.experiments.papers.fedtan.communication import model_counts
from bnfl.experiments.papers.fedtan.numbers import NUM_CLIENTS, TABLE_D
from bnfl.experiments.registry import entry, plotter, same_for_all_profiles
from bnfl.plots import color_for, new_figure

#: (model, build options, expected number of BN layers L) for the layer graphs of Fig. 2.
_FIG2_MODELS = [("q_mlp_bn", {}, 2), ("q_res", {}, 7), ("resnet20", {"norm": "bn", "num_classes": 10}, 19)]


@entry(
    "fedtan-fig1",
    title="Centralized vs federated learning (schematic)",
    summary=("Fig. 1 of the paper is a diagram: one server training on pooled data vs N clients that train locally "
             "and a server that averages their models. No data; redrawn with matplotlib."),
    look_for=("The paper opens with the two settings it compares. In centralized learning one server runs "
              "mini-batch SGD on the pooled data $D$. In federated learning $N$ clients each hold $D_i$, run $E$ "
              "local SGD steps from the broadcast model, upload their models, and the server averages them with "
              "$p_i = |D_i|/|D|$ (eq. 4). BN breaks the equivalence between the two because every client normalises "
              "with its own batch statistics."),
    kind="schematic",
    configs=same_for_all_profiles({"clients": NUM_CLIENTS}),
)
def compute_fig1(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    n = config["clients"]
    rows = [{"scheme": "centralized", "data": "pooled on one server", "exchanged per iteration": "nothing"},
            {"scheme": "federated (FedAvg)", "data": f"split over N = {n} clients, never sent",
             "exchanged per iteration": "model down (1 broadcast), N local models up"}]
    return {"rows": rows, "paper": [], "claims": [], "notes": ["A schematic: no numbers to check."],
            "series": {"clients": n}}


@plotter("fedtan-fig1")
def plot_fig1(result: Result) -> Any:
    n = int(result.series["clients"])
    fig, (a, b) = new_figure(1, 2, width=4.6, height=3.4)
    for ax in (a, b):
        ax.set(xlim=(0, 10), ylim=(0, 7))
        ax.axis("off")
    box(a, (5, 5.6), "server\nmodel w", "#DDDDDD", w=2.2, h=1.0)
    box(a, (5, 2.2), "all data D\n(pooled)", "#F2F2F2", w=3.0, h=1.0)
    arrow(a, (5, 2.75), (5, 5.05), color=color_for("centralized"), text="mini-batch SGD on D")
    a.set_title("(a) centralized learning")
    box(b, (5, 5.9), "server\nw̄ = Σ p_i w_i", "#DDDDDD", w=2.6, h=1.0)
    for i, x in enumerate(np.linspace(1.2, 8.8, n)):
        box(b, (x, 2.0), f"client {i + 1}\nD_{i + 1}", "#FBE3D6", w=1.45, h=0.9)
        arrow(b, (x - 0.12, 2.47), (5 - 0.3, 5.38), color=color_for("fedavg+bn"))
        arrow(b, (5 + 0.3, 5.38), (x + 0.12, 2.47), color=color_for("fedtan"))
    b.text(0.2, 4.4, "upload $w_i$", color=color_for("fedavg+bn"), fontsize=8)
    b.text(7.6, 4.4, "broadcast $\\bar w$", color=color_for("fedtan"), fontsize=8)
    b.text(5, 0.7, f"N = {n} clients: E local SGD steps, upload w_i,\nserver averages, broadcasts w̄ "
           "(data never leave)", ha="center", fontsize=8)
    b.set_title("(b) federated learning")
    fig.suptitle("FedTAN Fig. 1: centralized vs federated learning")
    return fig


def layer_graph(model: nn.Module) -> list[dict[str, Any]]:
    """Leaf modules of ``model`` in registration order with their kind and parameter count."""
    out = []
    for name, m in model.named_modules():
        if list(m.children()):
            continue
        kind = ("BN" if isinstance(m, nn.modules.batchnorm._BatchNorm)
                else "conv" if isinstance(m, nn.modules.conv._ConvNd)
                else "linear" if isinstance(m, nn.Linear) else type(m).__name__)
        out.append({"name": name, "kind": kind, "params": sum(p.numel() for p in m.parameters())})
    return out


@entry(
    "fedtan-fig2",
    title="DNN with L BN layers (layer graphs, BN counts asserted)",
    summary=("Fig. 2: every feature-extraction layer G_ℓ except the input is preceded by a BN layer. We render the "
             "graphs of Q-MLP-BN and Q-RES from the real modules and assert L = 19 for ResNet-20 and L = 7 for "
             "Q-RES (so FedTAN needs 3L+1 = 58 / 22 rounds per iteration)."),
    look_for=("Each feature-extraction layer $G_\\ell$ is preceded by a BN layer that normalises $Y^\\ell$ into "
              "$X^\\ell$ (eq. 1). FedTAN aggregates the statistics of every BN layer, layer by layer, at the first "
              "local step: two all-reduces per layer forward (means, then variances around the global mean; eqs. "
              "39-40) and one backward (stat-gradients; eq. 41), so an iteration costs $3L+1$ communication rounds. "
              "The number of BN layers $L$ therefore matters: we read it off the real models instead of typing it in."),
    kind="schematic", configs=same_for_all_profiles({"models": _FIG2_MODELS}),
)
def compute_fig2(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    rows, claims, graphs = [], [], {}
    for name, kwargs, expected in config["models"]:
        model = models.build(name, **kwargs)
        c = model_counts(model)
        graphs[name] = layer_graph(model)
        rows.append({"model": name, "BN layers L": c["bn_layers"], "expected L": expected,
                     "trainable": c["trainable"], "BN statistics": c["bn_stats"],
                     "FedTAN rounds/iter (3L+1)": 3 * c["bn_layers"] + 1})
        if expected is not None:
            claims.append(within(f"L-{name}", f"{name} has L = {expected} BN layers", c["bn_layers"], expected, 0))
    notes = ["Layer graphs are read off the real bnfl.models modules (leaf modules in order); BN layers "
             "are selected by type (isinstance _BatchNorm)."]
    return {"rows": rows, "paper": [], "claims": claims, "notes": notes, "series": {"graphs": graphs}}


@plotter("fedtan-fig2")
def plot_fig2(result: Result) -> Any:
    graphs = result.series["graphs"]
    drawn = [g for g in graphs if g in ("q_mlp_bn", "q_res")] or list(graphs)[:2]
    fig, axes = new_figure(len(drawn), 1, width=9.0, height=1.9, squeeze=False)
    colors = {"BN": color_for("fedtan"), "conv": "#BBD7EA", "linear": "#BBD7EA"}
    for ax, gname in zip(axes[:, 0], drawn, strict=True):
        layers = [lyr for lyr in graphs[gname] if lyr["kind"] in ("BN", "conv", "linear") or "ReLU" in lyr["kind"]
                  or "Pool" in lyr["kind"]]
        n = len(layers)
        ax.set(xlim=(-0.7, n - 0.3), ylim=(-1.3, 1.2))
        ax.axis("off")
        ell = 0
        for j, kind in enumerate(lyr["kind"] for lyr in layers):
            label = {"BN": "BN", "conv": "conv", "linear": "FC"}.get(kind, kind.replace("ReLU", "σ")[:6])
            if kind == "BN":
                ell += 1
            box(ax, (j, 0), label, colors.get(kind, "#EEEEEE"), w=0.8, h=0.7)
            if j + 1 < n:
                arrow(ax, (j + 0.42, 0), (j + 0.58, 0))
            if kind == "BN":
                ax.text(j, 0.6, f"$Y^{{{ell}}}\\to X^{{{ell}}}$", ha="center", fontsize=7)
            elif kind in ("conv", "linear"):
                ax.text(j, -0.62, f"$G_{{{ell}}}, \\tilde w^{{{ell}}}$", ha="center", fontsize=7)
        row = next(r for r in result.rows if r["model"] == gname)
        ax.set_title(f"{gname}: L = {row['BN layers L']} BN layers "
                     f"(FedTAN needs 3L+1 = {row['FedTAN rounds/iter (3L+1)']} rounds per iteration)", fontsize=9)
    fig.suptitle("FedTAN Fig. 2: DNN with L BN layers (G_ℓ preceded by BN; Y^ℓ normalised to X^ℓ)")
    return fig


def paper_class_table(k: int) -> np.ndarray:
    """The verbatim Supplement D table for ``k`` as a (5, 10) fraction matrix."""
    table = np.zeros((NUM_CLIENTS, 10))
    for i, labels in enumerate(TABLE_D[k]):
        table[i, np.asarray(labels) - 1] = 1.0 / k
    return table


@entry(
    "fedtan-tabD",
    title="Supplement D: class distribution per client (k = 2..10)",
    summary=("Five tables: with k classes per client, client i holds k consecutive labels starting at 2i-1 "
             "(cyclic), each at 1/k. Checked against bnfl.data.partition on a CIFAR-sized label vector."),
    look_for=("The five class tables of Supplement D that define the distribution shifts of Fig. 5: with $k$ "
              "classes per client, client $i$ holds $k$ consecutive labels starting at $2i-1$ (cyclically), each at "
              "fraction $1/k$. Every label is shared by $k/2$ clients, so all clients are the same size. We check "
              "`bnfl.data.partition` against the verbatim tables on a CIFAR-sized label vector (5,000 per class), "
              "including the rounding for $k=6$."),
    kind="exact", configs=same_for_all_profiles({"k": [2, 4, 6, 8, 10], "samples_per_class": 5000}),
)
def compute_tabD(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    n_per_class = config["samples_per_class"]
    labels = np.repeat(np.arange(10), n_per_class)  # a CIFAR-sized label vector
    rows, claims, tables = [], [], {}
    for k in config["k"]:
        ours, theirs = partition.fedtan_class_table(k), paper_class_table(k)
        tables[str(k)] = ours.tolist()
        parts = partition.classes_per_client(labels, k, num_clients=NUM_CLIENTS, seed=0)
        summary = describe(parts, labels)  # labels hold every class 0..9: columns = classes
        counts, sizes, frac = summary.class_counts, summary.sizes, summary.fractions  # (5, 10)
        dev = float(np.abs(frac - theirs).max())
        cell = counts[theirs > 0]
        rows += [{"k": k, "client": i + 1, "labels (paper)": " ".join(map(str, TABLE_D[k][i])),
                  "labels (bnfl)": " ".join(str(c + 1) for c in np.flatnonzero(ours[i] > 0)),
                  "fraction": f"1/{k}", "size": int(sizes[i]),
                  "samples per class": f"{cell.min()}-{cell.max()}" if i == 0 else ""} for i in range(NUM_CLIENTS)]
        claims.append(within(f"k{k}-table", f"k={k}: bnfl's table equals Supplement D", float(np.abs(ours - theirs).max()), 0.0, 0.0))
        claims.append(at_most(f"k{k}-sizes", f"k={k}: client sizes differ by at most 1 ({n_per_class * 10:,} labels)",
                              float(sizes.max() - sizes.min()), 1.0))
        # Fractions equal 1/k up to the rounding of n/(k/2) samples per cell (k=6: 1666/1667).
        tol = 1.0 / sizes.min()
        claims.append(at_most(f"k{k}-fractions", f"k={k}: per-client class fractions equal the table (within one sample)",
                              dev, tol, detail=f"max |fraction - table| = {dev:.2e} (one sample = {tol:.1e}); cells {cell.min()}-{cell.max()}"))
    notes = [f"Partitions of a CIFAR-sized label vector ({n_per_class:,} per class) by "
             "bnfl.data.partition.classes_per_client; every label is shared by k/2 clients.",
             "k=6 needs 5000/3 = 1666.7 samples per (client, class): bnfl gives 1666 or 1667, the leftover "
             "sample to the currently smallest owner, so client sizes stay equal (10,000)."]
    paper = [{"k": k, "client": i + 1, "labels": " ".join(map(str, TABLE_D[k][i])), "fraction": f"1/{k}"}
             for k in config["k"] for i in range(NUM_CLIENTS)]
    return {"rows": rows, "paper": paper, "claims": claims, "notes": notes, "series": {"tables": tables}}


@plotter("fedtan-tabD")
def plot_tabD(result: Result) -> Any:
    tables = result.series["tables"]
    ks = sorted(tables, key=int)
    fig, axes = new_figure(1, len(ks), width=2.3, height=2.3, squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        ax.imshow(np.asarray(tables[k]), cmap="Blues", vmin=0, vmax=0.5, aspect="auto")
        ax.set_xticks(range(10), [str(c) for c in range(1, 11)], fontsize=7)
        ax.set_yticks(range(NUM_CLIENTS), [str(i) for i in range(1, NUM_CLIENTS + 1)], fontsize=7)
        ax.set(title=f"k = {k}", xlabel="label")
        ax.grid(False)
    axes[0][0].set_ylabel("client")
    fig.suptitle("FedTAN Supplement D: class fractions per client (each owned label at 1/k)")
    return fig
