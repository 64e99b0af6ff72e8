"""Supplement D: the class table of each client for k = 2..10 classes per client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnfl.data import describe, partition
from bnfl.experiments.claims import at_most, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.papers.fedtan.numbers import NUM_CLIENTS, TABLE_D
from bnfl.experiments.registry import entry, plotter
from bnfl.plots import new_figure

# --------------------------------------------------------------------------------------
# Supplement D class tables
# --------------------------------------------------------------------------------------


def paper_class_table(k: int) -> np.ndarray:
    """The verbatim Supplement D table for ``k`` as a (5, 10) fraction matrix."""
    table = np.zeros((NUM_CLIENTS, 10))
    for i, labels in enumerate(TABLE_D[k]):
        for lab in labels:
            table[i, lab - 1] = 1.0 / k
    return table


@entry(
    "fedtan-tabD",
    title="Supplement D: class distribution per client (k = 2..10)",
    summary=("Five tables: with k classes per client, client i holds k consecutive labels starting "
             "at 2i-1 (cyclic), each at 1/k. Checked against bnfl.data.partition on a CIFAR-sized "
             "label vector."),
    look_for=("The five class tables of Supplement D that define the distribution shifts of Fig. 5:"
              " with $k$ classes per client, client $i$ holds $k$ consecutive labels starting at "
              "$2i-1$ (cyclically), each at fraction $1/k$. Every label is shared by $k/2$ clients,"
              " so all clients are the same size. We check `bnfl.data.partition` against the "
              "verbatim tables on a CIFAR-sized label vector (5,000 per class), including the "
              "rounding for $k=6$."),
    kind="exact",
    configs={"smoke": {"k": [2, 4, 6, 8, 10], "samples_per_class": 5000},
             "quick": {"k": [2, 4, 6, 8, 10], "samples_per_class": 5000},
             "paper": {"k": [2, 4, 6, 8, 10], "samples_per_class": 5000}},
)
def compute_tabD(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    n_per_class = config["samples_per_class"]
    labels = np.repeat(np.arange(10), n_per_class)  # a CIFAR-sized label vector
    rows, claims, tables = [], [], {}
    for k in config["k"]:
        ours = partition.fedtan_class_table(k)
        theirs = paper_class_table(k)
        tables[str(k)] = ours.tolist()
        parts = partition.classes_per_client(labels, k, num_clients=NUM_CLIENTS, seed=0)
        summary = describe(parts, labels)  # labels hold every class 0..9: columns = classes
        counts, sizes, frac = summary.class_counts, summary.sizes, summary.fractions  # (5, 10)
        dev = float(np.abs(frac - theirs).max())
        cell = counts[theirs > 0]
        for i in range(NUM_CLIENTS):
            rows.append({
                "k": k, "client": i + 1,
                "labels (paper)": " ".join(map(str, TABLE_D[k][i])),
                "labels (bnfl)": " ".join(str(c + 1) for c in np.flatnonzero(ours[i] > 0)),
                "fraction": f"1/{k}", "size": int(sizes[i]),
                "samples per class": f"{cell.min()}-{cell.max()}" if i == 0 else "",
            })
        claims.append(within(f"k{k}-table", f"k={k}: bnfl's table equals Supplement D", float(np.abs(ours - theirs).max()), 0.0, 0.0))
        claims.append(at_most(f"k{k}-sizes", f"k={k}: client sizes differ by at most 1 ({n_per_class * 10:,} labels)",
                              float(sizes.max() - sizes.min()), 1.0))
        # Fractions equal 1/k up to the rounding of n/(k/2) samples per cell (k=6: 1666/1667).
        tol = 1.0 / sizes.min()
        claims.append(at_most(f"k{k}-fractions", f"k={k}: per-client class fractions equal the table (within one sample)",
                              dev, tol, detail=f"max |fraction - table| = {dev:.2e} (one sample = {tol:.1e}); cells {cell.min()}-{cell.max()}"))
    notes = [
        f"Partitions of a CIFAR-sized label vector ({n_per_class:,} per class) by "
        "bnfl.data.partition.classes_per_client; every label is shared by k/2 clients.",
        "k=6 needs 5000/3 = 1666.7 samples per (client, class): bnfl gives 1666 or 1667, the leftover "
        "sample to the currently smallest owner, so client sizes stay equal (10,000).",
    ]
    paper = [{"k": k, "client": i + 1, "labels": " ".join(map(str, TABLE_D[k][i])), "fraction": f"1/{k}"}
             for k in config["k"] for i in range(NUM_CLIENTS)]
    return {"rows": rows, "paper": paper, "claims": claims, "notes": notes, "series": {"tables": tables}}


@plotter("fedtan-tabD")
def plot_tabD(result: Result) -> Any:
    tables = result.series["tables"]
    ks = sorted(tables, key=int)
    fig, axes = new_figure(1, len(ks), width=2.3, height=2.3, squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        t = np.asarray(tables[k])
        ax.imshow(t, cmap="Blues", vmin=0, vmax=0.5, aspect="auto")
        ax.set_title(f"k = {k}")
        ax.set_xticks(range(10), [str(c) for c in range(1, 11)], fontsize=7)
        ax.set_yticks(range(NUM_CLIENTS), [str(i) for i in range(1, NUM_CLIENTS + 1)], fontsize=7)
        ax.set_xlabel("label")
        ax.grid(False)
    axes[0][0].set_ylabel("client")
    fig.suptitle("FedTAN Supplement D: class fractions per client (each owned label at 1/k)")
    return fig
