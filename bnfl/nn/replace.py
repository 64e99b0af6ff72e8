"""Swap every normalisation layer of a model for another kind, selected by type (never by name)."""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from bnfl.nn.hybrid import HybridBatchNorm1d
from bnfl.nn.norms import (
    NORM_KINDS,
    FeatureNorm,
    FederatedBatchNorm1d,
    NormIdentity,
    WSConv2d,
    _SampleNorm,
    make_norm,
)
from bnfl.registry import is_import_string

__all__ = ["is_norm_layer", "norm_signature", "replace_norm"]

_NORM_TYPES = (_BatchNorm, _InstanceNorm, nn.GroupNorm, nn.LayerNorm, FeatureNorm, NormIdentity)


def is_norm_layer(module: nn.Module) -> bool:
    """Whether ``module`` is a normalisation layer that :func:`replace_norm` swaps.

    By type: every ``_BatchNorm`` (BN, HBN, FBN, frozen BN, SyncBN), ``_InstanceNorm``,
    ``nn.GroupNorm`` (and bnfl's GN/LN/IN), ``nn.LayerNorm``, :class:`~bnfl.nn.FeatureNorm` and
    :class:`~bnfl.nn.NormIdentity`. A plain ``nn.Identity`` is not (it does not know its channels).
    """
    return isinstance(module, _NORM_TYPES)


def norm_signature(module: nn.Module) -> tuple[int, int]:
    """``(num_features, dim)`` of a normalisation layer; ``dim`` is 1 (linear) or 2 (conv).

    Foreign ``nn.GroupNorm`` and ``nn.SyncBatchNorm`` layers do not record where they sit; they
    are taken as conv features (``dim=2``).
    """
    if isinstance(module, (_SampleNorm, FeatureNorm, NormIdentity)):
        return module.num_features, module.dim
    if isinstance(module, (nn.BatchNorm3d, nn.InstanceNorm3d)):
        raise ValueError(f"3-d normalisation ({type(module).__name__}) is not supported")
    if isinstance(module, (_BatchNorm, _InstanceNorm)):
        one_d = (nn.BatchNorm1d, nn.InstanceNorm1d, HybridBatchNorm1d, FederatedBatchNorm1d)
        return module.num_features, 1 if isinstance(module, one_d) else 2
    if isinstance(module, nn.GroupNorm):
        return module.num_channels, 2
    if isinstance(module, nn.LayerNorm):
        shape = module.normalized_shape
        if len(shape) == 1:
            return shape[0], 1
        if len(shape) == 3:
            return shape[0], 2
        raise ValueError(f"cannot tell the channels of nn.LayerNorm{tuple(shape)}")
    raise TypeError(f"{type(module).__name__} is not a normalisation layer")


def replace_norm(
    model: nn.Module,
    kind: str,
    *,
    groups: int = 2,
    eps: float = 1e-5,
    momentum: float = 0.1,
    affine: bool = True,
) -> nn.Module:
    """Replace every normalisation layer of ``model`` by a fresh layer of ``kind``, in place.

    Layers are selected by type (:func:`is_norm_layer`), never by name. Each new layer has the
    same channel count and the same kind of input (linear or conv) as the one it replaces, so
    shapes are preserved; it is freshly initialised (:math:`\\gamma=1, \\beta=0`, default
    statistics) on the old layer's device and dtype. For ``kind="gn_ws"`` every ``nn.Conv2d`` is
    also retyped in place to :class:`~bnfl.nn.WSConv2d` (same weights); for any other kind
    ``WSConv2d`` layers become ``nn.Conv2d`` again.

    Parameters
    ----------
    model : nn.Module
        Changed in place (deep-copy it first to keep the original).
    kind : str
        One of :data:`bnfl.nn.NORM_KINDS`.
    groups, eps, momentum, affine
        As in :func:`bnfl.nn.make_norm`.

    Returns
    -------
    nn.Module
        ``model`` itself.
    """
    if not isinstance(kind, str) or not (NORM_KINDS.knows(kind) or is_import_string(kind)):
        raise ValueError(f"unknown norm kind {kind!r}; valid kinds: {', '.join(NORM_KINDS)}")
    kind = kind if is_import_string(kind) else kind.lower()
    # Build every replacement first, so a bad option (e.g. groups not dividing C) changes nothing.
    plan = []
    for parent in model.modules():
        for child_name, child in parent.named_children():
            if is_norm_layer(child):
                c, dim = norm_signature(child)
                new = make_norm(kind, c, dim=dim, groups=groups, eps=eps, momentum=momentum, affine=affine)
                ref = next(iter(list(child.parameters()) + list(child.buffers())), None)
                if ref is not None:
                    new = new.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)
                new.train(child.training)
                plan.append((parent, child_name, new))
    if is_norm_layer(model):
        raise ValueError("model is itself a normalisation layer; use bnfl.nn.make_norm instead")
    for parent, child_name, new in plan:
        setattr(parent, child_name, new)
    for m in model.modules():
        if kind == "gn_ws" and type(m) is nn.Conv2d:
            m.__class__ = WSConv2d
        elif kind != "gn_ws" and type(m) is WSConv2d:
            m.__class__ = nn.Conv2d
    return model
