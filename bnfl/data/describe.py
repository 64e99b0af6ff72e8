"""What a partition looks like: per-client counts by class (and domain), as a table and a figure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import Tensor

from bnfl._figure import new_figure, palette_color
from bnfl.data.datasets import as_index_array

__all__ = ["PartitionSummary", "describe", "plot_partition"]


@dataclass(frozen=True)
class PartitionSummary:
    """Per-client counts of a partition.

    Attributes
    ----------
    class_counts : ndarray of shape (K, C), int64
        Samples of class ``classes[c]`` held by client k.
    classes : tuple of int
        Distinct label values (columns of ``class_counts``).
    domain_counts : ndarray of shape (K, D), int64, or None
    domains : tuple of int
        Distinct domain values (columns of ``domain_counts``).
    unassigned : int
        Samples that belong to no client (e.g. ``classes_per_client(..., balance=True)``).
    """

    class_counts: np.ndarray
    classes: tuple[int, ...]
    domain_counts: np.ndarray | None
    domains: tuple[int, ...]
    unassigned: int

    @property
    def sizes(self) -> np.ndarray:
        """Samples per client, shape (K,)."""
        return self.class_counts.sum(axis=1)

    @property
    def fractions(self) -> np.ndarray:
        """Class fractions per client, shape (K, C); rows sum to 1 (0 for an empty client)."""
        s = self.sizes[:, None].astype(np.float64)
        return np.divide(self.class_counts, s, out=np.zeros(self.class_counts.shape), where=s > 0)

    def as_dict(self) -> dict:
        """Plain-Python form (JSON-serialisable)."""
        out = {
            "sizes": self.sizes.tolist(),
            "classes": list(self.classes),
            "class_counts": self.class_counts.tolist(),
            "unassigned": self.unassigned,
        }
        if self.domain_counts is not None:
            out.update(domains=list(self.domains), domain_counts=self.domain_counts.tolist())
        return out

    def to_markdown(self) -> str:
        """A markdown table: one row per client, one column per class (and per domain)."""
        cols = [f"c{c}" for c in self.classes]
        rows = self.class_counts
        if self.domain_counts is not None:
            cols += [f"d{d}" for d in self.domains]
            rows = np.concatenate([rows, self.domain_counts], axis=1)
        lines = ["| client | n | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
        for k, (n, row) in enumerate(zip(self.sizes, rows, strict=True)):
            lines.append(f"| {k} | {n} | " + " | ".join(str(v) for v in row) + " |")
        if self.unassigned:
            lines.append(f"\n{self.unassigned} samples are assigned to no client.")
        return "\n".join(lines)

    def __str__(self) -> str:
        s = self.sizes
        head = (f"{len(s)} clients, {int(s.sum())} samples (min {int(s.min())}, "
                f"max {int(s.max())} per client), {len(self.classes)} classes")
        return head + "\n" + self.to_markdown()


def _as_array(values: Sequence[int] | np.ndarray | Tensor, what: str) -> np.ndarray:
    arr = values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got shape {arr.shape}")
    return arr


def describe(
    partition: Sequence[Sequence[int] | np.ndarray | Tensor],
    labels: Sequence[int] | np.ndarray | Tensor,
    domains: Sequence[int] | np.ndarray | Tensor | None = None,
) -> PartitionSummary:
    """Count each client's samples per class (and per domain).

    Parameters
    ----------
    partition : list of 1-D index arrays
        One per client (as returned by :mod:`bnfl.data.partition`).
    labels : 1-D integer array of shape (N,)
    domains : 1-D integer array of shape (N,), optional

    Raises
    ------
    ValueError
        If an index is out of range or assigned to two clients.
    """
    y = _as_array(labels, "labels")
    parts = [as_index_array(p, y.size) for p in partition]
    if not parts:
        raise ValueError("partition is empty; give at least one client")
    allidx = np.concatenate(parts)
    if np.unique(allidx).size != allidx.size:
        raise ValueError("partition is not disjoint: some indices belong to two clients")
    classes, y_code = np.unique(y, return_inverse=True)
    counts = np.stack([np.bincount(y_code[p], minlength=classes.size) for p in parts])
    dom_counts, dom_vals = None, ()
    if domains is not None:
        d = _as_array(domains, "domains")
        if d.size != y.size:
            raise ValueError(f"domains has {d.size} entries but labels has {y.size}")
        dv, d_code = np.unique(d, return_inverse=True)
        dom_counts = np.stack([np.bincount(d_code[p], minlength=dv.size) for p in parts]).astype(np.int64)
        dom_vals = tuple(int(v) for v in dv)
    return PartitionSummary(
        class_counts=counts.astype(np.int64),
        classes=tuple(int(c) for c in classes),
        domain_counts=dom_counts,
        domains=dom_vals,
        unassigned=int(y.size - allidx.size),
    )


def _class_colors(c: int) -> list:
    """bnfl's palette for up to 8 classes; a qualitative colour map beyond (no repeats)."""
    if c <= 8:
        return [palette_color(j) for j in range(c)]
    cmap = colormaps["tab10" if c <= 10 else "tab20" if c <= 20 else "viridis"]
    return [cmap(j if c <= 20 else j / max(1, c - 1)) for j in range(c)]


