"""Stored pixels: uint8 image tensors (often on memory maps) standardised only when a batch is used.

A :class:`~bnfl.data.Split` whose ``meta["stored"]`` is ``"uint8"`` (:func:`bnfl.data.imagenet`)
holds images as uint8 ``(N, C, H, W)`` tensors and their per-channel ``meta["mean"]``,
``meta["std"]`` (pixels scaled to [0, 1]). The simulation keeps such tensors where they are (a
memory map on the host), gathers each mini-batch's rows and standardises them on the device
(:func:`decode`), the float32 values a loader that standardises in memory would hold.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["decode", "keep_or_move"]


def keep_or_move(x: Tensor, device: torch.device | str, dtype: torch.dtype) -> Tensor:
    """``x`` moved to ``device``/``dtype``, except stored uint8 pixels, which stay where they are."""
    return x if x.dtype == torch.uint8 else x.to(device, dtype)


def decode(x: Tensor, norm: tuple[Tensor, Tensor] | None, device: torch.device | str, dtype: torch.dtype) -> Tensor:
    r"""Stored uint8 pixels ``x`` (N, C, H, W) as standardised ``dtype`` on ``device``:
    :math:`(x/255 - \mu_c)/\sigma_c`; any other tensor is returned as it is."""
    if x.dtype != torch.uint8:
        return x
    mean, std = norm if norm is not None else (torch.zeros(x.shape[1]), torch.ones(x.shape[1]))
    xf = x.to(device).to(dtype) / 255.0
    return (xf - mean.to(device, dtype).reshape(1, -1, 1, 1)) / std.to(device, dtype).reshape(1, -1, 1, 1)
