"""The one container every bnfl data set comes in, and deterministic mini-batching.

A :class:`Split` holds tensors only (float32 features, int64 labels), so the FL engine can index
it with the client index arrays returned by :mod:`bnfl.data.partition`::

    data = digits()                                  # Split, 1437 train / 360 test
    parts = partition.dirichlet(data.y_train, num_clients=20, phi=0.6, seed=0)
    x0, y0 = data.x_train[parts[0]], data.y_train[parts[0]]
    for idx in iterate_batches(parts[0], batch_size=32, seed=0, epoch=3):
        ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["Split", "iterate_batches", "as_index_array", "standardise", "validation_split"]


@dataclass
class Split:
    """A train/test pair of tensors, with optional per-sample domain labels.

    Attributes
    ----------
    x_train : Tensor of shape (N, ...), float32
        (or uint8 pixels (N, C, H, W) standardised per batch where ``meta["stored"] == "uint8"``:
        :mod:`bnfl.data.stored`, :func:`bnfl.data.imagenet`)
    y_train : Tensor of shape (N,) or (N, H, W) for segmentation masks, int64
    x_test : Tensor of shape (M, ...), float32
    y_test : Tensor of shape (M,) or (M, H, W), int64
    classes : tuple of str
        Class names; ``len(classes)`` is the number of classes (for masks: including background).
    name : str
        Short identifier, e.g. ``"Q-DIG"``.
    domain_train, domain_test : Tensor of shape (N,) / (M,), int64, or None
        Index into ``domains`` of each sample's domain (site, city, client of origin).
    domains : tuple of str
        Domain names (empty when the data has no domains).
    meta : dict
        Provenance: seed, recipe parameters, normalisation constants.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    classes: tuple[str, ...]
    name: str
    domain_train: Tensor | None = None
    domain_test: Tensor | None = None
    domains: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for part in ("train", "test"):
            x, y = getattr(self, f"x_{part}"), getattr(self, f"y_{part}")
            if not isinstance(x, Tensor) or not isinstance(y, Tensor):
                raise TypeError(f"x_{part} and y_{part} must be torch tensors")
            if x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"x_{part} has {x.shape[0]} samples but y_{part} has {y.shape[0]}; "
                    "they must match"
                )
            if x.dtype != torch.float32 and not (x.dtype == torch.uint8 and self.meta.get("stored") == "uint8"):
                raise TypeError(f"x_{part} must be float32 (or uint8 pixels with meta['stored'] = 'uint8': "
                                f"bnfl.data.stored), got {x.dtype}")
            if y.dtype != torch.int64:
                raise TypeError(f"y_{part} must be int64, got {y.dtype}")
            d = getattr(self, f"domain_{part}")
            if d is not None and (d.shape != (x.shape[0],) or d.dtype != torch.int64):
                raise ValueError(
                    f"domain_{part} must be an int64 tensor of shape ({x.shape[0]},), "
                    f"got {d.dtype} {tuple(d.shape)}"
                )

    @classmethod
    def from_domains(
        cls,
        pieces: Sequence[tuple[Any, Any, Any, Any]],
        *,
        domains: Sequence[str],
        classes: Sequence[str],
        name: str,
        meta: dict[str, Any] | None = None,
    ) -> Split:
        """A split whose samples come from named domains (sites, cities, clients of origin).

        Parameters
        ----------
        pieces : sequence of (x_train, y_train, x_test, y_test)
            Domain ``j``'s samples, NumPy arrays or tensors with the samples on dim 0 and the
            dtypes of a :class:`Split` (float32 features, int64 labels), in the order of ``domains``.
        domains : sequence of str
            One name per piece.
        classes : sequence of str
        name : str
        meta : dict, optional

        Returns
        -------
        Split
            Every part concatenated in domain order; ``domain_train[i]`` / ``domain_test[i]`` is the
            index ``j`` of the piece sample ``i`` came from.
        """
        if len(pieces) != len(domains):
            raise ValueError(f"{len(pieces)} pieces for {len(domains)} domains; give one (x_train, y_train, "
                             "x_test, y_test) per domain")

        def joined(part: int) -> Tensor:
            return torch.cat([torch.as_tensor(p[part]) for p in pieces])

        def origin(part: int) -> Tensor:
            return torch.cat([torch.full((len(p[part]),), j, dtype=torch.int64) for j, p in enumerate(pieces)])

        return cls(x_train=joined(0), y_train=joined(1), x_test=joined(2), y_test=joined(3), classes=tuple(classes),
                   name=name, domain_train=origin(1), domain_test=origin(3), domains=tuple(domains),
                   meta=dict(meta or {}))

    @property
    def num_classes(self) -> int:
        """Number of classes (``len(classes)``)."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input sample, e.g. ``(1, 8, 8)``."""
        return tuple(self.x_train.shape[1:])

    def to(self, device: torch.device | str) -> Split:
        """A copy with every tensor moved to ``device`` (the original is unchanged)."""

        def mv(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        return replace(
            self,
            x_train=mv(self.x_train),
            y_train=mv(self.y_train),
            x_test=mv(self.x_test),
            y_test=mv(self.y_test),
            domain_train=mv(self.domain_train),
            domain_test=mv(self.domain_test),
            meta=dict(self.meta),
        )

    def train_subset(self, indices: Sequence[int] | np.ndarray | Tensor) -> tuple[Tensor, Tensor]:
        """``(x_train[indices], y_train[indices])`` for one client's index array."""
        idx = torch.as_tensor(as_index_array(indices, self.x_train.shape[0]), device=self.x_train.device)
        return self.x_train[idx], self.y_train[idx]

    def __repr__(self) -> str:
        dom = f", domains={list(self.domains)}" if self.domains else ""
        return (
            f"Split(name={self.name!r}, train={tuple(self.x_train.shape)}, "
            f"test={tuple(self.x_test.shape)}, classes={self.num_classes}{dom})"
        )

def validation_split(split: Split, fraction: float, *, seed: int = 0) -> Split:
    """Hold out a validation set from the training set: the returned split trains on the rest and
    its *test* set is the held-out part (for choosing hyper-parameters without the test set).

    Stratified by class when labels are one per sample (each class gives ``round(fraction * n_c)``
    samples, at least one when it has two or more), otherwise a uniformly random subset; seeded.
    Domain labels follow their samples. ``meta["validation"]`` records the fraction, the seed and
    the held-out indices' count; the original test set is not part of the result.

    Parameters
    ----------
    split : Split
    fraction : float
        Share of the training set held out, in (0, 1).
    seed : int, default 0

    Raises
    ------
    ValueError
        ``fraction`` outside (0, 1), or a training set too small to leave samples on both sides.
    """
    if not (isinstance(fraction, int | float) and 0 < float(fraction) < 1):
        raise ValueError(f"validation fraction must be in (0, 1), got {fraction!r}")
    n = int(split.x_train.shape[0])
    rng = np.random.default_rng([int(seed), 7919])
    y = split.y_train.cpu().numpy()
    if y.ndim == 1:
        held = []
        for c in np.unique(y):
            idx = np.flatnonzero(y == c)
            k = int(round(float(fraction) * len(idx)))
            k = min(max(k, 1 if len(idx) >= 2 else 0), len(idx) - 1) if len(idx) > 1 else 0
            held.append(rng.choice(idx, size=k, replace=False))
        val = np.sort(np.concatenate(held)) if held else np.array([], dtype=np.int64)
    else:
        val = np.sort(rng.choice(n, size=int(round(float(fraction) * n)), replace=False))
    keep = np.setdiff1d(np.arange(n), val)
    if len(val) == 0 or len(keep) == 0:
        raise ValueError(f"a validation fraction of {fraction} of {n} training samples leaves one side empty")
    tv, tk = torch.as_tensor(val), torch.as_tensor(keep)
    dom = split.domain_train
    return Split(
        x_train=split.x_train[tk], y_train=split.y_train[tk], x_test=split.x_train[tv], y_test=split.y_train[tv],
        classes=split.classes, name=f"{split.name} (validation)",
        domain_train=None if dom is None else dom[tk], domain_test=None if dom is None else dom[tv],
        domains=split.domains,
        meta={**split.meta, "validation": {"fraction": float(fraction), "seed": int(seed), "held_out": int(len(val))}},
    )



def standardise(x_train: Tensor, x_test: Tensor, dims: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Standardise train and test with the training set's mean and std over ``dims``.

    The std is the biased one (``unbiased=False``); a zero std is replaced by 1, so a constant
    feature or channel becomes 0 instead of NaN.

    Parameters
    ----------
    x_train : Tensor of shape (N, ...)
        Training features; the statistics come from these only.
    x_test : Tensor of shape (M, ...)
        Test features, normalised with the training statistics.
    dims : tuple of int
        Dimensions to average over, e.g. ``(0,)`` per feature or ``(0, 2, 3)`` per channel.

    Returns
    -------
    x_train, x_test : Tensor
        The standardised features, shapes unchanged.
    mean, std : Tensor
        The statistics used, with ``keepdim=True`` shapes (size 1 along ``dims``).
    """
    mean = x_train.mean(dim=dims, keepdim=True)
    std = x_train.std(dim=dims, keepdim=True, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return (x_train - mean) / std, (x_test - mean) / std, mean, std


def as_index_array(indices: Sequence[int] | np.ndarray | Tensor, n: int | None = None) -> np.ndarray:
    """Validate an index collection and return it as a 1-D ``np.int64`` array (a copy).

    Parameters
    ----------
    indices : sequence of int, ndarray or Tensor
    n : int, optional
        If given, every index must lie in ``[0, n)``.
    """
    if isinstance(indices, Tensor):
        arr = indices.detach().cpu().numpy()
    else:
        arr = np.asarray(indices)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"indices must be a 1-D integer array, got dtype {arr.dtype} shape {arr.shape}")
    if n is not None and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"indices must lie in [0, {n}), got range [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64, copy=True)


def iterate_batches(
    indices: Sequence[int] | np.ndarray | Tensor,
    batch_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[Tensor]:
    """Yield mini-batches of ``indices`` as int64 tensors, deterministically.

    The order of epoch ``e`` depends only on ``(seed, epoch)``, never on global random state,
    so the same call always yields the same batches (and a resumed run continues exactly).

    Parameters
    ----------
    indices : 1-D integer array
        Sample indices of one client (e.g. one entry of a partition).
    batch_size : int
        Samples per batch (>= 1).
    seed : int, default 0
    epoch : int, default 0
        Mixed into the seed so each epoch has its own order.
    shuffle : bool, default True
        If False, batches follow the given order.
    drop_last : bool, default False
        Drop a final batch smaller than ``batch_size``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    arr = as_index_array(indices)
    if shuffle:
        arr = _epoch_order(arr, seed, epoch)
    stop = arr.size - (arr.size % batch_size if drop_last else 0)
    for start in range(0, stop, batch_size):
        yield torch.from_numpy(arr[start : start + batch_size].copy())


def _epoch_order(arr: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """``arr`` in epoch ``epoch``'s order: a permutation drawn from ``default_rng([seed, epoch])``."""
    return arr[np.random.default_rng([int(seed), int(epoch)]).permutation(arr.size)]


def epoch_batches(arr: np.ndarray, batch_size: int, *, seed: int, epoch: int, drop_last: bool) -> list[Tensor]:
    """``list(iterate_batches(arr, batch_size, seed=seed, epoch=epoch, drop_last=drop_last))`` for an
    already validated 1-D int64 ``arr`` (:func:`as_index_array`), without re-validating it and as
    views of one tensor: the engine's per-client, per-epoch call (clients smaller than a batch
    start an epoch every step)."""
    order = torch.from_numpy(_epoch_order(arr, seed, epoch))
    n = arr.size // batch_size if drop_last else -(-arr.size // batch_size)
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(n)]
