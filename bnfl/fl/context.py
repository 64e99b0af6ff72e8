"""What an algorithm's hooks see: a :class:`ServerContext` and, on a client, a :class:`ClientContext`.

Every backend (the single-process :class:`~bnfl.fl.Simulation`, the torch.distributed one, the
Flower apps) builds these two small objects and calls the same hooks of
:class:`~bnfl.fl.Algorithm`; no hook sees a backend. The server side knows the model's layout
(which keys are sent, which stay local), the clients' sizes and the run's configuration, and
can *request* a statistics computation from clients; a client knows its own id, size, data and
what it downloaded. The global state itself is passed to the server hooks as an argument and
the new state is their return value (:meth:`~bnfl.fl.Algorithm.aggregate` is pure).

An algorithm's own state is a value the backend owns, never an attribute of the algorithm:
:attr:`ClientContext.state` is what a client keeps across rounds (SCAFFOLD's :math:`c_i`, MOON's
previous model), handed in at the client's round and taken back after it, stored and shipped by
the backend (its client store, checkpoint, rank or Flower node); :attr:`ClientContext.scratch` is
the client's working memory for one round (FedProx's anchor); :attr:`ServerContext.state` is the
server's (SCAFFOLD's :math:`c`, FedAdam's moments), checkpointed with the run. Keys carry the
algorithm's name as prefix (``"scaffold.ci"``), so a solver and a wrapper (HBN) share one store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["ClientContext", "ServerContext", "StatisticsRequest", "client_weights"]


class StatisticsRequest(Protocol):
    """``request(kind, clients, state, tag=...)``: the backend runs
    :meth:`Algorithm.client_statistics(client, model, kind) <bnfl.fl.Algorithm.client_statistics>`
    on each of ``clients`` wherever its data lives, on a model holding ``state`` overlaid with
    that client's local state, and returns the results in the order of ``clients``, sent
    through the channel with ``tag`` (``None``: not an exchange of the protocol, not counted)."""

    def __call__(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor], *,
                 tag: str | None = "statistics") -> list[dict[str, Tensor]]: ...


def client_weights(sizes: Sequence[int], clients: Sequence[int], weighting: str) -> list[float]:
    r"""Aggregation weights :math:`p_i` over ``clients``: :math:`N_i / \sum_{j} N_j` (``"size"``,
    FedTAN eq. 7) or :math:`1/|S|` (``"equal"``, FedBN)."""
    if weighting == "equal":
        return [1.0 / len(clients)] * len(clients)
    n = np.array([sizes[c] for c in clients], dtype=np.float64)
    return list(n / n.sum())


@dataclass
class ServerContext:
    """The server's view of a run, shared by every backend.

    Attributes
    ----------
    model : nn.Module
        The architecture (initial weights); a template to copy or inspect, never trained.
    config : TrainConfig
    groups : dict
        :func:`bnfl.fl.state_groups` of the model (keys by module type).
    upload_keys, download_keys, local_keys : list of str
        What a client sends, what the server broadcasts, what stays on the client (from the
        algorithm's ``local_state`` / ``server_state`` and the groups; never from key names).
    client_sizes : list of int
        Training samples of every client (client ids index it).
    weighting : {"size", "equal"}
    device : torch.device
    request : StatisticsRequest
        Ask clients for :meth:`~bnfl.fl.Algorithm.client_statistics` (DecoupledBN's
        recalibration, HBN's round T+1 and evaluation statistics).
    round : int
        The round being run (1-based; ``rounds + 1`` in HBN's statistics-only round).
    frozen : bool
        Whether BN layers normalise with frozen statistics in this round.
    state : dict
        The algorithm's server state (SCAFFOLD's ``c``, FedAdam's moments, HBN's flags): read and
        written by the server hooks, kept by the backend across rounds and in checkpoints
        (tensors, numbers and dicts of them).
    """

    model: nn.Module
    config: Any
    groups: dict[str, set[str]]
    upload_keys: list[str]
    download_keys: list[str]
    local_keys: list[str]
    client_sizes: list[int]
    weighting: str
    device: torch.device
    request: StatisticsRequest
    round: int = 0
    frozen: bool = False
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        """Number of clients of the run."""
        return len(self.client_sizes)

    def weights(self, clients: Sequence[int]) -> list[float]:
        """Aggregation weights over ``clients`` (:func:`client_weights`)."""
        return client_weights(self.client_sizes, clients, self.weighting)


@dataclass
class ClientContext:
    """One client's view in one round.

    Attributes
    ----------
    server : ServerContext
        The run's layout and configuration (not the server's state).
    client : int
        The client's id.
    indices : numpy.ndarray
        Ids of the client's own training samples, in its data order (seeded sub-sampling).
    received : dict
        What the client downloaded this round (model keys and algorithm extras).
    first_participation : bool
        Whether the client holds no local state yet.
    batch_size : int
        The client's mini-batch size (its data size if smaller).
    loss_fn : callable
        ``loss_fn(output, y)``, the batch-mean training loss.
    data : callable
        ``data()`` -> ``(x, y)``: the client's training samples (only its own).
    state : dict
        The client's algorithm state as its previous round left it (empty at its first round):
        the hooks read and replace its entries, and the backend keeps what it holds after
        :meth:`~bnfl.fl.Algorithm.extra_upload` for the client's next round (tensors, numbers and
        dicts of them; e.g. SCAFFOLD's ``"scaffold.ci"``).
    scratch : dict
        Working memory of this client's round, dropped after it (FedProx's anchor, MOON's frozen
        models): what a hook leaves for a later hook of the same client and round.
    """

    server: ServerContext
    client: int
    indices: np.ndarray
    received: dict[str, Tensor]
    first_participation: bool
    batch_size: int
    loss_fn: Callable[[Tensor, Tensor], Tensor]
    data: Callable[[], tuple[Tensor, Tensor]] = field(repr=False)
    state: dict[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        """Number of the client's training samples."""
        return len(self.indices)
