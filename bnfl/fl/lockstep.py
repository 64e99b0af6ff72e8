r"""Several simulations in lock-step: their clients' local training as one batched computation.

The independent seeds of one configuration (same model, algorithm and settings; their own
initialisation, partition, participants and mini-batches) spend most of a round on per-operation
overhead when the model is small. :func:`run_lockstep` runs them round by round together: each
simulation runs its own :meth:`~bnfl.fl.Simulation.run` (server hooks, aggregation, evaluation,
checkpoints, history) until it asks for its participants' local training; when every one has
asked, all their clients train as rows of one :class:`~bnfl.nn.batched.BatchedNet`
(:func:`bnfl.fl.batched_together.run_together`), and each simulation goes on with its own results.

Each simulation runs in a thread of its own, but only one runs at a time, in a fixed order (a
baton passed between them), so nothing is concurrent and the result does not depend on
scheduling. The global random states (torch, numpy, random) are each simulation's own: saved
when it hands the baton on and restored when it gets it back, as if it ran alone. A simulation
whose client diverges stops with its :class:`~bnfl.fl.DivergenceError` (and history); the others
go on.

Every simulation must use the batched engine (``TrainConfig.batched`` ``"auto"`` or ``"on"``
and nothing in :func:`~bnfl.fl.batched_choice.batched_obstacle`). Requests that cannot share a
computation (other architectures, client hooks or frozen phases; FedTAN's coupled first step
where stacking it would change a bit, unless ``stack_coupled``) train in separate stacks, one simulation alone where it shares with none; learning rates may
differ (one per row). ``max_rows`` caps a stack's rows, so that memory decides the depth
(:mod:`bnfl.fl.stack_depth`). The results equal each simulation's own batched run up to rounding (see
``tests/test_fl_lockstep.py``).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bnfl.fl import fast_path
from bnfl.fl.batched_together import ClientWork, run_together

if TYPE_CHECKING:
    from bnfl.fl.engine import History, Simulation

__all__ = ["run_lockstep"]


class _Slot:
    """One simulation's thread, its pending request and what it gets back."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.work: ClientWork | None = None
        self.reply: Any = None
        self.outcome: History | BaseException | None = None
        self.done = False
        self.rng: tuple[Any, Any, Any] | None = None


class _Requests:
    """Stands in for a simulation's :class:`~bnfl.fl.batched.BatchedClients`: its ``train`` hands
    the request to the lock-step loop and waits for the combined computation's answer."""

    def __init__(self, real: Any, baton: Any, slot: _Slot) -> None:  # a _Baton or a _Relay
        self._real, self._baton, self._slot = real, baton, slot

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def train(self, r: int, plan: Any, clients: Sequence[int], received: Sequence[dict], *, lr: float,
              start: Mapping[str, Any], first: Any = None) -> Any:
        self._real.sim.start_round(start, plan)
        self._slot.work = ClientWork(self._real, r, tuple(clients), tuple(received), lr, plan.freeze_bn, first)
        reply = self._baton.hand_back(self._slot)
        if isinstance(reply, BaseException):
            raise reply
        uploads, losses = reply
        return list(clients), uploads, losses


def _rng_state() -> tuple[Any, Any, Any]:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _set_rng_state(state: tuple[Any, Any, Any]) -> None:
    torch.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])


class _Baton:
    """Whose turn it is: one simulation thread, or the lock-step loop (``None``)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.turn: _Slot | None = None

    def give(self, slot: _Slot) -> None:
        """The loop lets ``slot`` run until it asks for training or ends."""
        with self.cond:
            self.turn = slot
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.turn is None)

    def hand_back(self, slot: _Slot) -> Any:
        """A simulation thread yields to the loop; returns the loop's reply when its turn comes."""
        slot.rng = _rng_state()
        with self.cond:
            self.turn = None
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.turn is slot)
        _set_rng_state(slot.rng)
        reply, slot.reply = slot.reply, None
        return reply

    def wait_first_turn(self, slot: _Slot) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn is slot)

    def finish(self, slot: _Slot) -> None:
        slot.done = True
        with self.cond:
            self.turn = None
            self.cond.notify_all()


