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

from bnfl.fl import fast_path

__all__ = ["Channel", "Exchange", "state_bytes", "weighted_sum"]


def state_bytes(state: Mapping[str, Tensor] | Sequence[Tensor]) -> int:
    """Bytes of a payload: ``sum(numel * element_size)`` over its tensors."""
    values = state.values() if isinstance(state, Mapping) else state
    return int(sum(t.nbytes for t in values))


def weighted_sum(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float]) -> dict[str, Tensor]:
    r"""Pure aggregation: :math:`\sum_i p_i\, s_i` key by key (Flower's ``aggregate``).

    float32 and float64 tensors are averaged in their own dtype; integer tensors (e.g.
    counters) and other floating dtypes in float64, rounded back.

    One stacked reduction per key: the clients' tensors stacked to ``(K, *shape)``, multiplied
    by the weights in one op and summed over the client dimension with ``index_add_`` into a
    zero tensor, which adds the rows one after the other on the CPU. So the result is bitwise
    the client-after-client sum :math:`((0 + p_1 s_1) + p_2 s_2) + \dots` that this function
    computed before with one ``_foreach`` op per client (``tests/test_fl_aggregation.py``
    compares the two), with a number of ops that does not grow with ``K``. On other devices
    the rows are summed by ``sum(0)`` (``index_add_`` adds atomically there, in any order).
    """
    if len(states) == 0:
        raise ValueError("weighted_sum needs at least one client state")
    if len(states) != len(weights):
        raise ValueError(f"{len(states)} states but {len(weights)} weights")
    keys = list(states[0].keys())
    for i, s in enumerate(states):
        if list(s.keys()) != keys:
            raise ValueError(f"client state {i} has different keys from client state 0")
    k = len(states)
    if fast_path.enabled() and k > 1:
        return _weighted_sum_flat(states, weights, keys)
    out: dict[str, Tensor] = {}
    weights_at: dict[tuple, tuple[Tensor, Tensor]] = {}  # per (device, dtype): p_i as (K, 1, ...) rows, row ids
    for key in keys:
        ref = states[0][key]
        exact = ref.dtype if ref.dtype in (torch.float32, torch.float64) else torch.float64  # integers: in float64
        at = (ref.device, exact)
        if at not in weights_at:  # p_i rounded to the dtype, as a scalar multiplication rounds it
            w = torch.as_tensor(weights, dtype=torch.float64).to(device=ref.device, dtype=exact)
            weights_at[at] = w, torch.zeros(k, dtype=torch.long, device=ref.device)
        w, rows = weights_at[at]
        stacked = torch.stack([s[key] for s in states]).to(exact)  # (K, *shape)
        prod = stacked * w.reshape(k, *([1] * ref.dim()))  # (K, *shape): p_i s_i
        if prod.device.type == "cpu":  # (K, *shape) -> (*shape): the rows added in order
            acc = torch.zeros_like(prod[:1]).index_add_(0, rows, prod)[0]
        else:  # index_add_ adds atomically there (any order); a deterministic reduction instead
            acc = prod.sum(0)
        out[key] = acc.to(ref.dtype) if ref.is_floating_point() else acc.round().to(ref.dtype)
    return out


def _weighted_sum_flat(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float],
                       keys: list[str]) -> dict[str, Tensor]:
    """:func:`weighted_sum` with the keys of one device and dtype flattened into one ``(K, N)``
    block (one concatenation, one product, one ``index_add_``, instead of five ops per key): the
    same products and the same row-after-row sums, element by element, so bitwise the same result
    (``tests/test_fl_fast_path.py``)."""
    k = len(states)
    groups: dict[tuple, list[str]] = {}
    for key in keys:
        ref = states[0][key]
        exact = ref.dtype if ref.dtype in (torch.float32, torch.float64) else torch.float64
        groups.setdefault((ref.device, exact), []).append(key)
    out: dict[str, Tensor] = {}
    for (device, exact), names in groups.items():
        refs = [states[0][key] for key in names]
        sizes = [t.numel() for t in refs]
        flat = torch.cat([s[key].reshape(-1).to(exact) for s in states for key in names]).view(k, sum(sizes))
        w = torch.as_tensor(weights, dtype=torch.float64).to(device=device, dtype=exact)  # p_i rounded to the dtype
        prod = flat * w[:, None]  # (K, N): p_i s_i
        if device.type == "cpu":  # the rows added in order, as weighted_sum adds them
            acc = torch.zeros_like(prod[:1]).index_add_(0, torch.zeros(k, dtype=torch.long), prod)[0]
        else:
            acc = prod.sum(0)
        for key, ref, part in zip(names, refs, acc.split(sizes), strict=True):
            part = part.view(ref.shape)
            out[key] = part.to(ref.dtype).clone() if ref.is_floating_point() else part.round().to(ref.dtype)
    return {key: out[key] for key in keys}


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
        """Server -> ``num_clients`` clients: each receives ``state``.

        Each client gets its own dict whose tensors are detached views of the server's (no
        per-client copy): what a client receives is read-only, and every engine copies it
        into the client's model (``load_state_dict``, the batched engine's stack) before
        training. A hook that wants to change a received tensor must copy it first.
        Counted once (multicast) in ``bytes_down``; does not close a round (the round closes
        with the clients' upload).
        """
        if num_clients < 1:
            raise ValueError("broadcast needs at least one receiving client")
        self._record("broadcast", tag, 0, state_bytes(state), num_clients, state.keys())
        shared = {k: v.detach() for k, v in state.items()}
        return [dict(shared) for _ in range(num_clients)]

    def gather(self, states: Sequence[Mapping[str, Tensor]], *, tag: str = "model") -> list[dict[str, Tensor]]:
        """Clients -> server: every upload is counted; closes one communication round.

        The server gets each client's upload as detached views (no copy): an upload is the
        client's own result of this round (the sequential engine's copies of its model, the
        batched engine's rows of the round's stacked tensors), which nothing changes after.
        """
        if len(states) == 0:
            raise ValueError("gather needs at least one client upload")
        up = sum(state_bytes(s) for s in states)
        self._record("gather", tag, up, 0, len(states), states[0].keys())
        self.rounds += 1
        return [{k: v.detach() if v.requires_grad else v for k, v in s.items()} for s in states]

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
