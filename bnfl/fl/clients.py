"""Where a run's clients train: the :class:`Clients` interface the round calls, and its in-process loop.

A :class:`~bnfl.fl.Simulation` runs the server's side of every round (participation, the
broadcast, aggregation, evaluation, history, checkpoints) and asks its :class:`Clients` for the
clients' side: train this round's clients from what they received, run an exchange inside a
local step (FedTAN's coupled first step), answer a server request (statistics), evaluate the
clients' own models. Four backends implement it, none a subclass of another or of the Simulation:

========================================================  ======================================================
:class:`Sequential` (this module)                         one client after the other in this process (the reference)
:class:`~bnfl.fl.batched.BatchedClients`                  this process's clients as one stacked computation
:class:`~bnfl.fl.distributed.RankClients`                 each torch.distributed rank trains the clients it holds
:class:`~bnfl.fl.flower.FlowerClients`                    every client on its Flower node, reached by messages
========================================================  ======================================================

A backend reads the one-client pieces from the run that holds the clients' state (its ``host``:
:class:`~bnfl.fl._host.ClientHost`, a Simulation or a Flower node's client runner):
``client_round`` (the local steps and the client's epilogue, written once), ``client_statistics``,
``client_accuracy`` and ``coupled_step``. What the round obeys is the algorithm's
:class:`~bnfl.fl.RoundPlan`; a backend that cannot carry it refuses from the plan.

This module imports nothing of bnfl's engine (it sits below every backend).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor

from bnfl.data.stored import keep_or_move

__all__ = ["Clients", "Sequential", "held_samples"]

# what Clients.train returns: the clients that answered, their uploads and mean losses (in order)
_Trained = tuple[list[int], list[dict[str, Tensor]], list[float]]


class Clients(Protocol):
    """What a round asks of the clients (see the module docstring).

    The four required methods are a round's client work; the rest is a backend's place in a run
    of several processes, with the defaults of a run in one process (a backend that inherits
    this protocol gets them).

    Attributes
    ----------
    elsewhere : bool, class attribute
        Whether the clients train in other processes that this one messages (Flower's nodes):
        nothing of theirs can be batched here.
    writes : bool
        Whether this process writes the run's files (history, checkpoints) and holds its folder's
        lock: every backend but a torch.distributed rank other than 0.
    """

    elsewhere: ClassVar[bool] = False
    writes: bool = True

    # -- a round's client work ---------------------------------------------------------------------
    def train(self, r: int, plan: Any, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float,
              start: Mapping[str, Tensor], first: Any = None) -> _Trained:
        """Round ``r``'s local training of ``clients`` (all participants, in order) under the round's
        ``plan`` (:class:`~bnfl.fl.RoundPlan`: BN statistics frozen when ``plan.freeze_bn``, what
        each client uploads), each from what it received (``received[j]``: the j-th participant's
        download) over ``start`` (the global state a client that received nothing starts from),
        with the round's coupled first step ``first`` (what :meth:`exchange` returned, or None).
        Returns the clients that answered (a backend that drops a failed client returns
        the others), their uploads and mean training losses, in the order of ``clients``."""
        ...

    def exchange(self, step: Any, clients: Sequence[int], weights: Sequence[float], *, plan: Any,
                 start: Mapping[str, Tensor]) -> Any:
        """The algorithm's coupled first ``step`` (:class:`~bnfl.fl.CoupledFirstStep`) of the
        participants ``clients`` (weights :math:`p_i`, from ``start``, under ``plan``) run with this backend's exchange inside the
        step; what :meth:`train` takes as ``first``. A backend that cannot exchange inside a local
        step raises a ``ValueError`` naming the way out."""
        ...

    def request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
        """Each of ``clients`` answers the server's request ``kind`` on ``state`` over its local
        state (:meth:`Algorithm.client_statistics <bnfl.fl.Algorithm.client_statistics>`); the
        answers in the order of ``clients``. The round counts them in the channel."""
        ...

    def accuracies(self, clients: Sequence[int]) -> list[tuple[float, float]]:
        """Per client of ``clients``: its model's accuracy on the global test set and on its own data."""
        ...

    # -- the process's place in the run (defaults: the run's only process) --------------------------
    def samples(self, data: Any, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
        """The training samples this process keeps, on ``device``, and the map from a sample id to
        its row here (None: every sample, in order)."""
        return keep_or_move(data.x_train, device, dtype), data.y_train.to(device), None

    def attach(self, host: Any) -> None:
        """Called once by the run that owns this backend, at the end of its construction."""

    def meta(self) -> dict[str, Any]:
        """What the history's meta says of the engine (none here)."""
        return {}

    def begin_round(self, r: int) -> None:
        """Called before round ``r`` starts (a torch.distributed rank waits for the others)."""

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around a run (a torch.distributed rank turns a failed collective into one error naming the rank)."""
        yield

    def gather_clients(self, mine: dict[str, dict[int, Any]]) -> dict[str, dict[int, Any]]:
        """Every client's entries of ``mine`` (per-client state by name, this process's clients),
        for a checkpoint (here they already are everyone's)."""
        return mine

    def after_save(self) -> None:
        """Called on every process after a checkpoint was written (ranks wait for rank 0)."""


class Sequential(Clients):
    """The clients of ``host`` one after the other, in this process: the reference engine."""

    def __init__(self, host: Any) -> None:
        self.host = host  # a ClientHost (bnfl.fl._host)

    def train(self, r: int, plan: Any, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float,
              start: Mapping[str, Tensor], first: Any = None) -> _Trained:
        self.host.start_round(start, plan)
        uploads, losses = [], []
        for j, c in enumerate(clients):
            up, loss = self.host.client_round(r, c, received[j], lr=lr, frozen=plan.freeze_bn, first=first, index=j)
            uploads.append(up)
            losses.append(loss)
        return list(clients), uploads, losses

    def exchange(self, step: Any, clients: Sequence[int], weights: Sequence[float], *, plan: Any,
                 start: Mapping[str, Tensor]) -> Any:
        """The step with the channel's all-reduce (:func:`bnfl.fl.coupled.channel_exchange`)."""
        self.host.start_round(start, plan)
        return self.host.coupled_step(step, list(clients), weights, exchange=None)

    def request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
        return [self.host.client_statistics(c, state, kind) for c in clients]

    def accuracies(self, clients: Sequence[int]) -> list[tuple[float, float]]:
        return [self.host.client_accuracy(c) for c in clients]


def held_samples(data: Any, clients: Sequence[int], device: torch.device,
                 dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """Only the training samples of ``clients`` (for a process that holds some clients: the rest is
    dropped before anything moves to the device), and the map from a sample id to its row here
    (-1: a sample this process does not hold)."""
    ids = np.unique(np.concatenate([np.asarray(data.clients[c]) for c in clients]))
    rows = torch.full((data.x_train.shape[0],), -1, dtype=torch.long)
    rows[torch.as_tensor(ids)] = torch.arange(len(ids))
    keep = torch.as_tensor(ids)
    return keep_or_move(data.x_train[keep], device, dtype), data.y_train[keep].to(device), rows.to(device)
