"""Several simulations' clients trained as one batched computation (:func:`run_together`),
e.g. the seeds of one configuration in lock-step (:func:`bnfl.fl.lockstep.run_lockstep`): what
each simulation asks for (:class:`ClientWork`), whether their clients can share a computation
(:func:`combinable`), and their results handed back in each simulation's order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

if TYPE_CHECKING:
    from bnfl.fedtan import CoupledStep
    from bnfl.fl.batched import BatchedClients, DeferredCoupledStep
    from bnfl.fl.engine import Simulation

__all__ = ["ClientWork", "combinable", "in_round_order", "run_together", "same_samples"]


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


def in_round_order(rows: Sequence[Any], uploads: Mapping[Any, dict[str, Tensor]],
                   losses: Mapping[Any, float]) -> tuple[list[dict[str, Tensor]], list[float]]:
    """One simulation's uploads and losses in the order of its participants."""
    ordered = sorted(rows, key=lambda row: row.index)
    return [uploads[row] for row in ordered], [losses[row] for row in ordered]


def same_samples(a: Simulation, b: Simulation) -> bool:
    """Whether two simulations hold the same training tensors (the same data loaded once: seeds
    of one configuration differ in their partition, not in their samples)."""
    return a._rows is None and b._rows is None and a.x_train is b.x_train and a.y_train is b.y_train


def combinable(works: Sequence[ClientWork]) -> str | None:
    """Why these simulations' clients cannot train as one computation, or ``None``: they need
    the same architecture (parameter and buffer shapes), algorithm, optimiser settings, learning
    rate and frozen phase this round, and no coupled first step (it couples one simulation's
    clients)."""
    a = works[0].batched.sim
    shapes = {n: tuple(t.shape) for n, t in a.model.state_dict().items()}
    for w in works:
        s = w.batched.sim
        if w.first is not None:
            return "a coupled first step couples one simulation's clients"
        if type(s.algorithm) is not type(a.algorithm):
            return "different algorithms"
        if (w.lr, w.frozen) != (works[0].lr, works[0].frozen):
            return "different learning rates or frozen phases this round"
        c, d = s.config, a.config
        if (c.momentum, c.weight_decay, s.loss_fn, s.device, c.dtype) != (
                d.momentum, d.weight_decay, a.loss_fn, a.device, d.dtype):
            return "different optimiser settings, loss, device or dtype"
        if type(s.model) is not type(a.model) or {n: tuple(t.shape) for n, t in s.model.state_dict().items()} != shapes:
            return "different architectures"
    return None


def run_together(works: Sequence[ClientWork]) -> list[tuple[list[dict[str, Tensor]], list[float]] | Exception]:
    """The local training of several simulations' participants (e.g. the seeds of one
    configuration, :func:`bnfl.fl.lockstep.run_lockstep`) as one batched computation: each
    simulation's clients are rows of one :class:`~bnfl.nn.batched.BatchedNet`, with their own
    mini-batch streams, states, momentum and algorithm hooks, exactly as
    :meth:`BatchedClients.run` trains one simulation's. Returns, per work, its uploads and mean
    losses in the order of its clients, or its error (a diverged client's
    :class:`~bnfl.fl.DivergenceError`; the other simulations go on). Works that cannot share a
    computation (:func:`combinable`) are trained one by one."""
    out: list[tuple[list[dict[str, Tensor]], list[float]] | Exception] = []
    if len(works) < 2 or combinable(works) is not None:
        for w in works:
            try:
                out.append(w.batched.run(w.r, list(w.clients), list(w.received), lr=w.lr, frozen=w.frozen,
                                         first=w.first))
            except Exception as err:  # noqa: BLE001 (handed to that simulation's run)
                out.append(err)
        return out
    rows = {id(w): w.batched._rows(w.r, w.clients, w.received) if w.clients else [] for w in works}
    everyone = [row for w in works for row in rows[id(w)]]
    lead = works[0].batched
    ups, ls, failed = lead._group(works[0].r, sorted(everyone, key=lambda row: -row.steps), lr=works[0].lr,
                                  frozen=works[0].frozen, first=None)
    for w in works:
        sim = w.batched.sim
        out.append(failed[sim] if sim in failed else in_round_order(rows[id(w)], ups, ls))
    return out
