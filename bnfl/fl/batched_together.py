"""Several simulations' clients trained as one batched computation (:func:`run_together`),
e.g. the seeds of one configuration in lock-step (:func:`bnfl.fl.lockstep.run_lockstep`): what
each simulation asks for (:class:`ClientWork`), whether their clients can share a computation
(:func:`combinable`), and their results handed back in each simulation's order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from bnfl.fl.batched import BatchedClients, DeferredCoupledStep
from bnfl.fl.batched_step import in_round_order

if TYPE_CHECKING:
    from bnfl.fedtan import CoupledStep
    from bnfl.fl._host import ClientHost

__all__ = ["ClientWork", "combinable", "coupled_stacks_bitwise", "run_together", "stacks", "uniform_rows"]


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


_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def coupled_stacks_bitwise(model: nn.Module) -> bool:
    """Whether FedTAN's coupled rounds of several simulations of ``model`` may stack by default:
    not where the model convolves. A grouped convolution's weight gradient changes in the last
    bit with the number of groups (measured on Q-RES, torch 2.13 CPU: ``stages.0.0.conv1.weight``
    3e-8 apart after one coupled step), and convolving each simulation apart leaves nothing to
    gain (fedtan-tab2's shape: 2.27 s stacked against 2.15 s apart, two rounds)."""
    return not any(isinstance(m, _CONVS) for m in model.modules())


def uniform_rows(w: ClientWork) -> tuple[int, int] | None:
    """``(steps, batch)`` when every participant of ``w`` trains the same number of local steps on
    full mini-batches of one size this round (step units, no client smaller than the batch), else
    ``None``. A stack of such works of a model without convolutions pads no row and masks
    none, and with each simulation's BN layers of unaligned width run apart
    (:attr:`~bnfl.nn.batched.BatchedNet.apart`) each work's rows see the operations they see
    alone, bit for bit: the clients' batched linear products are one matrix product per client,
    the element-wise operations and the optimiser's are the same per element, and each
    simulation's coupled moments are its own all-reduce (:meth:`~bnfl.nn.batched.BatchedNet._coupled`).
    A short client would pad the whole stack (and an epoch unit gives uneven step counts)."""
    sim = w.batched.sim
    if sim.config.local_unit != "steps":
        return None
    b = sim.batch_size
    if any(len(sim.client_indices[c]) < b for c in w.clients):
        return None
    return sim.config.local_steps, b


def _share_key(w: ClientWork, stack_coupled: bool | None = True) -> tuple | None:
    """What the works that train as one computation share (``None``: this one trains alone): the
    architecture (parameter and buffer shapes), the algorithm's client hooks, the optimiser
    settings, loss, device, dtype and frozen phase this round. The learning rate may differ (one
    per row, :class:`~bnfl.fl.batched_sgd.StackedSGD`), and so may the algorithm when it hooks the
    same client steps (e.g. FedAvg+BN and FixBN before its freeze: the hooks run per row, each
    row's own algorithm). A coupled first step left to the batched engine stacks with others of
    its kind when ``stack_coupled`` (``None``: where that is bitwise, :func:`uniform_rows`, with
    works of the same steps and batch, no convolution; their BN layers of unaligned width run apart)."""
    coupled: Any = ""
    if isinstance(w.first, DeferredCoupledStep) and stack_coupled is None:  # where bitwise: no conv, uniform rows
        shape = uniform_rows(w) if coupled_stacks_bitwise(w.batched.sim.model) else None
        if shape is None:
            return None
        coupled = (w.first.step.name, shape)
    elif isinstance(w.first, DeferredCoupledStep) and stack_coupled:  # step 1 pools each simulation's own clients
        coupled = w.first.step.name
    elif w.first is not None:  # a coupled step already computed for one simulation's clients (or asked apart)
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
           stack_coupled: bool | None = None) -> list[list[int]]:
    """The works (their indices) that train as one computation each: works with the same
    :func:`_share_key` together, in order of first appearance, each stack cut where its rows
    (participants) would exceed ``max_rows`` (memory, :func:`bnfl.fl.stack_depth.max_rows`; a
    single work larger than that still trains, alone). ``stack_coupled``: simulations whose
    coupled first step (FedTAN's) is left to the batched engine stack too; ``None`` (default):
    where that leaves each simulation's numbers bitwise its own (:func:`uniform_rows`; each
    simulation's BN layers of unaligned width apart, no convolution),
    ``False``: each alone."""
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


def run_together(works: Sequence[ClientWork], *, max_rows: int | None = None, stack_coupled: bool | None = None,
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
    pooling its own clients; ``None`` (default): where each simulation's numbers stay bitwise
    what it computes alone (:func:`uniform_rows`: every participant the same full batches and
    steps, no convolution; each simulation's BN layers of unaligned width apart), so
    the quick profile's FedTAN seeds keep their committed numbers; ``False``: each alone."""
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
                                      frozen=part[0].frozen, first=deferred,
                                      apart=deferred is not None and stack_coupled is None)
        for i, w in zip(members, part, strict=True):
            sim = w.batched.sim
            out[i] = failed[sim] if sim in failed else in_round_order(rows[id(w)], ups, ls)
    return out
