r"""HBN's toy picture of normalisation choices on two 2-D Gaussian clusters (HBN, Fig. 2).

The paper gives no parameters; the quick recipe of ``papers/CATALOG.md`` (hbn-fig2) is used:
client A :math:`\sim N((-1,0), \mathrm{diag}(0.3^2, 1))`, client B :math:`\sim N((2,1),
\mathrm{diag}(1.5^2, 0.5^2))`, 300 points each. Each client's points are one "batch".

* local BN: each client standardises with its own mean and variance (per feature);
* per-sample normalisation (LN/GN with one group): each point is standardised across its features;
* global BN: both clients use the union's mean and variance;
* hybrid (HBN eq. 9): :math:`\hat\mu = (1-s)\mu_b + s\mu_g`, :math:`\hat\sigma^2 = (1-s)\sigma_b^2 +
  s\sigma_g^2` with :math:`s = \mathrm{sigmoid}(\alpha)` (eq. 9 writes the batch weight as
  :math:`e^{-\alpha}/(1+e^{-\alpha}) = 1-s`), then eq. 10 without affine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from bnfl.nn.hybrid import hybrid_batch_norm
from bnfl.plots import color_for, new_figure

__all__ = [
    "make_clusters",
    "local_normalize",
    "per_sample_normalize",
    "global_normalize",
    "hybrid_normalize",
    "all_normalizations",
    "centre_distance",
    "std_ratio",
    "plot_clusters",
]

EPS = 1e-5


def make_clusters(
    *,
    means: Sequence[Sequence[float]] = ((-1.0, 0.0), (2.0, 1.0)),
    stds: Sequence[Sequence[float]] = ((0.3, 1.0), (1.5, 0.5)),
    n: int = 300,
    seed: int = 0,
) -> list[np.ndarray]:
    """Draw one Gaussian cluster per client: a list of arrays of shape ``(n, 2)``."""
    if len(means) != len(stds) or len(means) == 0:
        raise ValueError("means and stds must be non-empty and of equal length (one per client)")
    if n < 2:
        raise ValueError(f"n={n}: each cluster needs at least 2 points for a variance")
    rng = np.random.default_rng(seed)
    out = []
    for mu, sd in zip(means, stds, strict=True):
        mu, sd = np.asarray(mu, float), np.asarray(sd, float)
        if mu.shape != sd.shape or np.any(sd <= 0):
            raise ValueError("each mean and std must have the same length and stds must be > 0")
        out.append(mu + sd * rng.standard_normal((n, mu.size)))
    return out


def _check(clusters: Sequence[np.ndarray]) -> None:
    if len(clusters) == 0:
        raise ValueError("no clusters given")
    for i, c in enumerate(clusters):
        if c.ndim != 2 or c.shape[0] < 2:
            raise ValueError(f"cluster {i} must have shape (n >= 2, features), got {c.shape}")
        if not np.isfinite(c).all():
            raise ValueError(f"cluster {i} contains NaN or Inf")


def _union_moments(clusters: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    union = np.concatenate(clusters)  # (sum n, F)
    return union.mean(axis=0), union.var(axis=0)


def local_normalize(clusters: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Local BN: each cluster standardised with its own (biased) mean and variance."""
    _check(clusters)
    return [(c - c.mean(0)) / np.sqrt(c.var(0) + EPS) for c in clusters]


def per_sample_normalize(clusters: Sequence[np.ndarray]) -> list[np.ndarray]:
    """LN / GN-with-one-group: every point standardised across its own features.

    In two dimensions each point maps to :math:`\\pm(1,-1)` (up to eps): the cluster structure is gone.
    """
    _check(clusters)
    return [(c - c.mean(1, keepdims=True)) / np.sqrt(c.var(1, keepdims=True) + EPS) for c in clusters]


def global_normalize(clusters: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Global BN: every cluster standardised with the union's mean and variance."""
    _check(clusters)
    mu, var = _union_moments(clusters)
    return [(c - mu) / np.sqrt(var + EPS) for c in clusters]


def hybrid_normalize(clusters: Sequence[np.ndarray], *, alpha: float = 0.0) -> list[np.ndarray]:
    r"""HBN eqs. 9-10 with one mixing logit ``alpha`` (:math:`s=\mathrm{sigmoid}(\alpha)` on the
    global statistics); ``alpha=0`` mixes 1:1, ``alpha -> +inf`` is global BN, ``-inf`` local BN.

    Each cluster is one batch run through :func:`bnfl.nn.hybrid.hybrid_batch_norm` (training mode,
    no affine, float64), with the union's moments as the global statistics.
    """
    _check(clusters)
    if not np.isfinite(alpha):
        raise ValueError("alpha must be finite; use global_normalize / local_normalize for the limits")
    mu_g, var_g = (torch.from_numpy(m) for m in _union_moments(clusters))
    a = torch.full_like(mu_g, float(alpha))
    return [
        hybrid_batch_norm(torch.as_tensor(c, dtype=torch.float64), a, mu_g, var_g, None, None,
                          eps=EPS, training=True).numpy()
        for c in clusters
    ]


def all_normalizations(clusters: Sequence[np.ndarray], *, alpha: float = 0.0) -> dict[str, list[np.ndarray]]:
    """The four panels of HBN Fig. 2 plus per-sample normalisation, keyed by name."""
    return {
        "raw": [np.asarray(c, float) for c in clusters],
        "local BN": local_normalize(clusters),
        "per-sample (LN/GN)": per_sample_normalize(clusters),
        "global BN": global_normalize(clusters),
        f"hybrid (s={1 / (1 + np.exp(-alpha)):.2f})": hybrid_normalize(clusters, alpha=alpha),
    }


def centre_distance(clusters: Sequence[np.ndarray]) -> float:
    """Euclidean distance between the centres of the first two clusters."""
    _check(clusters)
    return float(np.linalg.norm(clusters[0].mean(0) - clusters[1].mean(0)))


def std_ratio(clusters: Sequence[np.ndarray]) -> float:
    """Scale mismatch of the first two clusters: ``max_f max(r_f, 1/r_f)``, ``r_f = std_A/std_B``.

    1 means equal per-feature spread.
    """
    _check(clusters)
    r = clusters[0].std(0) / clusters[1].std(0)
    return float(np.max(np.maximum(r, 1 / r)))


def plot_clusters(panels: dict[str, list[np.ndarray]], *, ncols: int = 3) -> Figure:
    """One scatter panel per normalisation (HBN Fig. 2): clients coloured consistently.

    The panels fill a grid of ``ncols`` columns (five panels: 2 x 3, the empty cell removed), so
    each stays large enough to read on a page."""
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive integer, got {ncols!r}")
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, grid = new_figure(nrows, ncols, width=3.6, height=3.4, squeeze=False)
    cells = list(grid.flat)
    for ax in cells[len(panels):]:
        fig.delaxes(ax)
    axes = cells[:len(panels)]
    for ax, (name, clusters) in zip(axes, panels.items(), strict=True):
        for i, c in enumerate(clusters):
            ax.scatter(c[:, 0], c[:, 1], s=4, alpha=0.5, color=color_for(f"client-{i}", i),
                       label=f"client {'AB'[i] if i < 2 else i}")
        ax.set_title(name)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("feature 1")
    for ax in axes[::ncols]:
        ax.set_ylabel("feature 2")
    axes[0].legend(markerscale=3)
    return fig
