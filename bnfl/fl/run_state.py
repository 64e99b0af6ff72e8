"""The server's side of a run between two rounds, as a value: :class:`RunState`.

A round (:func:`bnfl.fl.engine.run_round`) takes a :class:`RunState` and returns the next one; a
:class:`~bnfl.fl.Simulation` holds the current one and its checkpoint saves and loads it
(:mod:`bnfl.fl._checkpoint`, under the same keys as before, so older checkpoints load).

What is *not* in it, and where it lives instead:

* each client's own state (its local state groups, algorithm state, batch cursor): where the
  client is (this process's store, a torch.distributed rank, a Flower node's Context), gathered
  into a checkpoint by :meth:`Clients.gather_clients <bnfl.fl.clients.Clients.gather_clients>`;
* the bytes counted so far: the run's :class:`~bnfl.fl.comm.Channel`;
* the history's rows: :class:`~bnfl.fl.History` (the checkpoint holds their count and the newest);
* the random generators: the process's own (torch, numpy), which the checkpoint captures when it is
  written and restores when it is loaded.

This module imports nothing of bnfl.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

__all__ = ["RunState"]

@dataclass(frozen=True, eq=False)  # tensors have no truth value: states are compared by their fields
class RunState:
    """Everything a round reads and writes on the server's side, between two rounds.

    A round never changes the state it is given: it returns a new one
    (``state, row = run_round(state, r, ...)``). The tensors are shared, not copied, as in a
    ``state_dict``.

    Parameters
    ----------
    global_state : mapping of str to Tensor
        The global model's ``state_dict`` (every key, client-local ones at their initial values).
    round : int, default 0
        The last completed round (0: none yet; ``rounds + 1`` after a statistics-only round).
    server_state : dict, default empty
        The algorithm's server state (:attr:`ServerContext.state <bnfl.fl.context.ServerContext.state>`:
        SCAFFOLD's ``c``, FedAdam's moments, the server momentum ``"optimizer.momentum"``).
    participants : tuple of int, default ()
        The clients that took part in the last round (what the algorithm's evaluation statistics
        are computed over, :meth:`Algorithm.evaluation_state <bnfl.fl.Algorithm.evaluation_state>`).

    Examples
    --------
    >>> import torch
    >>> from bnfl.fl import RunState
    >>> s = RunState({"w": torch.zeros(2)})
    >>> s.round, s.participants
    (0, ())
    >>> sorted(s.to_checkpoint())  # the checkpoint's keys (older bnfl's, plus "participants")
    ['global_state', 'participants', 'round', 'server_state']
    """

    global_state: Mapping[str, Tensor]
    round: int = 0
    server_state: dict[str, Any] = field(default_factory=dict)
    participants: tuple[int, ...] = ()

    def to_checkpoint(self) -> dict[str, Any]:
        """The entries of a checkpoint that hold this state (plain dicts, lists and numbers)."""
        return {"round": self.round, "global_state": self.global_state, "server_state": self.server_state,
                "participants": list(self.participants)}

    @classmethod
    def from_checkpoint(cls, s: Mapping[str, Any]) -> RunState:
        """The state a checkpoint ``s`` holds (:meth:`to_checkpoint`), also from older bnfl's
        checkpoints: no ``participants`` (then none), the server momentum kept apart as
        ``global_momentum`` (then moved into the server state)."""
        server = dict(s.get("server_state", {}))
        if s.get("global_momentum"):
            server["optimizer.momentum"] = s["global_momentum"]
        return cls(global_state=s["global_state"], round=int(s["round"]), server_state=server,
                   participants=tuple(int(c) for c in s.get("participants", ())))

