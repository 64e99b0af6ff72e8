"""The layer registry, batched side: how the batched engine (:class:`bnfl.nn.batched.BatchedNet`)
runs a layer for K clients at once.

:data:`BATCHED_LAYERS`: layer class -> its batched form; :func:`register_batched` adds one. A layer
that owns parameters or buffers and is not here is refused by the batched engine in one line naming
the layer and this registry (the sequential engine runs it). bnfl's own GN, LN, IN, HBN and FBN are
registered at the end of this module; the kinds a model is built from are :data:`bnfl.nn.NORM_KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from torch import Tensor, nn

from bnfl.nn.batched_norms import federated_batch_norm, group_norm, hybrid_batch_norm
from bnfl.nn.hybrid import HybridBatchNorm1d, HybridBatchNorm2d
from bnfl.nn.norms import (
    FederatedBatchNorm1d,
    FederatedBatchNorm2d,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
)

__all__ = ["BATCHED_LAYERS", "PER_CLIENT", "BatchedForm", "BatchedLayer", "register_batched"]


@dataclass(frozen=True)
class BatchedLayer:
    """What a batched form sees of one layer of ``K`` stacked clients, at one forward call.

    Attributes
    ----------
    module : nn.Module
        The layer (its options: ``eps``, ``num_groups``, ``training``...; its own tensors are
        not the clients').
    k : int
        Clients K; the input holds client ``k``'s rows at ``k*n .. (k+1)*n - 1``.
    params : mapping of str to Tensor
        The layer's own parameters by name (``"weight"``), stacked: shape ``(K, *shape)``.
    buffers : mapping of str to Tensor
        The layer's own buffers by name, stacked, ``(K, *shape)``; update them in place.
    counts : Tensor or None
        Real rows per client when the clients' batches were padded to ``n`` (padding rows repeat
        the client's first sample), else ``None``.
    """

    module: nn.Module
    k: int
    params: Mapping[str, Tensor]
    buffers: Mapping[str, Tensor]
    counts: Tensor | None


#: A batched form: ``form(layer, x) -> y`` with ``x`` and ``y`` of shape ``(K*n, C, ...)``.
BatchedForm = Callable[[BatchedLayer, Tensor], Tensor]
#: The form that runs the layer's own ``forward`` once per client on that client's real rows,
#: with that client's parameters and buffers (:func:`torch.func.functional_call`): any layer
#: whose forward updates its buffers in place runs so, equal to the sequential engine.
PER_CLIENT = "per-client"

_BATCHED: dict[type[nn.Module], BatchedForm | str] = {}
#: Layer class (exact type) -> its batched form (a :data:`BatchedForm` or :data:`PER_CLIENT`),
#: read-only; :func:`register_batched` adds entries. ``nn.Linear``, ``nn.Conv1d/2d/3d`` and
#: ``nn.BatchNorm1d/2d/3d`` (with FixBN's frozen forms) are the engine's own and not listed.
BATCHED_LAYERS: Mapping[type[nn.Module], BatchedForm | str] = MappingProxyType(_BATCHED)

L = TypeVar("L", bound=type)


def register_batched(*, form: BatchedForm | str = PER_CLIENT) -> Callable[[L], L]:
    """Class decorator: the batched engine runs layers of this exact class with ``form``.

    Parameters
    ----------
    form : callable or "per-client", default "per-client"
        ``form(layer, x) -> y`` (:class:`BatchedLayer`), one computation for the K clients;
        or :data:`PER_CLIENT`: the layer's own ``forward`` per client (a loop over K, so slower,
        but right for any layer that updates its buffers in place).

    Examples
    --------
    >>> from torch import nn
    >>> from bnfl.nn import register_batched
    >>> @register_batched()
    ... class MyNorm(nn.BatchNorm1d):
    ...     pass
    """
    if not (callable(form) or form == PER_CLIENT):
        raise ValueError(f"register_batched: form must be a function form(layer, x) or {PER_CLIENT!r}, got {form!r}")

    def add(cls: L) -> L:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"register_batched: {cls!r} is not an nn.Module subclass")
        _BATCHED[cls] = form
        return cls

    return add


def _group_norm_form(layer: BatchedLayer, x: Tensor) -> Tensor:  # per-sample statistics: padding needs no mask
    return group_norm(x, layer.k, layer.module.num_groups, layer.params.get("weight"), layer.params.get("bias"),
                      eps=layer.module.eps)


def _hybrid_form(layer: BatchedLayer, x: Tensor) -> Tensor:  # HBN eqs. 9-10: each client's alpha, global stats
    m, p, b = layer.module, layer.params, layer.buffers
    return hybrid_batch_norm(x, layer.k, p["alpha"], b["global_mean"], b["global_var"], p.get("weight"),
                             p.get("bias"), eps=m.eps, training=m.training, counts=layer.counts)


def _federated_form(layer: BatchedLayer, x: Tensor) -> Tensor:  # global stats; each client's cumulative moments
    m, p, b = layer.module, layer.params, layer.buffers
    running = (b["running_mean"], b["running_var"], b["num_batches_tracked"])
    return federated_batch_norm(x, layer.k, b["global_mean"], b["global_var"], p.get("weight"), p.get("bias"),
                                eps=m.eps, training=m.training, running=running, counts=layer.counts)


for _cls in (nn.GroupNorm, GroupNorm, LayerNorm, InstanceNorm):  # bnfl's LN and IN: GroupNorms, 1 and C groups
    register_batched(form=_group_norm_form)(_cls)
for _cls in (HybridBatchNorm1d, HybridBatchNorm2d):
    register_batched(form=_hybrid_form)(_cls)
for _cls in (FederatedBatchNorm1d, FederatedBatchNorm2d):
    register_batched(form=_federated_form)(_cls)
