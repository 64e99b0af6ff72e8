"""The engine-facing contract of an algorithm: :class:`Algorithm` and its hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from bnfl.fl.algorithms._momentum import MomentumPolicy
from bnfl.fl.algorithms._plan import RoundPlan, pooled
from bnfl.fl.comm import weighted_sum

if TYPE_CHECKING:
    from bnfl.fedtan import CoupledStep
    from bnfl.fl.algorithms._coupled import CoupledFirstStep
    from bnfl.fl.context import ClientContext, ServerContext



class Aggregated(dict):
    """What :meth:`Algorithm.aggregate` returns: the new global state (this dict) and the new
    server state (:attr:`server_state`: the algorithm's own state, SCAFFOLD's ``c``, FedAdam's
    moments), a value the round puts into the next :class:`~bnfl.fl.RunState`. A plain mapping
    (an algorithm of older bnfl) is the global state alone: its server state is then what its
    hooks left in ``server.state``."""

    def __init__(self, state: Mapping[str, Tensor], server_state: Mapping[str, Any]) -> None:
        super().__init__(state)
        self.server_state: dict[str, Any] = dict(server_state)

    @classmethod
    def of(cls, out: Mapping[str, Tensor], server: ServerContext) -> Aggregated:
        """``out`` as an :class:`Aggregated` (a plain mapping: with ``server.state`` as it stands)."""
        return out if isinstance(out, Aggregated) else cls(out, server.state)

class Algorithm:
    """Base class: FedAvg semantics; subclasses override class attributes and a few hooks."""

    name: ClassVar[str] = "fedavg"
    local_state: ClassVar[frozenset[str]] = frozenset()
    server_state: ClassVar[frozenset[str]] = frozenset()
    weighting: ClassVar[str] = "size"
    personalized: ClassVar[bool] = False  # evaluate each client's own model (FedTAN protocol)
    #: descriptions that :meth:`round_plan` and :meth:`partition` turn into the round's plan and the
    #: build-time pooling; no backend reads them (``tests/test_fl_exchange.py``)
    communicates: ClassVar[bool] = True
    centralized: ClassVar[bool] = False
    #: SGD momentum across rounds (:mod:`bnfl.fl.algorithms._momentum`): by default the run's
    #: ``TrainConfig.momentum_mode``; FixBN's ``momentum=`` fixes its own
    momentum_policy: MomentumPolicy = MomentumPolicy()

    def __init__(self) -> None:
        """No options here; subclasses take theirs as keyword-only arguments."""

    # -- the round's plan (what the backends obey) ------------------------------------------
    def round_plan(self, r: int) -> RoundPlan:
        """The messages of round ``r`` (:class:`~bnfl.fl.algorithms._plan.RoundPlan`), from this
        class's description: :attr:`communicates` (``False``: the empty plan), :meth:`coupled_step`,
        :meth:`frozen_stats` and :attr:`centralized`. The backends read only the plan."""
        talks = self.communicates
        return RoundPlan(download=talks, upload=talks, coupled=self.coupled_step(r), freeze_bn=self.frozen_stats(r),
                         server_trains=self.centralized)

    def partition(self, clients: Sequence[Any], batch_size: int) -> tuple[list[Any], int]:
        """The clients' sample ids and the local batch size this algorithm trains on, at build time:
        as given, or (:attr:`centralized`) all clients pooled into one with batch N*B."""
        return pooled(clients, batch_size) if self.centralized else (list(clients), batch_size)

    # -- phases -------------------------------------------------------------------------
    def coupled_step(self, r: int) -> CoupledFirstStep | None:
        """The coupled first local step of round ``r`` (:class:`~bnfl.fl.algorithms._coupled.CoupledFirstStep`:
        FedTAN's, Algorithm 2's), which the backend runs with the exchange it supplies, or ``None``
        (every local step is the client's own)."""
        return None

    def frozen_stats(self, r: int) -> bool:
        """Whether BN layers normalise with their (frozen) running statistics at round ``r``."""
        return False

    def batching_obstacle(self) -> str | None:
        """Why this algorithm's clients cannot train as one batched computation
        (:mod:`bnfl.fl.batched`), or ``None``. Default: an algorithm with its own
        :meth:`local_loss` needs each client's own forward pass (MOON's representations, FedSAM's
        perturbed weights); hooks on per-client views are batched."""
        if type(self).local_loss is not Algorithm.local_loss:
            return (f"{type(self).__name__} defines its own local_loss, which runs one client's model "
                    "(e.g. MOON's representations, FedSAM's perturbed weights)")
        return None

    def view_hooks(self) -> frozenset[str]:
        """Which of the client hooks ``client_start``, ``adjust_grads``, ``after_step`` and
        ``extra_upload`` do something for this instance: the batched engine calls only these on its
        per-client views (each call costs a view's gradients pointed at the stacked rows and
        collected back). Default: those this class overrides. An algorithm that forwards hooks
        (HBN to its solver) names the ones its options use."""
        return frozenset(h for h in ("client_start", "adjust_grads", "after_step", "extra_upload")
                         if getattr(type(self), h) is not getattr(Algorithm, h))

    # -- hooks ------------------------------------------------------------------------------
    # Server hooks get the :class:`~bnfl.fl.context.ServerContext`, client hooks a
    # :class:`~bnfl.fl.context.ClientContext`; no hook sees the backend that runs it. State is a
    # value, never an attribute: ``server.state`` (the server's), ``client.state`` (a client's,
    # handed in at its round and taken back after ``extra_upload``) and ``client.scratch`` (a
    # client's round).
    def begin_round(self, server: ServerContext, r: int, clients: Sequence[int],
                    state: Mapping[str, Tensor]) -> dict[str, Tensor] | None:
        """Before the broadcast of round ``r``: entries of the global ``state`` to replace (e.g.
        FedACG's lookahead, DecoupledBN's recalibrated statistics), or ``None``."""
        return None

    def client_start(self, client: ClientContext, r: int, model: nn.Module) -> None:
        """After the client loaded the downloaded model, before local training."""

    def local_loss(self, client: ClientContext, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """The loss on batch ``(x, y)`` whose backward gives the local step's gradients
        (default: ``client.loss_fn(model(x), y)``; MOON adds its contrastive term, FedSAM
        evaluates at the perturbed weights). Not used by the coupled first step of FedTAN."""
        return client.loss_fn(model(x), y)

    def adjust_grads(self, client: ClientContext, model: nn.Module) -> None:
        """Modify ``p.grad`` before each local optimizer step (FedProx, SCAFFOLD)."""

    def after_step(self, client: ClientContext, t: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                   coupled: CoupledStep | None) -> None:
        """After the client's local step ``t`` (1-based); ``coupled`` is the round's coupled first
        step (:func:`bnfl.fedtan.coupled_step`) or ``None`` (FedTAN's reference-code variants)."""

    def extra_upload(self, client: ClientContext, model: nn.Module, steps: int, lr: float) -> dict[str, Tensor]:
        """Tensors uploaded with the model (prefixed keys, never model keys)."""
        return {}

    def initial_momentum(self, client: ClientContext) -> dict[str, Tensor] | None:
        """The SGD momentum buffers (by parameter name) this client's optimizer starts its round
        from, or ``None`` (zeros; default: :attr:`momentum_policy`)."""
        return self.momentum_policy.initial(client)

    def final_momentum(self, client: ClientContext, momentum: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
        """At the end of local training: ``momentum()`` gives the optimizer's buffers (by parameter
        name); keep them in ``client.state`` and/or return tensors to upload (prefixed keys;
        default: :attr:`momentum_policy`)."""
        return self.momentum_policy.final(client, momentum)

    def momentum_download(self, server: ServerContext) -> dict[str, Tensor]:
        """Momentum buffers broadcast with the model (prefixed keys; default: :attr:`momentum_policy`)."""
        return self.momentum_policy.download(server)

    def aggregate_momentum(self, server: ServerContext, weights: Sequence[float],
                           uploads: Sequence[Mapping[str, Tensor]]) -> dict[str, Any]:
        """After :meth:`aggregate`: the server's momentum from the uploads, as the server-state
        entries it returns (the round puts them into the server state; default: :attr:`momentum_policy`)."""
        return self.momentum_policy.aggregate(server, weights, uploads)

    def extra_download(self, server: ServerContext) -> dict[str, Tensor]:
        """Tensors broadcast with the model (prefixed keys)."""
        return {}

    def aggregate(self, server: ServerContext, state: Mapping[str, Tensor], clients: Sequence[int],
                  weights: Sequence[float], uploads: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """The new global state from the gathered uploads (default: the weighted average of the
        uploaded keys, FedTAN eq. 7) with the new server state (:class:`Aggregated`: the
        algorithm's own state, SCAFFOLD's ``c``, FedAdam's moments, returned, never written into
        ``server.state`` nor kept in an attribute; by default ``server.state`` as it stands).
        Pure: neither ``state``, ``uploads`` nor ``server.state`` is modified."""
        keys = server.upload_keys
        if server.frozen:  # frozen statistics are still sent (FedTAN Table 4) but kept bit-exact
            keys = [k for k in keys if k not in server.groups["bn_stats"]]
        return Aggregated({**state, **weighted_sum([{k: u[k] for k in keys} for u in uploads], weights)}, server.state)

    # -- statistics requests (rounds without local training) ------------------------------------
    def client_statistics(self, client: ClientContext, model: nn.Module, kind: str) -> dict[str, Tensor]:
        """A client's answer to the server's :attr:`ServerContext.request <bnfl.fl.context.ServerContext.request>`
        of ``kind``, computed on ``model`` (the requested state over the client's local state)."""
        raise NotImplementedError(f"{type(self).__name__} answers no statistics request (asked for {kind!r})")

    def statistics_only_round(self) -> bool:
        """Whether the run ends with a statistics-only round ``T+1`` (HBN): the backend broadcasts
        the model, gathers :meth:`client_statistics` of kind ``"final"`` (tag ``"statistics"``)
        from the last round's clients and sets the state to :meth:`aggregate_statistics`."""
        return False

    def aggregate_statistics(self, server: ServerContext, state: Mapping[str, Tensor], clients: Sequence[int],
                             weights: Sequence[float], uploads: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """The new global state from the uploads of the statistics-only round (pure)."""
        raise NotImplementedError(f"{type(self).__name__} has no statistics-only round")

    def evaluation_state(self, server: ServerContext, state: Mapping[str, Tensor],
                         clients: Sequence[int]) -> Mapping[str, Tensor]:
        """The state the global model is evaluated with after a round with ``clients`` (default:
        ``state``; HBN's ``eval_stats="recompute"`` asks the clients for fresh statistics)."""
        return state

    def state_dict(self) -> dict[str, Any]:
        """Server-side state kept on the object, for checkpoints (default: none). bnfl's own
        algorithms keep none: their server state is ``server.state`` and a client's is
        ``client.state`` (:mod:`bnfl.fl.context`), which every backend stores and checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
