"""A round's message plan: what the algorithm says its round sends, which every backend obeys.

An algorithm describes its round (:meth:`Algorithm.round_plan <bnfl.fl.Algorithm.round_plan>`)
and a backend carries the plan or refuses it from the plan: no backend reads a method's name or a
trait of its class (``tests/test_fl_exchange.py`` reads every backend module for that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bnfl.fl.algorithms._coupled import CoupledFirstStep

__all__ = ["RoundPlan", "pooled"]


@dataclass(frozen=True)
class RoundPlan:
    """The messages of one round.

    Parameters
    ----------
    download : bool, default True
        The server broadcasts the state that is not client-local (and the algorithm's extras).
    upload : bool, default True
        The clients upload their trained shared state (extras and momentum travel whenever the
        algorithm's hooks return them); the server aggregates.
    coupled : CoupledFirstStep, optional
        The in-step exchanges: the coupled first local step (FedTAN's Algorithms 2-3), run with
        the backend's exchange; ``None``: every local step is the client's own.
    freeze_bn : bool, default False
        The BN layers normalise with their running statistics in the local steps (FixBN's phase 2).
    server_trains : bool, default False
        The server holds the (pooled) data: the one client's trained model becomes the global
        model and nothing is sent (centralized learning; the pooling itself is
        :meth:`Algorithm.partition <bnfl.fl.Algorithm.partition>`, at build time).
    outside_messages : str, default ""
        What the clients read outside the messages (e.g. HBN's averaged alpha from the server's
        state), as the sentence a backend whose clients are remote refuses with; ``""``: nothing.
    """

    download: bool = True
    upload: bool = True
    coupled: CoupledFirstStep | None = None
    freeze_bn: bool = False
    server_trains: bool = False
    outside_messages: str = ""

    @property
    def empty(self) -> bool:
        """Nothing goes up or down, and no step exchanges anything."""
        return not (self.download or self.upload or self.coupled is not None)


def pooled(clients: Sequence[np.ndarray], batch_size: int) -> tuple[list[np.ndarray], int]:
    """All ``clients`` pooled into one whose batch is ``len(clients)`` times ``batch_size``
    (CATALOG §0.2's centralized learner: batch N*B)."""
    return [np.concatenate(clients)], batch_size * len(clients)
