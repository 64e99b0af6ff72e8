"""Several simulations' clients trained as one batched computation (:func:`run_together`),
e.g. the seeds of one configuration in lock-step (:func:`bnfl.fl.lockstep.run_lockstep`): what
each simulation asks for (:class:`ClientWork`), whether their clients can share a computation
(:func:`combinable`), and their results handed back in each simulation's order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

from bnfl.fl.batched import BatchedClients, DeferredCoupledStep, in_round_order

if TYPE_CHECKING:
    from bnfl.fedtan import CoupledStep
    from bnfl.fl._host import ClientHost

__all__ = ["ClientWork", "combinable", "run_together", "stacks"]


@dataclass(frozen=True)
class ClientWork:
    """One simulation's request for its participants' local training in round ``r`` (the
    arguments of :meth:`BatchedClients.run`); :func:`run_together` trains several at once."""

    batched: BatchedClients
    r: int
    clients: tuple[int, ...]
    received: tuple[dict[str, Tensor], ...]
    lr: float
    frozen: bool
    first: CoupledStep | DeferredCoupledStep | None


def _shapes(sim: ClientHost) -> tuple:
    return (type(sim.model), tuple((n, tuple(t.shape)) for n, t in sim.model.state_dict().items()))


def _share_key(w: ClientWork, stack_coupled: bool = True) -> tuple | None:
    """What the works that train as one computation share (``None``: this one trains alone): the
    architecture (parameter and buffer shapes), the algorithm's client hooks, the optimiser
    settings, loss, device, dtype and frozen phase this round. The learning rate may differ (one
    per row, :class:`~bnfl.fl.batched_sgd.StackedSGD`), and so may the algorithm when it hooks the
    same client steps (e.g. FedAvg+BN and FixBN before its freeze: the hooks run per row, each
    row's own algorithm). A coupled first step left to the batched engine stacks with others of
    its kind when ``stack_coupled``."""
    coupled = ""
    if isinstance(w.first, DeferredCoupledStep) and stack_coupled:  # step 1 pools each simulation's own clients
        coupled = w.first.step.name
    elif w.first is not None:  # a coupled step already computed for one simulation's clients
        return None
    s, c = w.batched.sim, w.batched.sim.config
    hooks = tuple(sorted(h for h, used in w.batched.hooks.items() if used))
    return (_shapes(s), hooks, w.frozen, c.momentum, c.weight_decay, s.loss_fn, str(s.device), c.dtype, coupled)


def combinable(works: Sequence[ClientWork]) -> str | None:
    """Why these simulations' clients cannot train as one computation, or ``None``: they need
    the same architecture (parameter and buffer shapes), client hooks, optimiser settings and
    frozen phase this round, and the same coupled first step, if any, left to the batched engine
    (it pools each simulation's clients apart); one computed already trains alone.
    Their learning rates and algorithms may differ (:func:`_share_key`)."""
    keys = [_share_key(w) for w in works]
    if any(k is None for k in keys):
        return "a coupled first step couples one simulation's clients"
    a = keys[0]
    for k in keys:
        if k[0] != a[0]:
            return "different architectures"
        if k[1] != a[1]:
            return "different client hooks of their algorithms"
        if k[2] != a[2]:
            return "different frozen phases this round"
        if k[3:8] != a[3:8]:
            return "different optimiser settings, loss, device or dtype"
        if k[8] != a[8]:
            return "different coupled first steps"
    return None


def stacks(works: Sequence[ClientWork], max_rows: int | None = None, *,
           stack_coupled: bool = False) -> list[list[int]]:
    """The works (their indices) that train as one computation each: works with the same
    :func:`_share_key` together, in order of first appearance, each stack cut where its rows
    (participants) would exceed ``max_rows`` (memory, :func:`bnfl.fl.stack_depth.max_rows`; a
    single work larger than that still trains, alone). ``stack_coupled``: simulations whose
    coupled first step (FedTAN's) is left to the batched engine stack too (default: each alone)."""
    groups: dict[Any, list[int]] = {}
    for i, w in enumerate(works):
        key = _share_key(w, stack_coupled)
        groups.setdefault(("alone", i) if key is None else key, []).append(i)
    out: list[list[int]] = []
    for members in groups.values():
        cur: list[int] = []
        rows = 0
        for i in members:
            n = len(works[i].clients)
            if cur and max_rows is not None and rows + n > max_rows:
                out.append(cur)
                cur, rows = [], 0
            cur.append(i)
            rows += n
        out.append(cur)
    return out


def run_together(works: Sequence[ClientWork], *, max_rows: int | None = None, stack_coupled: bool = False,
                 ) -> list[tuple[list[dict[str, Tensor]], list[float]] | Exception]:
    """The local training of several simulations' participants (e.g. the seeds of one
    configuration, :func:`bnfl.fl.lockstep.run_lockstep`) as one batched computation: each
    simulation's clients are rows of one :class:`~bnfl.nn.batched.BatchedNet`, with their own
    mini-batch streams, states, momentum, learning rate and algorithm hooks, exactly as
    :meth:`BatchedClients.run` trains one simulation's. Returns, per work, its uploads and mean
    losses in the order of its clients, or its error (a diverged client's
    :class:`~bnfl.fl.DivergenceError`; the other simulations go on). Works that cannot share a
    computation (:func:`combinable`) train in separate stacks (:func:`stacks`), a work that
    shares with none on its own; ``max_rows`` (default no limit) caps a stack's rows;
    ``stack_coupled`` stacks FedTAN's deferred coupled first steps of several simulations, each
    pooling its own clients (default off: as before, each such simulation trains alone, and the
    quick profile's FedTAN seeds keep their committed numbers bitwise)."""
    out: list[Any] = [None] * len(works)
    for members in stacks(works, max_rows, stack_coupled=stack_coupled):
        if len(members) == 1:
            w = works[members[0]]
            try:
                out[members[0]] = w.batched.run(w.r, list(w.clients), list(w.received), lr=w.lr, frozen=w.frozen,
                                                first=w.first)
            except Exception as err:  # noqa: BLE001 (handed to that simulation's run)
                out[members[0]] = err
            continue
        part = [works[i] for i in members]
        rows = {id(w): w.batched.rows_of(w.r, w.clients, w.received) if w.clients else [] for w in part}
        lr_of = {id(row): w.lr for w in part for row in rows[id(w)]}
        ordered = sorted((row for w in part for row in rows[id(w)]), key=lambda row: -row.steps)
        rates = [lr_of[id(row)] for row in ordered]
        lead = part[0].batched
        deferred = {w.batched.sim: w.first for w in part} if part[0].first is not None else None
        ups, ls, failed = lead._group(part[0].r, ordered, lr=rates if len(set(rates)) > 1 else part[0].lr,
                                      frozen=part[0].frozen, first=deferred)
        for i, w in zip(members, part, strict=True):
            sim = w.batched.sim
            out[i] = failed[sim] if sim in failed else in_round_order(rows[id(w)], ups, ls)
    return out
