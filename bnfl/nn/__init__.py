"""Normalisation layers for federated learning and tools to swap and inspect them.

- :class:`HybridBatchNorm1d`, :class:`HybridBatchNorm2d`: HBN (Chen et al., eqs. 9-10).
- :func:`freeze_bn_stats`, :func:`unfreeze_bn_stats`, :func:`frozen_bn_stats`: FixBN Stage II.
- :class:`FederatedBatchNorm1d/2d` (FBN), :class:`GroupNorm`, :class:`LayerNorm`,
  :class:`InstanceNorm`, :class:`FeatureNorm` (FedFN), :class:`NormIdentity`, :class:`WSConv2d`,
  :class:`ScaledWSConv2d` (FedWon).
- :func:`make_norm` (the single norm factory) and :func:`replace_norm` (swap by type).
- The layer registry: :data:`NORM_KINDS` (:mod:`bnfl.nn.norms`) (kind -> factory, read by the
  model builders and the Method table) and :data:`BATCHED_LAYERS` (:mod:`bnfl.nn.batched_layers`; layer class -> batched form,
  read by the batched engine; :func:`register_batched` adds one).
- :func:`bn_modules`, :func:`state_groups`, :func:`local_state_keys`: state by module type.
"""

from bnfl.nn.batched_layers import BATCHED_LAYERS, PER_CLIENT, BatchedLayer, register_batched
from bnfl.nn.frozen import (
    FrozenStatsBatchNorm1d,
    FrozenStatsBatchNorm2d,
    FrozenStatsBatchNorm3d,
    freeze_bn_stats,
    frozen_bn_stats,
    is_frozen,
    unfreeze_bn_stats,
)
from bnfl.nn.groups import STATE_GROUPS, bn_modules, local_state_keys, state_groups
from bnfl.nn.hybrid import HybridBatchNorm1d, HybridBatchNorm2d, hybrid_batch_norm
from bnfl.nn.norms import (
    NORM_KINDS,
    FeatureNorm,
    FederatedBatchNorm1d,
    FederatedBatchNorm2d,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    NormIdentity,
    ScaledWSConv2d,
    WSConv2d,
    conv_class,
    make_norm,
)
from bnfl.nn.replace import is_norm_layer, norm_signature, replace_norm

__all__ = [
    "BATCHED_LAYERS",
    "BatchedLayer",
    "NORM_KINDS",
    "PER_CLIENT",
    "STATE_GROUPS",
    "FederatedBatchNorm1d",
    "FederatedBatchNorm2d",
    "FeatureNorm",
    "FrozenStatsBatchNorm1d",
    "FrozenStatsBatchNorm2d",
    "FrozenStatsBatchNorm3d",
    "GroupNorm",
    "HybridBatchNorm1d",
    "HybridBatchNorm2d",
    "InstanceNorm",
    "LayerNorm",
    "NormIdentity",
    "WSConv2d",
    "ScaledWSConv2d",
    "conv_class",
    "bn_modules",
    "freeze_bn_stats",
    "frozen_bn_stats",
    "hybrid_batch_norm",
    "is_frozen",
    "is_norm_layer",
    "local_state_keys",
    "make_norm",
    "register_batched",
    "norm_signature",
    "replace_norm",
    "state_groups",
    "unfreeze_bn_stats",
]
