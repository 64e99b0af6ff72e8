r"""Normalisation layers other than HBN, and the single norm factory :func:`make_norm`.

Every layer here knows its channel count (``num_features``) and whether it sits on linear
features (``dim=1``: input (N, C) or (N, C, L)) or on conv features (``dim=2``: (N, C, H, W)), so
:func:`bnfl.nn.replace_norm` can swap any of them for any other by type.

Layers
------
- ``nn.BatchNorm1d/2d`` (kind ``"bn"``; ``"fixbn"`` is the same layer: FixBN is standard BN until
  :func:`bnfl.nn.freeze_bn_stats` freezes it).
- :class:`FederatedBatchNorm1d/2d` (``"fbn"``): FBN as HBN's experiments run it (see its
  docstring).
- :class:`GroupNorm` (``"gn"``, groups configurable, 2 in FixBN/HBN), :class:`LayerNorm`
  (``"ln"``), :class:`InstanceNorm` (``"in"``): per-sample normalisations with a per-channel
  affine (GN with 1 group, GN with C groups).
- :class:`FeatureNorm` (``"fedfn"``): per-sample L2 normalisation of the features.
- :class:`NormIdentity` (``"none"``/``"identity"``): an identity that remembers the channels.
- :class:`WSConv2d`: convolution with weight standardisation, for ``"gn_ws"`` (GN + WS), and
  FedWon's :class:`ScaledWSConv2d` (``"ws"``), in :mod:`bnfl.nn.ws`.

The layer registry
------------------
This module is the one place a normalisation kind is registered, and every reader asks it:
:data:`NORM_KINDS`: kind -> factory. The model builders (:mod:`bnfl.models`, through
:func:`make_norm`) build a method's layers from it, and the Method table
(:data:`bnfl.methods.METHODS`) refuses a row whose ``norm`` is not a kind of it (or an import
string naming a factory). How the batched engine runs each layer class is the registry's batched
side, :mod:`bnfl.nn.batched_layers`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.nn.frozen import FrozenStatsBatchNorm1d, FrozenStatsBatchNorm2d
from bnfl.nn.hybrid import (
    GlobalStatsMixin,
    HybridBatchNorm1d,
    HybridBatchNorm2d,
    _Input1d,
    _Input2d,
)
from bnfl.nn.ws import RELU_GAIN, ScaledWSConv2d, WSConv2d, conv_class
from bnfl.registry import Registry, is_import_string

__all__ = [
    "NORM_KINDS",
    "FederatedBatchNorm1d",
    "FederatedBatchNorm2d",
    "GroupNorm",
    "LayerNorm",
    "InstanceNorm",
    "FeatureNorm",
    "NormIdentity",
    "WSConv2d",
    "ScaledWSConv2d",
    "RELU_GAIN",
    "conv_class",
    "make_norm",
]

def _as_factory(spec: str, obj: Any) -> Any:
    if not callable(obj):
        raise ValueError(f"norm kind {spec!r} is {obj!r}, not a function or class that builds a layer")
    return obj


#: Every kind :func:`make_norm` and :func:`bnfl.nn.replace_norm` accept (a
#: :class:`~bnfl.registry.Registry` of layer factories ``f(num_features, *, dim, groups, eps,
#: momentum, affine) -> nn.Module``, registered with :func:`make_norm` below; a factory also
#: runs by import string, ``"mypkg.norms:my_norm"``). Iterating gives the kinds in this order:
#: bn, fixbn, frozen_bn, static_bn, hbn, fbn, gn, gn_ws, ln, in, fedfn, ws, none, identity.
NORM_KINDS: Registry[Any] = Registry(
    "norm kind", listing="valid kinds", lower=True, convert=_as_factory,
    accepts=lambda o: isinstance(o, type) and issubclass(o, nn.Module),
    expects="an nn.Module subclass or a function marked @plugin('norm kind')")


def _check_features(num_features: Any) -> int:
    if not isinstance(num_features, int) or isinstance(num_features, bool) or num_features <= 0:
        raise ValueError(f"num_features must be a positive int, got {num_features!r}")
    return num_features


def _check_eps(eps: Any) -> float:
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    return float(eps)


def _check_dim(dim: Any) -> int:
    if dim not in (1, 2):
        raise ValueError(
            f"dim must be 1 (linear features (N, C) or (N, C, L)) or 2 (conv features (N, C, H, W)), got {dim!r}"
        )
    return int(dim)


# --------------------------------------------------------------------------------------------
# FBN
# --------------------------------------------------------------------------------------------
class _FederatedBatchNorm(GlobalStatsMixin, _BatchNorm):
    r"""FBN (Guerraoui et al. 2024, arXiv:2405.14670) as HBN's experiments run it.

    Source: the FBN paper's algorithm text was not available to us. HBN (Sec. 2) describes FBN
    as "normalise batch data using running average", and HBN's reference code
    (github.com/Hongyao-Chen/HybridBN, ``FedBaseline/models/FBN/FBN.py``), which produced HBN's
    FBN numbers, does the following, implemented here:

    - training: normalise with the *global* statistics :math:`\mu_g, \sigma_g^2` (buffers set by
      the server with :meth:`set_global_stats`, constants: no gradient through batch statistics)
      while accumulating, without gradient, the equal-weight cumulative average of the batch mean
      and *biased* batch variance over the local steps in ``running_mean``/``running_var``
      (``num_batches_tracked`` counts the batches; :meth:`reset_running_stats` restarts it);
    - evaluation: the global statistics;
    - server (not this layer's job): pooled mean, pooled variance with the between-client term
      divided by N-1 (HBN eq. 8) over the clients' ``running_*``, then an EMA with weight 0.1 on
      the new value (HBN eq. 11 with lambda = 0.1), written back with :meth:`set_global_stats`.

    In that code (``FBN/server.py``, ``FBN_main.py``) the pooling weights are the clients' data
    sizes, the batch count is reset every round, and the EMA blends with ``Sever.w_glob``, which
    is set once to the *initial* model and never updated: every round's global statistics are
    0.1 * pooled + 0.9 * (0, 1), most likely a bug. How faithful all of this is to Guerraoui et
    al.'s own algorithm is unverified.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _check_features(num_features)
        _check_eps(eps)
        factory = {"device": device, "dtype": dtype}
        super().__init__(
            num_features, eps=eps, momentum=None, affine=affine, track_running_stats=True, **factory
        )
        self.register_buffer("global_mean", torch.zeros(num_features, **factory))
        self.register_buffer("global_var", torch.ones(num_features, **factory))

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        if x.shape[1] != self.num_features:
            raise ValueError(f"expected {self.num_features} channels on dim 1, got input of shape {tuple(x.shape)}")
        if self.training:
            dims = [d for d in range(x.dim()) if d != 1]
            with torch.no_grad():
                k = self.num_batches_tracked.to(x.dtype)
                mean_b = x.mean(dim=dims)  # (C,)
                var_b = x.var(dim=dims, unbiased=False)  # (C,) biased
                # the cumulative average, bnfl.functional.ema with momentum 1/(k+1), kept in this
                # operation order so HBN's FBN numbers reproduce bit for bit
                self.running_mean.mul_(k / (k + 1)).add_(mean_b / (k + 1))
                self.running_var.mul_(k / (k + 1)).add_(var_b / (k + 1))
                self.num_batches_tracked.add_(1)
        return F.batch_norm(
            x, self.global_mean, self.global_var, self.weight, self.bias,
            training=False, momentum=0.0, eps=self.eps,
        )


class FederatedBatchNorm1d(_Input1d, _FederatedBatchNorm):
    """FBN for (N, C) or (N, C, L) inputs; see :class:`_FederatedBatchNorm`."""


class FederatedBatchNorm2d(_Input2d, _FederatedBatchNorm):
    """FBN for (N, C, H, W) inputs; see :class:`_FederatedBatchNorm`."""


# --------------------------------------------------------------------------------------------
# Per-sample normalisations (GN, LN, IN)
# --------------------------------------------------------------------------------------------
class _SampleNorm(nn.GroupNorm):
    """GroupNorm-based per-sample normalisation that remembers ``num_features`` and ``dim``."""

    def __init__(
        self, num_features: int, num_groups: int, *, eps: float, affine: bool, dim: int,
        device: torch.device | str | None = None, dtype: torch.dtype | None = None,
    ) -> None:
        _check_features(num_features)
        _check_eps(eps)
        _check_dim(dim)
        if not isinstance(num_groups, int) or num_groups <= 0 or num_features % num_groups:
            raise ValueError(
                f"groups={num_groups!r} must be a positive int dividing num_features={num_features}; "
                f"choose a divisor of {num_features}"
            )
        super().__init__(num_groups, num_features, eps=eps, affine=affine, device=device, dtype=dtype)
        self.num_features = num_features
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(
                f"{type(self).__name__} expects (N, {self.num_features}, ...) input, got {tuple(x.shape)}"
            )
        return super().forward(x)


class GroupNorm(_SampleNorm):
    r"""Group Normalisation (Wu & He 2018): per sample, mean/variance over each group of
    ``num_features // groups`` channels and all positions; per-channel :math:`\gamma, \beta`.

    Parameters
    ----------
    num_features : int
    groups : int, default 2
        Number of groups (2 in FixBN and HBN); must divide ``num_features``.
    eps : float, default 1e-5
    affine : bool, default True
    dim : {1, 2}, default 2
        1 for linear features, 2 for conv features (used when replacing the layer).
    """

    def __init__(
        self, num_features: int, *, groups: int = 2, eps: float = 1e-5, affine: bool = True,
        dim: int = 2, device: torch.device | str | None = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, groups, eps=eps, affine=affine, dim=dim, device=device, dtype=dtype)


class LayerNorm(_SampleNorm):
    r"""Layer Normalisation (Ba et al. 2016): per sample over all channels and positions, with a
    per-channel :math:`\gamma, \beta`. For (N, C) input it equals ``nn.LayerNorm(C)``; for conv
    features it is GN with one group (the usual LN for CNNs, independent of the image size).
    """

    def __init__(
        self, num_features: int, *, eps: float = 1e-5, affine: bool = True, dim: int = 2,
        device: torch.device | str | None = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, 1, eps=eps, affine=affine, dim=dim, device=device, dtype=dtype)


class InstanceNorm(_SampleNorm):
    r"""Instance Normalisation (Ulyanov et al. 2016) for conv features: per sample and channel
    over the spatial positions, with a per-channel :math:`\gamma, \beta` (GN with C groups; equals
    ``nn.InstanceNorm2d(C, affine=True)``). Only ``dim=2``: on (N, C) features every instance has
    one value and the output would be :math:`\beta` alone.
    """

    def __init__(
        self, num_features: int, *, eps: float = 1e-5, affine: bool = True, dim: int = 2,
        device: torch.device | str | None = None, dtype: torch.dtype | None = None,
    ) -> None:
        if dim != 2:
            raise ValueError(
                "instance norm needs spatial positions (dim=2); on linear (N, C) features it would "
                "output beta only. Use 'ln' or 'gn' for linear layers."
            )
        super().__init__(
            num_features, num_features, eps=eps, affine=affine, dim=dim, device=device, dtype=dtype
        )


# --------------------------------------------------------------------------------------------
# FedFN, identity, weight standardisation
# --------------------------------------------------------------------------------------------
class FeatureNorm(nn.Module):
    r"""Feature normalisation (FedFN, Kim et al. 2023; FN of Zhang et al. 2024):

    .. math:: y = c\,\frac{x}{\max(\lVert x\rVert_2, \epsilon)}, \qquad c = \sqrt{D} \text{ by default}

    per sample, the L2 norm taken over all D = C*H*W (or C) features of the sample. No
    parameters, no statistics.

    Source: the FedFN paper's text was not available to us. HBN (App. B.1) applies FedFN as
    "normalise the input before the fully connected layer according to (Zhang et al., 2024)", and
    HBN's reference code (``Nets.SimpleCNN(fn=True)``) computes
    ``F.normalize(features, p=2, dim=1) * sqrt(features.shape[1])``: unit L2 norm rescaled by
    :math:`\sqrt{D}`, which is the default here (``scale=None``); ``scale=1.0`` gives unit-norm
    features. HBN's Simple-CNN places one such layer before the head
    (``bnfl.models.build("simple_cnn_fedfn")``); through :func:`make_norm` it replaces a
    normalisation layer in place.
    """

    def __init__(
        self, num_features: int, *, scale: float | None = None, eps: float = 1e-12, dim: int = 2
    ) -> None:
        super().__init__()
        self.num_features = _check_features(num_features)
        self.eps = _check_eps(eps)
        self.dim = _check_dim(dim)
        if scale is not None and not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be a finite number > 0 or None (sqrt(D)), got {scale!r}")
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"FeatureNorm expects (N, {self.num_features}, ...) input, got {tuple(x.shape)}")
        flat = x.flatten(1)  # (N, C, *) -> (N, D)
        c = math.sqrt(flat.shape[1]) if self.scale is None else self.scale
        norm = flat.norm(dim=1).clamp_min(self.eps)  # (N,)
        return x * (c / norm).view((-1,) + (1,) * (x.dim() - 1))

    def extra_repr(self) -> str:
        return f"{self.num_features}, scale={self.scale or 'sqrt(D)'}, dim={self.dim}"


