"""Synthetic generators: Q-GAUSS, Q-ABIDE and FedBN's App. F two-client Gaussians.

All are pure functions of their arguments (own ``np.random.default_rng(seed)``; global random
state is neither read nor changed).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from bnfl.data.datasets import Split

__all__ = ["ABIDE_SITES", "abide_sites", "fedbn_synthetic", "gaussian_mixture"]


def _balanced_labels(rng: np.random.Generator, n: int, num_classes: int) -> np.ndarray:
    return rng.permutation(np.arange(n) % num_classes).astype(np.int64)


def gaussian_mixture(
    num_classes: int = 10,
    seed: int = 0,
    *,
    n_train: int = 5000,
    n_test: int = 1000,
    dim: int = 64,
    noise: float = 1.5,
    sharpness: float = 2.0,
) -> Split:
    r"""Q-GAUSS(C): the pilot's non-linear Gaussian-mixture classification data (CATALOG §0.3).

    .. math:: \mu_c \sim N(0, I_d),\quad M \sim N(0, 1/d)^{d\times d},\quad
              x = \tanh\big(2(\mu_y + 1.5\,\varepsilon) M\big),\ \varepsilon \sim N(0, I_d)

    then every feature is standardised with the training mean and std. Labels are balanced
    (``n % C`` classes get one extra sample) and shuffled. For the CIFAR-100 analogue use
    ``num_classes=100, n_train=10000``.

    Parameters
    ----------
    num_classes : int, default 10
    seed : int, default 0
    n_train, n_test : int, default 5000, 1000
    dim : int, default 64
    noise : float, default 1.5
        Scale of ``eps``.
    sharpness : float, default 2.0
        Factor inside the tanh.
    """
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    if n_train < num_classes or n_test < 1:
        raise ValueError(f"need n_train >= num_classes and n_test >= 1, got {n_train}, {n_test}")
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((num_classes, dim))
    mix = rng.normal(0.0, 1.0 / np.sqrt(dim), size=(dim, dim))

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = _balanced_labels(rng, n, num_classes)
        z = means[y] + noise * rng.standard_normal((n, dim))
        return np.tanh(sharpness * z @ mix), y  # (n, d) @ (d, d) -> (n, d)

    x_tr, y_tr = sample(n_train)
    x_te, y_te = sample(n_test)
    mean, std = x_tr.mean(0), x_tr.std(0)
    std = np.where(std > 0, std, 1.0)
    return Split(
        x_train=torch.from_numpy((x_tr - mean) / std).to(torch.float32),
        y_train=torch.from_numpy(y_tr),
        x_test=torch.from_numpy((x_te - mean) / std).to(torch.float32),
        y_test=torch.from_numpy(y_te),
        classes=tuple(str(c) for c in range(num_classes)),
        name=f"Q-GAUSS({num_classes})",
        meta={"seed": seed, "dim": dim, "noise": noise, "sharpness": sharpness},
    )


#: FedBN Table 10 sites: (name, ASD fraction, Q-ABIDE default size). Sizes follow the table's
#: "Overlapping Trunc" 145/265/205/85, mapped linearly onto the 100-250 range of CATALOG §0.3.
ABIDE_SITES: tuple[tuple[str, float, int], ...] = (
    ("NYU", 73 / 167, 150),
    ("UM", 43 / 88, 250),
    ("USM", 33 / 52, 200),
    ("UCLA", 37 / 63, 100),
)


def abide_sites(
    seed: int = 0,
    *,
    sizes: Sequence[int] | None = None,
    positive_ratios: Sequence[float] | None = None,
    dim: int = 64,
    test_fraction: float = 0.2,
) -> Split:
    r"""Q-ABIDE: 4 "sites" with a shared logistic label model and site-specific feature shift.

    Latent :math:`z \sim N(0, I_d)`; label from a logistic model
    :math:`P(y=1\mid z) = \sigma(w^\top z + b_s)`, sampled as
    :math:`y = [w^\top z + b_s + \ell > 0]` with logistic noise :math:`\ell`, where the site
    intercept :math:`b_s` is chosen so that exactly ``round(ratio_s * n_s)`` samples are positive
    (ASD ratios 44/49/63/59% of FedBN Table 10). Observed
    :math:`x = A_s z + b_s'` with a diagonal positive :math:`A_s = \mathrm{diag}(e^{a})`,
    :math:`a \sim N(0, 0.5^2)`, and shift :math:`b_s' \sim N(0, I)`. No standardisation: the site
    shift is the point. Every site is split ``1 - test_fraction`` / ``test_fraction`` at random.

    Parameters
    ----------
    seed : int, default 0
    sizes : sequence of int, optional
        Samples per site; default from :data:`ABIDE_SITES` (150, 250, 200, 100).
    positive_ratios : sequence of float, optional
        Fraction of positives per site; default FedBN Table 10 (73/167, 43/88, 33/52, 37/63).
    dim : int, default 64
    test_fraction : float, default 0.2
    """
    names = tuple(s[0] for s in ABIDE_SITES)
    sizes = [s[2] for s in ABIDE_SITES] if sizes is None else list(sizes)
    ratios = [s[1] for s in ABIDE_SITES] if positive_ratios is None else list(positive_ratios)
    if len(sizes) != len(ratios) or not sizes:
        raise ValueError("sizes and positive_ratios must have the same positive length")
    if len(sizes) != len(names):
        names = tuple(f"site{j}" for j in range(len(sizes)))
    if any(n < 2 for n in sizes) or any(not 0 < r < 1 for r in ratios):
        raise ValueError("every site needs >= 2 samples and a positive ratio in (0, 1)")
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(dim) / np.sqrt(dim) * 3.0
    pieces = []
    for n, r in zip(sizes, ratios, strict=True):
        z = rng.standard_normal((n, dim))
        score = z @ w + rng.logistic(size=n)
        y = np.zeros(n, dtype=np.int64)
        y[np.argsort(-score, kind="stable")[: int(round(r * n))]] = 1
        a = np.exp(rng.normal(0.0, 0.5, size=dim))
        b = rng.standard_normal(dim)
        x = (z * a + b).astype(np.float32)  # diag(A) z + b, (n, d)
        perm = rng.permutation(n)
        n_test = max(1, int(round(test_fraction * n)))
        tr, te = perm[n_test:], perm[:n_test]
        pieces.append((x[tr], y[tr], x[te], y[te]))
    return Split.from_domains(pieces, domains=names, classes=("HC", "ASD"), name="Q-ABIDE",
                              meta={"seed": seed, "sizes": list(sizes), "positive_ratios": list(ratios), "dim": dim})


def fedbn_synthetic(
    seed: int = 0,
    *,
    dim: int = 10,
    n_per_class: int = 500,
    n_test_per_class: int = 100,
    shift: float = 0.5,
    correlation: float = 0.8,
) -> Split:
    r"""FedBN App. F (fedbn-fig9): two clients, two Gaussian classes each, different covariance.

    Class means :math:`\mu_0 = -\mu_1 = 0.5\cdot\mathbf{1}_d`. Client 0:
    :math:`\Sigma_1 = I`. Client 1: :math:`\Sigma_2` with ``correlation`` on the first
    off-diagonal band. A purely tridiagonal matrix with 0.8 off the diagonal is not positive
    semi-definite for d >= 3 (smallest eigenvalue :math:`1 - 1.6\cos(\pi/(d+1)) < 0`), so we use
    the AR(1) matrix :math:`(\Sigma_2)_{ij} = 0.8^{|i-j|}`, which has exactly 0.8 on the first
    band and is positive definite.

    Returns
    -------
    Split
        Features (N, d); ``domain_*`` = client (0 or 1); per client ``n_per_class`` samples per
        class for training and ``n_test_per_class`` for testing.
    """
    if not -1 < correlation < 1:
        raise ValueError(f"correlation must be in (-1, 1), got {correlation}")
    rng = np.random.default_rng(seed)
    mu = np.stack([shift * np.ones(dim), -shift * np.ones(dim)])  # (2, d)
    lag = np.abs(np.subtract.outer(np.arange(dim), np.arange(dim)))
    chol = [np.eye(dim), np.linalg.cholesky(correlation**lag)]

    def draw(client: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(2, dtype=np.int64), n)
        x = mu[y] + rng.standard_normal((2 * n, dim)) @ chol[client].T  # (2n, d)
        return x.astype(np.float32), y

    pieces = [(*draw(c, n_per_class), *draw(c, n_test_per_class)) for c in range(2)]  # train, then test
    return Split.from_domains(pieces, domains=("identity covariance", "AR(1) covariance"), classes=("0", "1"),
                              name="FedBN-AppF", meta={"seed": seed, "dim": dim, "shift": shift,
                                                       "correlation": correlation})
