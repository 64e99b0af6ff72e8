r"""SGD momentum across rounds as an algorithm's policy (FixBN Sec. 5), not an engine mode.

A backend knows only the generic hooks of :class:`~bnfl.fl.Algorithm` that call this policy:
:meth:`~bnfl.fl.Algorithm.initial_momentum` (the client's optimizer buffers to start from, or
``None``), :meth:`~bnfl.fl.Algorithm.final_momentum` (what to upload of the buffers at the end of
local training), :meth:`~bnfl.fl.Algorithm.momentum_download` and
:meth:`~bnfl.fl.Algorithm.aggregate_momentum` (the server's side). The modes:

``"reset"``
    a fresh optimizer every round (buffers start at 0; nothing kept, nothing sent);
``"local"`` (FixBN-star)
    each client keeps its buffers in its own state (:attr:`ClientContext.state
    <bnfl.fl.context.ClientContext>`, key ``"optimizer.momentum"``) and starts its next round from
    them;
``"global"`` (FixBN-dagger)
    the clients upload their buffers (``"momentum.<parameter>"``), the server averages them with
    the aggregation weights :math:`p_i` (as FedTAN eq. 7 averages the weights) into its state
    (``"optimizer.momentum"``) and broadcasts the average as every client's next initial buffer
    (doubling the message size).

Nothing happens at ``config.momentum == 0``. A policy without a mode of its own follows the
run's ``TrainConfig.momentum_mode``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from bnfl.fl.comm import weighted_sum

if TYPE_CHECKING:
    from bnfl.fl.context import ClientContext, ServerContext

__all__ = ["MOMENTUM_MODES", "MomentumPolicy"]

#: the modes of :class:`MomentumPolicy` (and of ``TrainConfig.momentum_mode``)
MOMENTUM_MODES = ("reset", "local", "global")
_KEY = "optimizer.momentum"  # in ClientContext.state ("local") and ServerContext.state ("global")
_PREFIX = "momentum."  # uploaded and broadcast keys ("global")


class MomentumPolicy:
    """Where a client's SGD momentum buffers live between rounds (module docstring).

    Parameters
    ----------
    mode : {"reset", "local", "global"}, optional
        ``None`` (default): the run's ``TrainConfig.momentum_mode``.
    """

    def __init__(self, mode: str | None = None) -> None:
        if mode is not None and mode not in MOMENTUM_MODES:
            raise ValueError(f"momentum mode must be one of {', '.join(MOMENTUM_MODES)} (or None: the run's "
                             f"momentum_mode), got {mode!r}")
        self.mode = mode

    def mode_for(self, config: object) -> str:
        """The mode in effect for a run with ``config`` ("reset" when it has no momentum)."""
        if float(getattr(config, "momentum", 0.0)) <= 0:
            return "reset"
        if self.mode is not None and self.mode != "reset":
            return self.mode
        return str(getattr(config, "momentum_mode", "reset"))

    # -- the client's side ---------------------------------------------------------------------
    def initial(self, client: ClientContext) -> dict[str, Tensor] | None:
        """The buffers (by parameter name) ``client``'s optimizer starts from, or ``None`` (zeros)."""
        mode = self.mode_for(client.server.config)
        if mode == "local":
            return client.state.get(_KEY) or None
        if mode == "global":
            got = {k[len(_PREFIX):]: v for k, v in client.received.items() if k.startswith(_PREFIX)}
            return got or None
        return None

    def final(self, client: ClientContext, momentum: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
        """Keep (``"local"``) or upload (``"global"``) the buffers ``momentum()`` of ``client`` at the
        end of its local training; returns the tensors to upload."""
        mode = self.mode_for(client.server.config)
        if mode == "local":
            client.state[_KEY] = momentum()
        elif mode == "global":
            return {f"{_PREFIX}{n}": t for n, t in momentum().items()}
        return {}

    # -- the server's side ---------------------------------------------------------------------
    def download(self, server: ServerContext) -> dict[str, Tensor]:
        """What the server broadcasts with the model: the averaged buffers (``"global"``, after a
        first round), else nothing."""
        if self.mode_for(server.config) != "global" or not server.state.get(_KEY):
            return {}
        return {f"{_PREFIX}{n}": t for n, t in server.state[_KEY].items()}

    def aggregate(self, server: ServerContext, weights: Sequence[float],
                  uploads: Sequence[Mapping[str, Tensor]]) -> dict[str, Any]:
        r"""``"global"``: the server-state entry of :math:`\bar m = \sum_i p_i m_i`, the uploaded
        buffers averaged (returned: the round puts it into the server state); else nothing."""
        if self.mode_for(server.config) != "global" or not uploads:
            return {}
        names = [k for k in uploads[0] if k.startswith(_PREFIX)]
        avg = weighted_sum([{k: u[k] for k in names} for u in uploads], weights)
        return {_KEY: {k[len(_PREFIX):]: v for k, v in avg.items()}}

    def __repr__(self) -> str:
        return f"MomentumPolicy({self.mode!r})"