class NormIdentity(nn.Identity):
    """Identity in place of a normalisation layer (kind ``"none"``); remembers the channels so
    the layer can be replaced again."""

    def __init__(self, num_features: int, *, dim: int = 2) -> None:
        super().__init__()
        self.num_features = _check_features(num_features)
        self.dim = _check_dim(dim)

    def extra_repr(self) -> str:
        return f"{self.num_features}, dim={self.dim}"


# --------------------------------------------------------------------------------------------
# The factory
# --------------------------------------------------------------------------------------------
def make_norm(
    kind: str,
    num_features: int,
    *,
    dim: int = 2,
    groups: int = 2,
    eps: float = 1e-5,
    momentum: float = 0.1,
    affine: bool = True,
) -> nn.Module:
    """Build one normalisation layer.

    Parameters
    ----------
    kind : str
        One of :data:`NORM_KINDS`: ``"bn"`` (``nn.BatchNorm1d/2d``), ``"fixbn"`` (same as
        ``"bn"``; freeze later with :func:`~bnfl.nn.freeze_bn_stats`), ``"frozen_bn"`` (BN whose
        statistics are already frozen), ``"static_bn"`` (HeteroFL's static BN, Diao et al. 2020:
        no running statistics, normalises with the current batch in training and test), ``"hbn"`` (:class:`~bnfl.nn.HybridBatchNorm2d`),
        ``"fbn"``, ``"gn"``, ``"gn_ws"`` (the GN part; model builders also standardise the conv
        weights), ``"ln"``, ``"in"`` (conv features only), ``"fedfn"``, ``"none"``/``"identity"``.
    num_features : int
        Channels C.
    dim : {1, 2}, default 2
        1 for linear features, 2 for conv features.
    groups : int, default 2
        Groups for GN (2 in FixBN and HBN); must divide ``num_features``.
    eps : float, default 1e-5
        Must be > 0.
    momentum : float, default 0.1
        PyTorch-convention EMA weight on the new batch (BN kinds); ignored by the other kinds.
    affine : bool, default True
        Learn per-channel :math:`\\gamma, \\beta` (ignored by ``"fedfn"`` and ``"none"``).

    Returns
    -------
    nn.Module
    """
    if not isinstance(kind, str) or not (NORM_KINDS.knows(kind) or is_import_string(kind)):
        raise ValueError(f"unknown norm kind {kind!r}; valid kinds: {', '.join(NORM_KINDS)}")
    factory = NORM_KINDS.lookup(kind)
    _check_features(num_features)
    _check_dim(dim)
    _check_eps(eps)
    return factory(num_features, dim=dim, groups=groups, eps=eps, momentum=momentum, affine=affine)


