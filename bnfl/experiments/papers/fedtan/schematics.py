"""Figs. 1 and 2: the centralized vs federated schematic, and the layer graphs with their BN layers counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.patches import FancyBboxPatch
from torch import nn

from bnfl.experiments.claims import within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.papers.fedtan.communication import build_model, model_counts
from bnfl.experiments.papers.fedtan.numbers import NUM_CLIENTS
from bnfl.experiments.registry import entry, plotter, same_for_all_profiles
from bnfl.plots import color_for, new_figure

#: (model, build options, expected number of BN layers L) for the layer graphs of Fig. 2.
_FIG2_MODELS = [
    ("q_mlp_bn", {}, 2),
    ("q_res", {}, 7),
    ("resnet20", {"norm": "bn", "num_classes": 10}, 19),
]

# --------------------------------------------------------------------------------------
# Figure 1 (schematic) and Figure 2 (layer graphs with asserted BN counts)
# --------------------------------------------------------------------------------------


@entry(
    "fedtan-fig1",
    title="Centralized vs federated learning (schematic)",
    summary=("Fig. 1 of the paper is a diagram: one server training on pooled data vs N clients "
             "that train locally and a server that averages their models. No data; redrawn with "
             "matplotlib."),
    look_for=("The paper opens with the two settings it compares. In centralized learning one "
              "server runs mini-batch SGD on the pooled data $D$. In federated learning $N$ clients"
              " each hold $D_i$, run $E$ local SGD steps from the broadcast model, upload their "
              "models, and the server averages them with $p_i = |D_i|/|D|$ (eq. 4). BN breaks the "
              "equivalence between the two because every client normalises with its own batch "
              "statistics."),
    kind="schematic", configs=same_for_all_profiles({"clients": NUM_CLIENTS}),
)
def compute_fig1(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    n = config["clients"]
    rows = [
        {"scheme": "centralized", "data": "pooled on one server", "exchanged per iteration": "nothing"},
        {"scheme": "federated (FedAvg)", "data": f"split over N = {n} clients, never sent",
         "exchanged per iteration": "model down (1 broadcast), N local models up"},
    ]
    return {"rows": rows, "paper": [], "claims": [], "notes": ["A schematic: no numbers to check."],
            "series": {"clients": n}}


def _box(ax: Any, xy: tuple[float, float], text: str, color: str, *, w: float = 1.6, h: float = 0.7) -> None:
    x, y = xy
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05",
                                fc=color, ec="#333333", lw=1.0))
    ax.text(x, y, text, ha="center", va="center", fontsize=8)


def _arrow(ax: Any, a: tuple[float, float], b: tuple[float, float], color: str = "#333333", text: str = "") -> None:
    ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2})
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2, text, fontsize=7, color=color, ha="center",
                va="center", bbox={"fc": "white", "ec": "none", "pad": 0.5})


@plotter("fedtan-fig1")
def plot_fig1(result: Result) -> Any:
    n = int(result.series["clients"])
    fig, (a, b) = new_figure(1, 2, width=4.6, height=3.4)
    for ax in (a, b):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 7)
        ax.axis("off")
    _box(a, (5, 5.6), "server\nmodel w", "#DDDDDD", w=2.2, h=1.0)
    _box(a, (5, 2.2), "all data D\n(pooled)", "#F2F2F2", w=3.0, h=1.0)
    _arrow(a, (5, 2.75), (5, 5.05), color=color_for("centralized"), text="mini-batch SGD on D")
    a.set_title("(a) centralized learning")
    _box(b, (5, 5.9), "server\nw̄ = Σ p_i w_i", "#DDDDDD", w=2.6, h=1.0)
    xs = np.linspace(1.2, 8.8, n)
    for i, x in enumerate(xs):
        _box(b, (x, 2.0), f"client {i + 1}\nD_{i + 1}", "#FBE3D6", w=1.45, h=0.9)
        _arrow(b, (x - 0.12, 2.47), (5 - 0.3, 5.38), color=color_for("fedavg+bn"))
        _arrow(b, (5 + 0.3, 5.38), (x + 0.12, 2.47), color=color_for("fedtan"))
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
    summary=("Fig. 2: every feature-extraction layer G_ℓ except the input is preceded by a BN "
             "layer. We render the graphs of Q-MLP-BN and Q-RES from the real modules and assert L "
             "= 19 for ResNet-20 and L = 7 for Q-RES (so FedTAN needs 3L+1 = 58 / 22 rounds per "
             "iteration)."),
    look_for=("Each feature-extraction layer $G_\\ell$ is preceded by a BN layer that normalises "
              "$Y^\\ell$ into $X^\\ell$ (eq. 1). FedTAN aggregates the statistics of every BN layer, "
              "layer by layer, at the first local step: two all-reduces per layer forward (means, "
              "then variances around the global mean; eqs. 39-40) and one backward (stat-gradients;"
              " eq. 41), so an iteration costs $3L+1$ communication rounds. The number of BN layers"
              " $L$ therefore matters: we read it off the real models instead of typing it in."),
    kind="schematic", configs=same_for_all_profiles({"models": _FIG2_MODELS}),
)
def compute_fig2(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    rows, claims, graphs = [], [], {}
    for name, kwargs, expected in config["models"]:
        model = build_model(name, **kwargs)
        c = model_counts(model)
        graph = layer_graph(model)
        graphs[name] = graph
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
        ax.set_xlim(-0.7, n - 0.3)
        ax.set_ylim(-1.3, 1.2)
        ax.axis("off")
        ell = 0
        for j, lyr in enumerate(layers):
            kind = lyr["kind"]
            label = {"BN": "BN", "conv": "conv", "linear": "FC"}.get(kind, kind.replace("ReLU", "σ")[:6])
            if kind == "BN":
                ell += 1
            _box(ax, (j, 0), label, colors.get(kind, "#EEEEEE"), w=0.8, h=0.7)
            if j + 1 < n:
                _arrow(ax, (j + 0.42, 0), (j + 0.58, 0))
            if kind == "BN":
                ax.text(j, 0.6, f"$Y^{{{ell}}}\\to X^{{{ell}}}$", ha="center", fontsize=7)
            elif kind in ("conv", "linear"):
                ax.text(j, -0.62, f"$G_{{{ell}}}, \\tilde w^{{{ell}}}$", ha="center", fontsize=7)
        row = next(r for r in result.rows if r["model"] == gname)
        ax.set_title(f"{gname}: L = {row['BN layers L']} BN layers "
                     f"(FedTAN needs 3L+1 = {row['FedTAN rounds/iter (3L+1)']} rounds per iteration)", fontsize=9)
    fig.suptitle("FedTAN Fig. 2: DNN with L BN layers (G_ℓ preceded by BN; Y^ℓ normalised to X^ℓ)")
    return fig
