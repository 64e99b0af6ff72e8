"""State groups for the engine: :func:`bnfl.nn.state_groups` plus a ``bn_count`` group.

Groups (by module type, never by name): ``bn_affine`` (gamma/beta of BN-type layers),
``bn_stats`` (running mean/variance, HBN's global statistics), ``local`` (parameters a layer
declares client-local, e.g. HBN's alpha), ``other`` (everything else), and ``bn_count``:
``num_batches_tracked``, split off ``bn_stats`` because it is never sent nor averaged
(FedTAN's volumes exclude it; CATALOG §0.1).
"""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.nn import bn_modules
from bnfl.nn import state_groups as _nn_state_groups

__all__ = ["GROUPS", "keys_in", "state_groups", "bn_modules"]

GROUPS = ("bn_affine", "bn_stats", "local", "other", "bn_count")


def state_groups(model: nn.Module) -> dict[str, set[str]]:
    """Partition the keys of ``model.state_dict()`` into :data:`GROUPS` by module type."""
    groups = {g: set(v) for g, v in _nn_state_groups(model).items()}
    counters = set()
    for prefix, m in model.named_modules():
        if isinstance(m, _BatchNorm) and getattr(m, "num_batches_tracked", None) is not None:
            counters.add(f"{prefix}.num_batches_tracked" if prefix else "num_batches_tracked")
    for g in groups:
        groups[g] -= counters
    groups["bn_count"] = counters & set(model.state_dict().keys())
    for g in GROUPS:
        groups.setdefault(g, set())
    return groups


def keys_in(model: nn.Module, *groups: str) -> list[str]:
    """The ``state_dict`` keys of ``model`` in ``groups`` (names of :data:`GROUPS`), in
    ``state_dict`` order: what to keep on the client or send, selected by layer type.

    FedBN keeps ``keys_in(model, "bn_affine", "bn_stats", "bn_count")`` local and averages the
    rest; FedAvg+BN sends everything but ``keys_in(model, "bn_count")``.
    """
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        raise ValueError(f"keys_in: unknown group(s) {unknown or '(none given)'}; valid: {', '.join(GROUPS)}")
    found = state_groups(model)
    chosen = set().union(*(found[g] for g in groups))
    return [k for k in model.state_dict() if k in chosen]
