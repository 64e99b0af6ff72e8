"""The engines' side of training-time augmentation (:mod:`bnfl.data.augment`): which batch was
drawn, its crops and flips, applied once to the (concatenated) batch on the device.

Every engine draws a client's batch with :meth:`Simulation.next_batch_ids
<bnfl.fl.Simulation.next_batch_ids>`, which advances the client's cursor ``[epoch, position]``;
the batch just drawn is therefore ``(client, epoch, position - 1)``, and its random numbers come
from ``(seed, client, epoch, position - 1)`` alone. The sequential engine augments each client's
batch (:meth:`BatchAugmenter.augment`), the batched engine the concatenation of the round's
batches in one call (:func:`augment_rows`): the same crops and flips of the same samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bnfl.data.augment import AUGMENTATIONS, CropFlip, crop_flip, draw_crop_flip

__all__ = ["BatchAugmenter", "augment_rows", "make_augmenter"]

# one drawn batch: (client, epoch, position in the epoch, real rows)
Drawn = tuple[int, int, int, int]


class BatchAugmenter:
    """Augmentation ``aug`` of one run's training batches (seed ``seed``), padding with ``fill``.

    Parameters
    ----------
    aug : CropFlip
    seed : int
        The run's seed (:attr:`TrainConfig.seed <bnfl.fl.TrainConfig.seed>`).
    fill : Tensor of shape (C,)
        The padding value per channel (:func:`bnfl.data.augment.black_value`).
    """

    def __init__(self, aug: CropFlip, *, seed: int, fill: Tensor) -> None:
        self.aug, self.seed, self.fill = aug, int(seed), fill

    @staticmethod
    def drawn(cursors: Mapping[int, Sequence[int]], c: int, n: int) -> Drawn:
        """The identity of the batch of ``n`` samples client ``c`` just drew (``cursors``: the
        simulation's batch cursors ``[epoch, position]`` by client, after the draw)."""
        epoch, pos = cursors[c]
        return (int(c), int(epoch), int(pos) - 1, int(n))

    def params(self, batch: Drawn, rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(dy, dx, flip)`` of ``batch``'s real rows, padded to ``rows`` with those of its first
        row (the batched engine pads a smaller batch with copies of its first sample)."""
        c, epoch, pos, n = batch
        dy, dx, flip = draw_crop_flip(n, self.aug, (self.seed, c, epoch, pos))
        extra = (rows or n) - n
        if extra > 0:
            dy, dx, flip = (np.concatenate([a, np.repeat(a[:1], extra)]) for a in (dy, dx, flip))
        return dy, dx, flip

    def apply(self, x: Tensor, dy: np.ndarray, dx: np.ndarray, flip: np.ndarray) -> Tensor:
        """``x`` (N, C, H, W) cropped and flipped row by row (:func:`bnfl.data.augment.crop_flip`)."""
        return crop_flip(x, torch.from_numpy(dy), torch.from_numpy(dx), torch.from_numpy(flip),
                         padding=self.aug.padding, fill=self.fill.to(x.device, x.dtype))

    def augment(self, x: Tensor, batch: Drawn) -> Tensor:
        """One client's batch ``x`` (its ``batch``), augmented."""
        return self.apply(x, *self.params(batch))


def identity_params(n: int, aug: CropFlip) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets and flags that leave ``n`` images as they are (a centred crop, no flip)."""
    p = np.full(n, aug.padding, dtype=np.int64)
    return p, p.copy(), np.zeros(n, dtype=bool)


def augment_rows(x: Tensor, augmenters: Sequence[BatchAugmenter | None], batches: Sequence[Drawn], rows: int) -> Tensor:
    """The batched engine's concatenated batch ``x`` (``len(batches) * rows``, C, H, W), each
    block of ``rows`` augmented by its own simulation's augmenter (None: left as is), in one call."""
    first = next((a for a in augmenters if a is not None), None)
    if first is None:
        return x
    if any(a is not None and a.aug != first.aug for a in augmenters):
        raise ValueError("clients trained together must use the same augmentation")
    parts = [a.params(b, rows) if a is not None else identity_params(rows, first.aug)
             for a, b in zip(augmenters, batches, strict=True)]
    dy, dx, flip = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return first.apply(x, dy, dx, flip)


def make_augmenter(config: Any, data: Any) -> BatchAugmenter | None:
    """The augmenter of ``config.augment`` (None for ``"none"``), checked against ``data`` (a
    :class:`~bnfl.fl.FederatedData`, read only when augmenting): image inputs (C, H, W) with one
    label per sample (crops of segmentation masks are not implemented), padded with
    ``data.pad_value``."""
    name = getattr(config, "augment", "none")
    aug = AUGMENTATIONS[name]
    if aug is None:
        return None
    fill = getattr(data, "pad_value", None)
    input_shape, label_shape = tuple(data.x_train.shape[1:]), tuple(data.y_train.shape[1:])
    if len(input_shape) != 3:
        raise ValueError(f"augment={name!r} needs image inputs (C, H, W), got samples of shape {tuple(input_shape)}; "
                         "use augment='none' for flat features")
    if len(label_shape) != 0:
        raise ValueError(f"augment={name!r} crops and flips images only: labels of shape {tuple(label_shape)} "
                         "(segmentation masks) would not follow; use augment='none'")
    channels = int(input_shape[0])
    fill = torch.zeros(channels) if fill is None else torch.as_tensor(fill, dtype=torch.float32).reshape(-1)
    return BatchAugmenter(aug, seed=config.seed, fill=fill)
