"""What the modules below the engine read of the run that holds the clients.

The batched engine (:mod:`bnfl.fl.batched`, :mod:`bnfl.fl.batched_together`) runs a
:class:`~bnfl.fl.Simulation`'s clients (the Simulation builds it), and a Flower node keeps a
client's state in its Context (:mod:`bnfl.fl._flower_records`).
They name this protocol, not the Simulation, so no module below the engine imports the engine
(no import cycle, counting annotations). This module imports nothing of bnfl.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
from torch import Tensor, nn

__all__ = ["ClientHost"]


class ClientHost(Protocol):
    """The members of a :class:`~bnfl.fl.Simulation` (or a Flower node's
    :class:`~bnfl.fl.flower_client.ClientRunner`: both hold the clients' state,
    :class:`~bnfl.fl._client_work.ClientWork`) that its client runners use."""

    #: the run's :class:`~bnfl.fl.TrainConfig` and :class:`~bnfl.fl.Algorithm` (kept as ``Any``
    #: here: this module sits below both)
    config: Any
    algorithm: Any
    #: the run's :class:`~bnfl.fl.comm.Channel`; the augmenter (:mod:`bnfl.fl.augment`) or None
    channel: Any
    augmenter: Any
    model: nn.Module
    device: torch.device
    loss_fn: Callable[[Tensor, Tensor], Tensor]
    x_train: Tensor
    y_train: Tensor
    sample_rows: Tensor | None
    cursors: dict[int, list[int]]
    #: each client's local state and algorithm state (:attr:`ClientContext.state <bnfl.fl.context.ClientContext.state>`)
    client_local: dict[int, dict[str, Tensor]]
    client_algorithm: dict[int, dict[str, Any]]
    union_count: dict[str, int] | None
    clients_elsewhere: bool

    def next_batch_ids(self, c: int) -> Tensor: ...

    def samples_of(self, ids: Tensor) -> tuple[Tensor, Tensor]: ...

    def steps_this_round(self, c: int) -> int: ...

    def client_state(self, c: int) -> dict[str, Tensor]: ...

    def client_context(self, c: int, received: dict[str, Tensor] | None = None) -> Any: ...

    def check_loss(self, loss: Tensor, c: int, r: int) -> None: ...

    def keep_client(self, c: int, client: Any, trained: Mapping[str, Tensor], *,
                    extra: Callable[[], Mapping[str, Tensor]], momentum: Callable[[], dict[str, Tensor]],
                    copy_upload: bool = True) -> dict[str, Tensor]: ...
