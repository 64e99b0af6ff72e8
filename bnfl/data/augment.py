r"""Training-time data augmentation on whole batches, on the device, seeded per batch.

The authors' code of FedTAN (``utils/datasets.py``: ``RandomHorizontalFlip`` then
``RandomCrop(32, 4)``) and of HBN (``FedBaseline/sampling/dataLoader.py``: ``RandomCrop(32,
padding=4)`` then ``RandomHorizontalFlip`` for CIFAR-10/100; no augmentation for Tiny-ImageNet)
augment every CIFAR training image with torchvision's per-sample transforms. bnfl does the same
to a whole mini-batch in one indexing operation (no per-sample Python loop), on the batch's device:

.. math::

    \tilde x_{n,c,i,j} = x^{\mathrm{pad}}_{n,\,c,\,dy_n + i,\,dx_n + (W-1-j \text{ if } f_n \text{ else } j)}

where :math:`x^{\mathrm{pad}}` is the batch padded by ``padding`` pixels of ``fill`` on every
side, :math:`dy_n, dx_n` are uniform on :math:`\{0, \dots, 2\,\mathrm{padding}\}` (torchvision's
``RandomCrop`` offsets) and :math:`f_n` is a fair coin (``RandomHorizontalFlip(0.5)``). Flipping
before or after the crop gives the same distribution (the flip maps offset :math:`dx` to
:math:`2\,\mathrm{padding} - dx`). torchvision pads the PIL image with black (``fill=0``) before
normalising; on bnfl's standardised tensors black is :math:`-\mu_c/\sigma_c` per channel
(:func:`black_value`).

The random numbers of one batch come from ``numpy.random.default_rng([seed, client, epoch,
position, 0xA06])``: the batch's identity in its client's stream
(:meth:`bnfl.fl.Simulation.next_batch_ids`), so every engine (sequential, batched, distributed,
Flower) draws the same crop and flip for the same sample of the same batch, and a resumed run
continues exactly (the cursors are checkpointed).

=========== ============================================================================
``augment`` what a training batch gets
=========== ============================================================================
``"none"``  nothing (the default: every committed number was made without augmentation)
``"cifar"`` random crop with 4-pixel black padding + horizontal flip (FedTAN, HBN CIFAR)
``"flip"``  horizontal flip only
=========== ============================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["AUGMENTATIONS", "CropFlip", "black_value", "crop_flip", "draw_crop_flip"]

_TAG = 0xA06  # separates the augmentation stream from the batch-order stream of the same seed


@dataclass(frozen=True)
class CropFlip:
    """Random crop after ``padding`` pixels of padding, then (with ``flip``) a random horizontal flip.

    Attributes
    ----------
    padding : int
        Pixels added on every side before the crop (0: no crop).
    flip : bool
        Flip each image horizontally with probability 1/2.
    """

    padding: int = 4
    flip: bool = True


#: ``TrainConfig.augment`` names and what they do (``None``: no augmentation).
AUGMENTATIONS: dict[str, CropFlip | None] = {"none": None, "cifar": CropFlip(4, True), "flip": CropFlip(0, True)}


def draw_crop_flip(n: int, aug: CropFlip, key: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The crop offsets ``(dy, dx)`` and flip flags of ``n`` images from the seed sequence ``key``.

    Returns int64 arrays ``dy``, ``dx`` in ``[0, 2 padding]`` and a bool array ``flip``, each of
    shape (n,); the same ``key`` always gives the same draws.
    """
    rng = np.random.default_rng([int(k) for k in key] + [_TAG])
    span = 2 * aug.padding + 1
    dy = rng.integers(0, span, size=n)
    dx = rng.integers(0, span, size=n)
    flip = rng.random(n) < 0.5 if aug.flip else np.zeros(n, dtype=bool)
    return dy.astype(np.int64), dx.astype(np.int64), flip


def crop_flip(x: Tensor, dy: Tensor, dx: Tensor, flip: Tensor, *, padding: int,
              fill: Tensor | float = 0.0) -> Tensor:
    """Crop and flip every image of a batch by its own offsets and flag (the module's equation).

    Parameters
    ----------
    x : Tensor of shape (N, C, H, W)
    dy, dx : Tensor of shape (N,), int64
        Crop offsets in the padded image, in ``[0, 2 padding]``.
    flip : Tensor of shape (N,), bool
    padding : int
    fill : float or Tensor of shape (C,), default 0.0
        Value of the padding pixels (per channel).

    Returns
    -------
    Tensor of shape (N, C, H, W): a new tensor; ``x`` is not modified. Pure indexing (no
    arithmetic), so each output value is bitwise one input or fill value.
    """
    if x.dim() != 4:
        raise ValueError(f"crop_flip needs image batches (N, C, H, W), got shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    p = int(padding)
    if p:
        fill_t = torch.as_tensor(fill, dtype=x.dtype, device=x.device).reshape(-1)
        if fill_t.numel() not in (1, c):
            raise ValueError(f"fill must be a number or one value per channel ({c}), got {fill_t.numel()} values")
        xp = fill_t.reshape(1, -1, 1, 1).expand(n, c, h + 2 * p, w + 2 * p).clone()  # (N, C, H+2p, W+2p)
        xp[:, :, p:p + h, p:p + w] = x
    else:
        xp = x
    dev = x.device
    dy, dx, flip = dy.to(dev), dx.to(dev), flip.to(dev)
    ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
    rows = dy[:, None] + ar_h  # (N, H)
    cols = dx[:, None] + torch.where(flip[:, None], (w - 1) - ar_w, ar_w)  # (N, W)
    ni = torch.arange(n, device=dev)[:, None, None, None]
    ci = torch.arange(c, device=dev)[None, :, None, None]
    return xp[ni, ci, rows[:, None, :, None], cols[:, None, None, :]]  # (N, C, H, W)


def black_value(meta: Mapping[str, Any], channels: int) -> Tensor:
    """The stored value of a black pixel, per channel: ``-mean/std`` where the loader standardised
    (``meta["mean"]``, ``meta["std"]`` of :func:`bnfl.data.loaders.cifar10` and the other image
    loaders), else 0 (images scaled to [0, 1])."""
    mean, std = meta.get("mean"), meta.get("std")
    if mean is None or std is None:
        return torch.zeros(channels)
    mean = torch.as_tensor(mean, dtype=torch.float64).reshape(-1)
    std = torch.as_tensor(std, dtype=torch.float64).reshape(-1)
    if mean.numel() != channels or std.numel() != channels:
        return torch.zeros(channels)
    return (-mean / std).to(torch.float32)
