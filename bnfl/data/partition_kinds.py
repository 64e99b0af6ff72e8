"""The partition kinds of a run config's ``[partition] kind``: a :class:`~bnfl.registry.Registry`.

Each kind names a function of :mod:`bnfl.data.partition` and the options it takes besides
``num_clients`` and ``seed``. A user's partition runs by import string
(``kind = "mypkg.parts:by_size"``) or after :func:`register`: a function
``fn(labels, num_clients, seed, **options) -> list of index arrays`` whose keyword parameters
after the first three are its options.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bnfl.data import partition as P
from bnfl.registry import Registry

__all__ = ["PARTITIONS", "PartitionKind", "register"]

#: ``split(labels, num_clients, seed, **options) -> list of index arrays``
SplitFn = Callable[..., list[np.ndarray]]


@dataclass(frozen=True)
class PartitionKind:
    """One partition kind.

    Attributes
    ----------
    options : tuple of str
        Options of ``[partition]`` it takes besides ``kind``, ``num_clients`` and ``seed``.
    split : callable or None
        ``split(labels, num_clients, seed, **options)``; ``None`` for ``by_domain``, which the
        builder answers from the data's domain labels (:func:`bnfl.data.partition.by_domain`).
    """

    options: tuple[str, ...]
    split: SplitFn | None


def _options_of(fn: SplitFn) -> tuple[str, ...]:
    params = list(inspect.signature(fn).parameters.values())[3:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _as_kind(spec: str, obj: Any) -> PartitionKind:
    if isinstance(obj, PartitionKind):
        return obj
    if not callable(obj):
        raise ValueError(f"partition kind {spec!r} is {obj!r}, not a function (labels, num_clients, seed, **options)")
    return PartitionKind(_options_of(obj), obj)


#: Every partition kind by name, in this order: iid, classes_per_client, dirichlet, shards, by_domain.
PARTITIONS: Registry[PartitionKind] = Registry(
    "partition kind", listing="valid", convert=_as_kind, accepts=lambda o: isinstance(o, PartitionKind),
    expects="a function marked @plugin('partition kind') or a bnfl.data.partition_kinds.PartitionKind")


def register(name: str | None = None, *, replace: bool = False) -> Callable[[SplitFn], SplitFn]:
    """Decorator: register ``fn(labels, num_clients, seed, **options)`` as partition kind ``name``
    (default: its name); its keyword parameters after the first three are its options."""

    def deco(fn: SplitFn) -> SplitFn:
        PARTITIONS.register(name or fn.__name__, PartitionKind(_options_of(fn), fn), replace=replace)
        return fn

    return deco


PARTITIONS.register("iid", PartitionKind((), lambda y, n, seed: P.iid(y, n, seed)))
PARTITIONS.register("classes_per_client", PartitionKind(
    ("k", "balance"), lambda y, n, seed, k=2, **o: P.classes_per_client(y, k, n, seed, **o)))
PARTITIONS.register("dirichlet", PartitionKind(
    ("phi", "min_size", "max_tries"), lambda y, n, seed, phi=0.5, **o: P.dirichlet(y, n, phi, seed, **o)))
PARTITIONS.register("shards", PartitionKind(
    ("shards_per_client",), lambda y, n, seed, shards_per_client=2: P.shards(y, n, shards_per_client, seed)))
PARTITIONS.register("by_domain", PartitionKind(("shards", "clients_per_domain"), None))
