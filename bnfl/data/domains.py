"""Q-DOM feature-shift domains and Q-SEG segmentation "cities", derived from the bundled digits.

Recipe (CATALOG §0.3, Q-DOM): split the 1797 digits into disjoint equal random subsets, one per
domain; apply one transform per domain to the raw 0-16 images; clip to [0, 16] and rescale
(here: ``x/16`` then FedBN's ``Normalize(0.5, 0.5)``, i.e. values in [-1, 1]); split every domain
80/20 into train/test. All domains have the same size (FedBN convention).

========== ======================================================================
name       transform of a raw image ``x`` (8x8, values 0-16)
========== ======================================================================
clean      ``x`` (D0)
contrast   ``0.4 x + 8`` (D1)
blur       3x3 box blur, zero padding (D2)
noise      ``x + N(0, 3^2)``, drawn once per sample from the seed (D3)
thick      2x2 max-filter, zero padding right/bottom (D4)
gain       left-to-right gain map ``x * (0.5 + u/7)``, u = column 0..7 (D5)
thin       2x2 min-filter, edge padding right/bottom (unseen, fedbn-tab17)
fracture   a random 2-pixel-wide row or column band through the centre set to 0
           (unseen, fedbn-tab17; our reading of "random 2-pixel line dropout")
========== ======================================================================

There is deliberately no sign inversion (``16 - x``): a positive BN scale cannot undo it.

How far a split's domains lie apart (FedBN Fig. 6 and the most-shifted domain of its Fig. 5):
:func:`pixel_histograms`, :func:`ks_statistic`, :func:`most_shifted_domain`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bnfl.data.datasets import Split
from bnfl.data.digits import DIGIT_CLASSES, Form, raw_digits, to_form

__all__ = ["DOMAINS", "DEFAULT_DOMAINS", "apply_domain", "digit_domains", "digit_segmentation", "ks_statistic",
           "most_shifted_domain", "pixel_histograms", "unseen_domain_test"]

#: Every known domain, in a fixed order (its position seeds the domain's random transform).
DOMAINS: tuple[str, ...] = ("clean", "contrast", "blur", "noise", "thick", "gain", "thin", "fracture")
#: Q-DOM's six training domains D0-D5.
DEFAULT_DOMAINS: tuple[str, ...] = DOMAINS[:6]


def apply_domain(images: np.ndarray, name: str, seed: int = 0) -> np.ndarray:
    """Apply domain ``name``'s transform to raw digits and clip to [0, 16].

    Parameters
    ----------
    images : ndarray of shape (N, 8, 8)
        Raw digits, values in [0, 16]. Not modified.
    name : str
        One of :data:`DOMAINS`.
    seed : int, default 0
        Seeds the random domains (noise, fracture) together with the domain's position in
        :data:`DOMAINS`; the result is a pure function of ``(images, name, seed)``.

    Returns
    -------
    ndarray of shape (N, 8, 8), float64, values in [0, 16].
    """
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; choose from {DOMAINS}")
    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"images must have shape (N, H, W), got {x.shape}")
    rng = np.random.default_rng([int(seed), DOMAINS.index(name)])
    t = torch.from_numpy(x.copy()).unsqueeze(1)  # (N, H, W) -> (N, 1, H, W)
    if name == "clean":
        out = t
    elif name == "contrast":
        out = 0.4 * t + 8.0
    elif name == "blur":
        out = F.avg_pool2d(t, 3, stride=1, padding=1, count_include_pad=True)
    elif name == "noise":
        out = t + torch.from_numpy(rng.normal(0.0, 3.0, size=t.shape))
    elif name == "thick":
        out = F.max_pool2d(F.pad(t, (0, 1, 0, 1)), 2, stride=1)
    elif name == "gain":
        u = torch.arange(t.shape[-1], dtype=t.dtype)
        out = t * (0.5 + u / 7.0)
    elif name == "thin":
        out = -F.max_pool2d(F.pad(-t, (0, 1, 0, 1), mode="replicate"), 2, stride=1)
    else:  # fracture
        out = t.clone()
        h, w = t.shape[-2:]
        vertical = rng.random(t.shape[0]) < 0.5
        for i in range(t.shape[0]):
            size = w if vertical[i] else h
            p = int(rng.integers(size // 2 - 2, size // 2 + 1))  # band p, p+1 within the centre
            if vertical[i]:
                out[i, :, :, p : p + 2] = 0.0
            else:
                out[i, :, p : p + 2, :] = 0.0
    return out.squeeze(1).clamp(0.0, 16.0).numpy()


def _domain_subsets(
    names: Sequence[str], seed: int, test_fraction: float
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    """Disjoint equal random subsets of the 1797 digits, each split train/test."""
    names = tuple(names)
    if not names:
        raise ValueError("give at least one domain")
    if len(set(names)) != len(names):
        raise ValueError(f"domains must be distinct, got {names}")
    for n in names:
        if n not in DOMAINS:
            raise ValueError(f"unknown domain {n!r}; choose from {DOMAINS}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    images, labels = raw_digits()
    per = labels.size // len(names)
    n_test = int(round(test_fraction * per))
    if per - n_test < 1 or n_test < 1:
        raise ValueError(f"{len(names)} domains leave too few digits per domain ({per})")
    perm = np.random.default_rng(seed).permutation(labels.size)
    subsets = []
    for j in range(len(names)):
        idx = perm[j * per : (j + 1) * per]
        subsets.append((idx[: per - n_test], idx[per - n_test :]))
    return subsets, images, labels


def digit_domains(
    domains: Sequence[str] = DEFAULT_DOMAINS,
    seed: int = 0,
    *,
    form: Form = "image",
    test_fraction: float = 0.2,
    train_per_domain: int | None = None,
    train_sizes: Sequence[int] | None = None,
) -> Split:
    """Q-DOM: one feature-shifted copy of a disjoint subset of the digits per domain.

    Parameters
    ----------
    domains : sequence of str, default the six D0-D5
        Names from :data:`DOMAINS`. The 1797 digits are shared out equally among them
        (6 domains: 299 each -> 239 train / 60 test; 5 domains: 359 -> 287 / 72).
    seed : int, default 0
        Seeds the subsets and the random transforms.
    form : {"image", "flat", "cifar"}, default "image"
    test_fraction : float, default 0.2
    train_per_domain : int, optional
        Keep only the first this-many training samples per domain (e.g. 62 for the
        Office-Caltech proxy, 105 for DomainNet); the test sets are unchanged.
    train_sizes : sequence of int, optional
        Keep the first ``train_sizes[j]`` training samples of domain ``j`` (unequal client sizes,
        FedBN Tables 15-16); exclusive with ``train_per_domain``.

    Returns
    -------
    Split
        ``domain_train`` / ``domain_test`` index into ``domains`` (= the requested names).
    """
    subsets, images, labels = _domain_subsets(domains, seed, test_fraction)
    if train_per_domain is not None and not 1 <= train_per_domain <= subsets[0][0].size:
        raise ValueError(
            f"train_per_domain must be in [1, {subsets[0][0].size}], got {train_per_domain}"
        )
    if train_sizes is not None:
        if train_per_domain is not None:
            raise ValueError("give train_per_domain or train_sizes, not both")
        sizes = [int(n) for n in train_sizes]
        if len(sizes) != len(subsets) or not all(1 <= n <= subsets[0][0].size for n in sizes):
            raise ValueError(f"train_sizes must give one size in [1, {subsets[0][0].size}] per domain "
                             f"({len(subsets)}), got {list(train_sizes)}")
    else:
        sizes = [train_per_domain] * len(subsets)

    def styled(idx: np.ndarray, name: str) -> torch.Tensor:
        x = apply_domain(images[idx], name, seed) / 16.0
        return to_form(torch.from_numpy((x - 0.5) / 0.5).to(torch.float32), form)

    pieces = []
    for name, (tr, te), n in zip(domains, subsets, sizes, strict=True):
        tr = tr if n is None else tr[:n]
        pieces.append((styled(tr, name), labels[tr], styled(te, name), labels[te]))
    return Split.from_domains(pieces, domains=domains, classes=DIGIT_CLASSES, name="Q-DOM",
                              meta={"seed": seed, "form": form, "normalize": "x/16, then (x-0.5)/0.5"})


def unseen_domain_test(
    style: str,
    domains: Sequence[str] = DEFAULT_DOMAINS,
    seed: int = 0,
    *,
    form: Form = "image",
    test_fraction: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A test set of an unseen domain for the clients of :func:`digit_domains` (FedBN App. G).

    The raw test digits of all ``domains`` (the same digits, never trained on) drawn in ``style``
    (e.g. "thin" or "fracture"), normalised as :func:`digit_domains` does. Returns ``(x, y)``.
    """
    if style not in DOMAINS:
        raise ValueError(f"unknown domain {style!r}; choose from {DOMAINS}")
    subsets, images, labels = _domain_subsets(domains, seed, test_fraction)
    idx = np.concatenate([te for _, te in subsets])
    x = (apply_domain(images[idx], style, seed) / 16.0 - 0.5) / 0.5
    return to_form(torch.from_numpy(x).to(torch.float32), form), torch.from_numpy(labels[idx])


