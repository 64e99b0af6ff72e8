"""The closed-form communication count of :func:`bnfl.fl.comm_volume`, from a method's scheme and
local state (FedTAN Tables 3-5, CATALOG §5.1-5.3); :mod:`bnfl.train.accounting` resolves method ids."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from torch import nn

from bnfl.fl.state import bn_modules, state_groups

__all__ = ["GIB", "MIB", "CommVolume", "closed_form_volume"]

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class CommVolume:
    """Bytes and communication rounds of a run (or one iteration).

    Attributes
    ----------
    bytes : int
    rounds : int
    model_elements : int
        Elements of the model payload (parameters + statistics sent each iteration).
    bn_layers : int
        L, the number of BN layers.
    """

    bytes: int
    rounds: int
    model_elements: int
    bn_layers: int

    @property
    def mib(self) -> float:
        """Bytes / 2**20 (FedTAN Table 3's "MB")."""
        return self.bytes / MIB

    @property
    def gib(self) -> float:
        """Bytes / 2**30 (FedTAN Table 4's "GB")."""
        return self.bytes / GIB

    @property
    def gibit(self) -> float:
        """Bits / 2**30 (FedTAN Table 5's "GB")."""
        return self.bytes * 8 / GIB


def closed_form_volume(model: nn.Module, num_clients: int, *, method_id: str, comm: str | None,
                       local_state: Collection[str], iterations: int = 1, switch: int = 0,
                       count_bn_stats: bool = True, element_size: int = 4) -> CommVolume:
    """:func:`bnfl.fl.comm_volume` of a method given by its id, ``comm`` scheme
    (:data:`bnfl.methods.COMM_SCHEMES`) and ``local_state`` groups."""
    if comm is None:
        raise ValueError(f"method {method_id!r} has no closed-form communication volume (it uploads more than its "
                         f"model state); run a round and read Simulation.channel instead")
    if num_clients < 1 or iterations < 0 or switch < 0:
        raise ValueError("num_clients must be >= 1, iterations and switch >= 0")
    groups = state_groups(model)
    sd = model.state_dict()
    skip = set(groups["bn_count"]) | (set() if count_bn_stats else set(groups["bn_stats"]))
    skip |= set().union(*(groups[g] for g in local_state))
    elements = sum(t.numel() for k, t in sd.items() if k not in skip)
    bns = bn_modules(model)
    stat_elements = sum(2 * b.num_features for _, b in bns)  # means + variances (= stat-gradients)
    n_layers = len(bns)
    factor = (num_clients + 1) * element_size
    base = elements * factor
    if comm == "none":
        return CommVolume(bytes=0, rounds=0, model_elements=elements, bn_layers=n_layers)
    per_avg, rounds_avg = base, 1
    m_tan, per_tan, rounds_tan = 0, base, 1
    if comm == "fedtan":
        per_tan, m_tan, rounds_tan = base + 2 * stat_elements * factor, iterations, 3 * n_layers + 1
    elif comm == "stats":
        per_tan, m_tan, rounds_tan = base + stat_elements * factor, iterations, 2 * n_layers + 1
    elif comm == "fedtan2":
        per_tan, m_tan, rounds_tan = base + 2 * stat_elements * factor, min(switch, iterations), 3 * n_layers + 1
    rest = iterations - m_tan
    return CommVolume(bytes=m_tan * per_tan + rest * per_avg, rounds=m_tan * rounds_tan + rest * rounds_avg,
                      model_elements=elements, bn_layers=n_layers)
