"""Every client-server exchange of a simulation goes through one :class:`Channel`.

The channel does the arithmetic of the exchange (copying a state to clients, collecting
their uploads, the weighted all-reduce) **and** its accounting, so the byte and round
counters are exact by construction: bytes = ``numel * element_size`` of what crosses the
wire; a *communication round* is one upload-then-download exchange.

Conventions (FedTAN Table 3, CATALOG §5.1):

* a :meth:`Channel.broadcast` is a multicast: its payload is counted **once** in
  ``bytes_down`` (the per-recipient total is kept in ``bytes_down_unicast``);
* a :meth:`Channel.gather` counts every client's upload in ``bytes_up`` and closes a round;
* an :meth:`Channel.allreduce` (upload, weighted sum on the server, multicast of the result)
  is one round: ``K`` uploads + one download of the same size.

So one FedAvg iteration with ``K`` clients moves ``P * (K + 1) * 4`` bytes of float32 in one
round, and one FedTAN iteration with ``L`` BN layers adds ``2L + L`` all-reduces (means, then
variances around the global mean, layer by layer forward; stat-gradients layer by layer
backward), i.e. ``3L + 1`` rounds.

Mapping onto ``torch.distributed`` (clients as ranks 1..K, server as rank 0):
``broadcast`` -> ``dist.broadcast(t, src=0)`` per tensor; ``gather`` -> ``dist.gather`` to
rank 0; ``allreduce(tensors, weights)`` -> each rank scales its tensor by its weight
``p_i`` and calls ``dist.all_reduce(op=SUM)``; its backward (used by FedTAN's Algorithm 3)
is again an all-reduce of the incoming gradients, which is how ``nn.SyncBatchNorm``
synchronises ``sum_dy``/``sum_dy_xmu``. The algorithm code only ever calls these three
methods, so replacing this class by a distributed one changes no algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["Channel", "Exchange", "state_bytes", "weighted_sum"]


def state_bytes(state: Mapping[str, Tensor] | Sequence[Tensor]) -> int:
    """Bytes of a payload: ``sum(numel * element_size)`` over its tensors."""
    values = state.values() if isinstance(state, Mapping) else state
    return int(sum(t.numel() * t.element_size() for t in values))


def weighted_sum(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float]) -> dict[str, Tensor]:
    r"""Pure aggregation: :math:`\sum_i p_i\, s_i` key by key (Flower's ``aggregate``).

    Floating tensors are averaged in their own dtype; integer tensors (e.g. counters) are
    averaged in float64 and rounded back.
    """
    if len(states) == 0:
        raise ValueError("weighted_sum needs at least one client state")
    if len(states) != len(weights):
        raise ValueError(f"{len(states)} states but {len(weights)} weights")
    keys = list(states[0].keys())
    for i, s in enumerate(states):
        if list(s.keys()) != keys:
            raise ValueError(f"client state {i} has different keys from client state 0")
    out: dict[str, Tensor] = {}
    floats = [k for k in keys if states[0][k].is_floating_point()]
    if floats:  # acc <- acc + w_i * s_i, client after client: one _foreach op over the keys per step
        acc = [torch.zeros_like(states[0][k]) for k in floats]
        for s, w in zip(states, weights, strict=False):
            torch._foreach_add_(acc, torch._foreach_mul([s[k] for k in floats], float(w)))
        out.update(zip(floats, acc, strict=True))
    for k in keys:
        ref = states[0][k]
        if not ref.is_floating_point():
            acc64 = sum(float(w) * s[k].double() for s, w in zip(states, weights, strict=False))
            out[k] = torch.as_tensor(acc64).round().to(ref.dtype)
    return {k: out[k] for k in keys}


@dataclass
class Exchange:
    """One logged exchange: ``kind`` (broadcast/gather/allreduce/allreduce-backward), tag, bytes."""

    kind: str
    tag: str
    bytes_up: int
    bytes_down: int
    clients: int
    keys: tuple[str, ...] = ()


@dataclass
class Channel:
    """Simulated server <-> clients link with exact accounting.

    Parameters
    ----------
    log : bool, default True
        Keep a per-exchange log (:attr:`exchanges`) of what crossed the wire; tests inspect
        it to prove that, e.g., FedBN never sends BN state.
    """

    log: bool = True
    bytes_up: int = 0
    bytes_down: int = 0
    bytes_down_unicast: int = 0
    rounds: int = 0
    exchanges: list[Exchange] = field(default_factory=list)

    # -- counters -------------------------------------------------------------------
    @property
    def bytes_total(self) -> int:
        """Uplink plus (multicast) downlink bytes."""
        return self.bytes_up + self.bytes_down

    def counters(self) -> dict[str, int]:
        """The counters as a plain dict (for history rows and checkpoints)."""
        return {
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_down_unicast": self.bytes_down_unicast,
            "rounds": self.rounds,
        }

    def load_counters(self, c: Mapping[str, int]) -> None:
        """Restore counters saved by :meth:`counters` (checkpoint resume)."""
        self.bytes_up = int(c["bytes_up"])
        self.bytes_down = int(c["bytes_down"])
        self.bytes_down_unicast = int(c["bytes_down_unicast"])
        self.rounds = int(c["rounds"])

    def _record(self, kind: str, tag: str, up: int, down: int, clients: int, keys=()) -> None:
        self.bytes_up += up
        self.bytes_down += down
        self.bytes_down_unicast += down * (clients if kind != "gather" else 0)
        if self.log:
            self.exchanges.append(Exchange(kind, tag, up, down, clients, tuple(keys)))

    def count(self, kind: str, tag: str, *, up: int, down: int, clients: int, closes_round: bool = False) -> None:
        """Account an exchange that a backend carried out itself (e.g. a ``torch.distributed``
        all-reduce of the coupled first step): ``up``/``down`` bytes, ``clients`` taking part;
        ``closes_round`` counts one communication round, as :meth:`gather` and :meth:`allreduce` do."""
        if kind not in ("broadcast", "gather", "allreduce"):
            raise ValueError(f"kind must be broadcast, gather or allreduce, got {kind!r}")
        self._record(kind, tag, up, down, clients)
        if closes_round:
            self.rounds += 1

    # -- the three primitives ---------------------------------------------------------
    def broadcast(self, state: Mapping[str, Tensor], num_clients: int, *, tag: str = "model") -> list[dict[str, Tensor]]:
        """Server -> ``num_clients`` clients: each receives its own copy of ``state``.

        Counted once (multicast) in ``bytes_down``; does not close a round (the round closes
        with the clients' upload).
        """
        if num_clients < 1:
            raise ValueError("broadcast needs at least one receiving client")
        self._record("broadcast", tag, 0, state_bytes(state), num_clients, state.keys())
        return [{k: v.detach().clone() for k, v in state.items()} for _ in range(num_clients)]

    def gather(self, states: Sequence[Mapping[str, Tensor]], *, tag: str = "model") -> list[dict[str, Tensor]]:
        """Clients -> server: every upload is counted; closes one communication round."""
        if len(states) == 0:
            raise ValueError("gather needs at least one client upload")
        up = sum(state_bytes(s) for s in states)
        self._record("gather", tag, up, 0, len(states), states[0].keys())
        self.rounds += 1
        return [{k: v.detach().clone() for k, v in s.items()} for s in states]

    def allreduce(self, tensors: Sequence[Tensor] | Tensor, weights: Sequence[float] | Tensor, *, tag: str = "stats") -> Tensor:
        r"""Weighted all-reduce :math:`\bar t = \sum_i p_i t_i`, returned to every client.

        ``tensors`` is one tensor per client, or their stack of shape (K, ...).
        Differentiable: autograd flows back to every client's tensor, exactly as the
        backward of a distributed all-reduce (an all-reduce of the gradients).
        """
        if len(tensors) == 0:
            raise ValueError("allreduce needs at least one client tensor")
        stacked = tensors if isinstance(tensors, Tensor) else torch.stack(list(tensors))  # (K, ...)
        w = torch.as_tensor(weights, dtype=stacked.dtype, device=stacked.device)
        if w.numel() != len(tensors):
            raise ValueError(f"{len(tensors)} tensors but {w.numel()} weights")
        out = torch.tensordot(w, stacked, dims=1)
        size = stacked[0].numel() * stacked.element_size()
        self._record("allreduce", tag, size * len(tensors), size, len(tensors))
        self.rounds += 1
        return out