def digit_segmentation(
    cities: Sequence[str] = DOMAINS[:5],
    seed: int = 0,
    *,
    binary: bool = False,
    threshold: float = 6.0,
    test_fraction: float = 0.2,
) -> Split:
    """Q-SEG: digit-stroke segmentation with Q-DOM styles as "cities" (fixbn-tab3 proxy).

    The mask comes from the clean raw image: pixel label = digit class + 1 where the raw value
    exceeds ``threshold`` (6), else 0 = background (11 classes); with ``binary=True`` the stroke
    label is 1 (2 classes). The input is the city's styled image, as in :func:`digit_domains`.

    Returns
    -------
    Split
        ``x``: (N, 1, 8, 8) float32; ``y``: (N, 8, 8) int64 masks; domains = cities.
    """
    subsets, images, labels = _domain_subsets(cities, seed, test_fraction)

    def city(idx: np.ndarray, name: str) -> tuple[torch.Tensor, np.ndarray]:
        raw = images[idx]
        stroke = raw > threshold
        mask = stroke.astype(np.int64) if binary else np.where(stroke, labels[idx, None, None] + 1, 0)
        x = torch.from_numpy((apply_domain(raw, name, seed) / 16.0 - 0.5) / 0.5).to(torch.float32)
        return x.unsqueeze(1), mask.astype(np.int64)  # (n, 8, 8) -> (n, 1, 8, 8); masks (n, 8, 8)

    pieces = [(*city(tr, name), *city(te, name)) for name, (tr, te) in zip(cities, subsets, strict=True)]
    classes = ("background", "stroke") if binary else ("background", *DIGIT_CLASSES)
    return Split.from_domains(pieces, domains=cities, classes=classes, name="Q-SEG",
                              meta={"seed": seed, "binary": binary, "threshold": threshold})


