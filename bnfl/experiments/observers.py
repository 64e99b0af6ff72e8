"""Observers of the shared training loop: what a paper records during and after a run beyond
the standard summary of :func:`bnfl.experiments.training.train`.

An :class:`Observer` is handed to :func:`~bnfl.experiments.training.train` or
:func:`~bnfl.experiments.training.train_seeds` (``observers=[...]``). It never trains anything
itself: :meth:`Observer.attach` may append round hooks to the simulation
(:attr:`bnfl.fl.Simulation.round_hooks`, called after each round's aggregation, whose returned
fields land in the history rows), and :meth:`Observer.record` adds fields to the run's summary
once it has finished. Because the hooks run inside each simulation's own loop, a run with
observers trains on whichever engine the context picks, its seeds in lock-step
(:func:`bnfl.fl.lockstep.run_lockstep`) included, and is cached like any other run; the
observer's :meth:`Observer.key` enters the cache key, so a summary with other recorded fields is
another cached run.

Observers must not mutate the simulation's models or state (evaluate copies, in eval mode, under
``torch.no_grad()``), and must not draw from the global random generators, so that the training
itself is the same with or without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Observer", "observer_keys"]


class Observer:
    """Base class of an observer of the training loop (module docstring).

    Subclasses override :meth:`key` (always), and :meth:`attach` and/or :meth:`record`.
    """

    def key(self) -> Mapping[str, Any]:
        """A JSON-able description of what this observer records (part of the run's cache key:
        change it whenever the recorded fields change)."""
        raise NotImplementedError(f"{type(self).__name__} must define key()")

    def attach(self, sim: Any) -> None:
        """Called once on the built :class:`bnfl.fl.Simulation` before it runs (e.g. to append a
        round hook). Default: nothing."""

    def record(self, sim: Any, split: Any, history: Any, *, diverged: bool) -> Mapping[str, Any]:
        """Fields to add to the run's summary after it finished (``history``: its
        :class:`bnfl.fl.History`; ``diverged``: it stopped with a DivergenceError). Default: none."""
        return {}


def observer_keys(observers: Sequence[Observer]) -> list[dict[str, Any]]:
    """The cache-key part of ``observers`` (each one's :meth:`Observer.key` and class name)."""
    out = []
    for o in observers:
        if not isinstance(o, Observer):
            raise TypeError(f"observers: expected bnfl.experiments.observers.Observer instances, got "
                            f"{type(o).__name__}")
        out.append({"observer": type(o).__name__, **dict(o.key())})
    return out