class _Relay:
    """:class:`_Baton`'s hand-over with one semaphore per simulation thread and one for the loop
    (the fast path, :mod:`bnfl.fl.fast_path`): a turn wakes the one thread whose turn it is,
    where the baton's condition wakes every waiting thread to check whose turn it is (S threads
    woken per hand-over). The same turns in the same order, so the same results."""

    def __init__(self) -> None:
        self.loop = threading.Semaphore(0)
        self.go: dict[int, threading.Semaphore] = {}

    def _go(self, slot: _Slot) -> threading.Semaphore:
        return self.go.setdefault(id(slot), threading.Semaphore(0))

    def give(self, slot: _Slot) -> None:
        self._go(slot).release()
        self.loop.acquire()

    def hand_back(self, slot: _Slot) -> Any:
        slot.rng = _rng_state()
        go = self._go(slot)
        self.loop.release()
        go.acquire()
        _set_rng_state(slot.rng)
        reply, slot.reply = slot.reply, None
        return reply

    def wait_first_turn(self, slot: _Slot) -> None:
        self._go(slot).acquire()

    def finish(self, slot: _Slot) -> None:
        slot.done = True
        self.loop.release()


def run_lockstep(sims: Sequence[Simulation], *, resume: bool = False,
                 max_rows: int | None = None, stack_coupled: bool | None = None) -> list[History | BaseException]:
    """Run ``sims`` (each as :meth:`Simulation.run <bnfl.fl.Simulation.run>` would) with their
    clients' local training batched across them; returns each one's
    :class:`~bnfl.fl.History`, or the exception it stopped with (a
    :class:`~bnfl.fl.DivergenceError` carries its history).

    Parameters
    ----------
    sims : sequence of Simulation
        Built with the batched engine (``TrainConfig.batched`` ``"auto"``/``"on"`` and no
        obstacle); typically the seeds of one configuration.
    resume : bool, default False
        Passed to each ``run`` (each resumes from its own ``checkpoint_dir``).
    max_rows : int, optional
        The most clients one batched computation stacks (default: no limit); more are split
        into several stacks (:func:`bnfl.fl.batched_together.stacks`, e.g. from
        :func:`bnfl.fl.stack_depth.max_rows`).
    stack_coupled : bool or None, default None
        Stack FedTAN's coupled first steps of several simulations too, each pooling its own
        clients (:func:`bnfl.fl.batched_together.run_together`); ``None``: where each simulation's
        numbers stay bitwise its own (models without convolutions, in rounds where every
        participant trains the same full batches: :func:`bnfl.fl.batched_together.uniform_rows`;
        BN layers of unaligned width run once per simulation); ``False``: each trains its rounds alone.
    """
    sims = list(sims)
    if len({id(s) for s in sims}) != len(sims):
        raise ValueError("run_lockstep: the same Simulation is listed twice")
    for i, s in enumerate(sims):
        if s.batched_engine is None or s.clients is not s.batched_engine:
            raise ValueError(f"run_lockstep: simulation {i} does not use the batched engine "
                             f"({s.history.meta['batched']['why']}); build it with batched='auto' or 'on' "
                             "and run it on its own if it cannot be batched")
    baton: Any = _Relay() if fast_path.enabled() else _Baton()
    slots = [_Slot(s) for s in sims]
    for slot in slots:
        if isinstance(baton, _Relay):
            baton._go(slot)  # (created before any thread waits on it)
    start = _rng_state()
    originals = [s.clients for s in sims]  # each one's batched engine (checked above)

    def body(slot: _Slot) -> None:
        baton.wait_first_turn(slot)
        _set_rng_state(start)  # as if it ran alone from here
        try:
            slot.outcome = slot.sim.run(resume=resume)
        except BaseException as err:  # noqa: BLE001 (returned to the caller)
            slot.outcome = err
        finally:
            baton.finish(slot)

    threads = []
    try:
        for slot, real in zip(slots, originals, strict=True):
            slot.sim.clients = _Requests(real, baton, slot)
            t = threading.Thread(target=body, args=(slot,), name=f"bnfl-lockstep-{len(threads)}", daemon=True)
            t.start()
            threads.append(t)
        while True:
            for slot in slots:
                if not slot.done:
                    baton.give(slot)  # runs until it asks for its clients' training, or ends
            waiting = [slot for slot in slots if not slot.done]
            if not waiting:
                break
            works = [slot.work for slot in waiting]
            assert all(w is not None for w in works)
            for slot, reply in zip(waiting, run_together(works, max_rows=max_rows, stack_coupled=stack_coupled), strict=True):  # type: ignore[arg-type]
                slot.work, slot.reply = None, reply
    except BaseException as err:  # the loop itself failed: stop every simulation, then re-raise
        for slot in slots:
            if not slot.done and slot.work is not None:
                slot.reply = RuntimeError(f"run_lockstep stopped: {type(err).__name__}: {err}")
                baton.give(slot)
        raise
    finally:
        for t in threads:
            t.join(timeout=60)
        for s, real in zip(sims, originals, strict=True):
            s.clients = real
        _set_rng_state(start)
    return [slot.outcome for slot in slots]  # type: ignore[misc]
