"""Q-DIG: scikit-learn's bundled 8x8 digits, the default data of every quick experiment.

Recipe (CATALOG §0.3, Q-DIG): ``load_digits`` (1797 images, values 0-16, 10 classes), a
stratified 80/20 split with seed 0 (1437 train / 360 test), divide by 16, then standardise every
pixel with the training mean and standard deviation (a pixel that is constant in training,
e.g. the always-blank corners, gets std 1 so it maps to 0 instead of dividing by zero).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bnfl.data.datasets import Split, standardise

__all__ = ["DIGIT_CLASSES", "digits", "raw_digits", "to_form"]

DIGIT_CLASSES: tuple[str, ...] = tuple(str(d) for d in range(10))

Form = Literal["flat", "image", "cifar"]


@lru_cache(maxsize=1)
def _load() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # imported here: sklearn adds ~0.8 s to `import bnfl`

    bunch = load_digits()
    return bunch.images.astype(np.float64), bunch.target.astype(np.int64)


def raw_digits() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 raw digits: ``(images (1797, 8, 8) float64 in [0, 16], labels (1797,) int64)``.

    Read once per process; every call returns fresh copies (safe to modify).
    """
    images, labels = _load()
    return images.copy(), labels.copy()


def to_form(images: torch.Tensor, form: Form) -> torch.Tensor:
    """Reshape ``(N, 8, 8)`` images to a model input form (no normalisation).

    ``"flat"`` -> (N, 64); ``"image"`` -> (N, 1, 8, 8); ``"cifar"`` -> (N, 3, 32, 32): bilinear
    upsampling 8 -> 32 (``align_corners=False``) and the grey channel replicated three times, so
    CIFAR models (3x32x32 input) can be exercised on digits.
    """
    if images.ndim != 3:
        raise ValueError(f"images must have shape (N, H, W), got {tuple(images.shape)}")
    n = images.shape[0]
    if form == "flat":
        return images.reshape(n, -1)  # (N, H, W) -> (N, H*W)
    if form == "image":
        return images.unsqueeze(1)  # (N, H, W) -> (N, 1, H, W)
    if form == "cifar":
        up = F.interpolate(images.unsqueeze(1), size=(32, 32), mode="bilinear", align_corners=False)
        return up.expand(n, 3, 32, 32).contiguous()  # (N, 1, 32, 32) -> (N, 3, 32, 32)
    raise ValueError(f"form must be 'flat', 'image' or 'cifar', got {form!r}")


def digits(form: Form = "image", seed: int = 0, *, test_size: float = 0.2) -> Split:
    """Q-DIG: the bundled digits, stratified 80/20, scaled to [0, 1] and standardised.

    Parameters
    ----------
    form : {"flat", "image", "cifar"}, default "image"
        ``"flat"``: (N, 64), per-pixel standardisation. ``"image"``: (N, 1, 8, 8), per-pixel
        standardisation. ``"cifar"``: (N, 3, 32, 32) (see :func:`to_form`), standardised per
        channel as CIFAR pipelines do.
    seed : int, default 0
        Seed of the stratified split (the catalog's Q-DIG uses 0).
    test_size : float, default 0.2
        Test fraction (0.2 gives 1437 / 360).

    Returns
    -------
    Split
        ``meta`` holds the seed, the form and the normalisation mean/std.
    """
    images, labels = raw_digits()
    x = torch.from_numpy(images / 16.0).to(torch.float32)
    return stratified_split(x, labels, form=form, seed=seed, test_size=test_size, name="Q-DIG",
                            convert=lambda t: to_form(t, form))


def stratified_split(x: Tensor, labels: np.ndarray, *, form: str, seed: int, test_size: float, name: str,
                     convert: Callable[[Tensor], Tensor]) -> Split:
    """The digit loaders' split (:func:`digits`, :func:`bnfl.data.mnist5k`): stratified by class
    with ``seed``, each side put into its ``form`` by ``convert``, standardised with the training
    side's statistics (per channel for ``"cifar"``, per pixel otherwise), with the indices in ``meta``."""
    # seconds to import; only the split needs it
    from sklearn.model_selection import train_test_split

    idx_train, idx_test = train_test_split(
        np.arange(labels.size), test_size=test_size, stratify=labels, random_state=seed
    )
    x_train, x_test = convert(x[idx_train]), convert(x[idx_test])
    dims = (0, 2, 3) if form == "cifar" else (0,)
    x_train, x_test, mean, std = standardise(x_train, x_test, dims)
    return Split(
        x_train=x_train,
        y_train=torch.from_numpy(labels[idx_train]),
        x_test=x_test,
        y_test=torch.from_numpy(labels[idx_test]),
        classes=DIGIT_CLASSES,
        name=name,
        meta={"seed": seed, "form": form, "mean": mean.squeeze(0), "std": std.squeeze(0),
              "index_train": idx_train, "index_test": idx_test},
    )