def plot_partition(
    partition: Sequence[Sequence[int] | np.ndarray | Tensor],
    labels: Sequence[int] | np.ndarray | Tensor,
    *,
    kind: str = "bubble",
    title: str | None = None,
    class_names: Sequence[str] | None = None,
) -> Figure:
    """Label distribution per client (HBN Fig. 3 style).

    Parameters
    ----------
    partition : list of 1-D index arrays
    labels : 1-D integer array of shape (N,)
    kind : {"bubble", "bar", "heatmap"}, default "bubble"
        ``"bubble"``: one dot per (client, class), area proportional to the count (HBN Fig. 3).
        ``"bar"``: stacked bars of class counts per client. ``"heatmap"``: class x client counts
        as an image with a colour bar (readable for 100 clients).
    title : str, optional
    class_names : sequence of str, optional
        Tick labels for the classes (default the label values).

    Returns
    -------
    matplotlib Figure (nothing is written to disk; use ``bnfl.plots.save_figure``).
    """
    s = describe(partition, labels)
    counts = s.class_counts  # (K, C)
    k, c = counts.shape
    names = [str(v) for v in s.classes] if class_names is None else list(class_names)
    if len(names) != c:
        raise ValueError(f"class_names has {len(names)} entries for {c} classes")
    width = min(12.0, max(4.2, 0.12 * k + 2.0))
    fig, ax = new_figure(width=width, height=3.4)
    clients = np.arange(k)
    if kind == "bubble":
        cc, kk = np.meshgrid(np.arange(c), clients)
        area = 200.0 * counts / max(1, counts.max())
        ax.scatter(kk.ravel(), cc.ravel(), s=area.ravel(), color=palette_color(0),
                   alpha=0.7, linewidths=0)
        ax.set_yticks(np.arange(c))
        ax.set_yticklabels(names)
        ax.set_ylabel("class")
        ax.set_ylim(-0.7, c - 0.3)
    elif kind == "bar":
        bottom = np.zeros(k)
        colors = _class_colors(c)
        for j in range(c):
            ax.bar(clients, counts[:, j], bottom=bottom, color=colors[j],
                   label=names[j], width=0.85, linewidth=0)
            bottom += counts[:, j]
        ax.set_ylabel("samples")
        if c <= 20:
            ax.legend(title="class", ncol=1 + c // 10, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    elif kind == "heatmap":
        im = ax.imshow(counts.T, aspect="auto", origin="lower", cmap="Blues", interpolation="nearest",
                       extent=(-0.5, k - 0.5, -0.5, c - 0.5))
        ax.grid(False)
        ax.set_yticks(np.arange(c))
        ax.set_yticklabels(names)
        ax.set_ylabel("class")
        fig.colorbar(im, ax=ax, label="samples")
    else:
        raise ValueError(f"kind must be 'bubble', 'bar' or 'heatmap', got {kind!r}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_xlim(-0.7, k - 0.3)
    ax.set_title(title or f"label distribution over {k} clients")
    return fig