# -- how far the domains of a split are shifted (FedBN Fig. 6 and its most-shifted domain) ---------
def pixel_histograms(split: Split, bins: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Per-domain normalised histograms of the training pixels: ``(edges, hist)`` with hist of shape
    (domains, bins)."""
    x = split.x_train.reshape(split.x_train.shape[0], -1).numpy()
    d = split.domain_train.numpy()
    edges = np.linspace(float(x.min()), float(x.max()), bins + 1)
    hist = np.stack([np.histogram(x[d == j].ravel(), bins=edges)[0] for j in range(len(split.domains))])
    return edges, hist / hist.sum(axis=1, keepdims=True)


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance between two histograms on the same bins (``max |CDF_a - CDF_b|``)."""
    return float(np.max(np.abs(np.cumsum(a) - np.cumsum(b))))


def most_shifted_domain(split: Split) -> tuple[int, list[float]]:
    """The domain whose training-pixel distribution is farthest from the first domain's (1-D
    Wasserstein distance of the pixel values), and every domain's distance."""
    # function-level: scipy.stats takes seconds to import, and only this function needs it
    from scipy.stats import wasserstein_distance

    x = split.x_train.reshape(split.x_train.shape[0], -1).numpy()
    d = split.domain_train.numpy()
    ref = x[d == 0].ravel()
    dist = [float(wasserstein_distance(ref, x[d == j].ravel())) for j in range(len(split.domains))]
    return int(np.argmax(dist)), dist