def _bn_momentum(momentum: float) -> float:
    if not (0.0 <= momentum <= 1.0):
        raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
    return momentum


@NORM_KINDS.register("fixbn")  # the same layer: FixBN is standard BN until freeze_bn_stats freezes it
@NORM_KINDS.register("bn")
def _bn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return (nn.BatchNorm1d, nn.BatchNorm2d)[dim - 1](c, eps=eps, momentum=_bn_momentum(momentum), affine=affine)


@NORM_KINDS.register("frozen_bn")
def _frozen_bn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    cls = (FrozenStatsBatchNorm1d, FrozenStatsBatchNorm2d)[dim - 1]
    return cls(c, eps=eps, momentum=_bn_momentum(momentum), affine=affine)


@NORM_KINDS.register("static_bn")
def _static_bn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    # HeteroFL's static BN: batch statistics in training and test, none kept
    return (nn.BatchNorm1d, nn.BatchNorm2d)[dim - 1](c, eps=eps, affine=affine, track_running_stats=False)


@NORM_KINDS.register("hbn")
def _hbn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return (HybridBatchNorm1d, HybridBatchNorm2d)[dim - 1](c, eps=eps, affine=affine)


@NORM_KINDS.register("fbn")
def _fbn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return (FederatedBatchNorm1d, FederatedBatchNorm2d)[dim - 1](c, eps=eps, affine=affine)


@NORM_KINDS.register("gn_ws")  # the GN part; model builders also standardise the conv weights
@NORM_KINDS.register("gn")
def _gn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return GroupNorm(c, groups=groups, eps=eps, affine=affine, dim=dim)


@NORM_KINDS.register("ln")
def _ln(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return LayerNorm(c, eps=eps, affine=affine, dim=dim)


@NORM_KINDS.register("in")
def _in(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return InstanceNorm(c, eps=eps, affine=affine, dim=dim)


@NORM_KINDS.register("fedfn")
def _fedfn(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return FeatureNorm(c, dim=dim)


@NORM_KINDS.register("identity")
@NORM_KINDS.register("none")
@NORM_KINDS.register("ws")  # the convolutions standardise (FedWon)
def _identity(c: int, *, dim: int, groups: int, eps: float, momentum: float, affine: bool) -> nn.Module:
    return NormIdentity(c, dim=dim)
