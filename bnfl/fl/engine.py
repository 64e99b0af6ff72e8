"""The simulation engine: rounds of local training, aggregation, evaluation, history, checkpoints.

One :class:`Simulation` holds the global model, the clients' persistent state (local groups,
momentum buffers, batch cursors: :class:`~bnfl.fl._client_work.ClientWork`) and a
:class:`~bnfl.fl.comm.Channel` through which every exchange goes, and runs one round function
(:meth:`Simulation._train_round`) that calls the :class:`~bnfl.fl.clients.Clients` it was given
for the clients' side: in this process one by one or batched, on torch.distributed ranks
(:class:`~bnfl.fl.distributed.RankClients`) or on Flower's nodes
(:class:`~bnfl.fl.flower.FlowerClients`). A round ``r`` (1-based):

1. the round's clients are drawn (seeded; :func:`bnfl.data.partition.participation`) and the
   algorithm describes the round's messages (:class:`~bnfl.fl.RoundPlan`), which the engine obeys;
2. the server broadcasts every state key that is not client-local (plus algorithm extras);
3. each client loads what it received over its own local state and takes ``E`` local SGD steps
   (``local_unit="steps"``) or epochs; an algorithm that couples the first step across clients
   (FedTAN) hands the engine its step (:meth:`Algorithm.coupled_step <bnfl.fl.Algorithm.coupled_step>`),
   which the engine runs with its exchange (:mod:`bnfl.fl.coupled`); frozen-statistics phases put BN layers in eval mode;
4. the clients upload (one ``gather`` = one communication round) and the algorithm aggregates;
5. the global (and, for personalised algorithms, every client's) model is evaluated and a row is
   appended to the :class:`History`; a checkpoint is written.

Determinism: batch order depends only on ``(seed, client, epoch)``, participation only on
``(seed, round)``; the torch RNG state is checkpointed, so a resumed run reproduces the
uninterrupted one bitwise on CPU (time fields aside).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bnfl import _folder_lock
from bnfl.data.partition import Participation
from bnfl.fedtan import CoupledStep, Exchange
from bnfl.fl._checkpoint import CheckpointMixin
from bnfl.fl._client_work import ClientWork
from bnfl.fl._evaluate import EvaluationMixin, _cross_entropy, accuracy, ema_global_stats
from bnfl.fl._run import TIME_FIELDS, DivergenceError, FederatedData, History, TrainConfig
from bnfl.fl.algorithms import Algorithm, CoupledFirstStep
from bnfl.fl.batched import choose
from bnfl.fl.clients import Clients, Sequential
from bnfl.fl.comm import Channel
from bnfl.fl.coupled import channel_exchange
from bnfl.nn import unfreeze_bn_stats

__all__ = ["TrainConfig", "FederatedData", "History", "Simulation", "DivergenceError", "TIME_FIELDS", "ema_global_stats", "accuracy"]


class Simulation(ClientWork, CheckpointMixin, EvaluationMixin):
    """A federated simulation.

    Parameters
    ----------
    model : nn.Module
        Initial global model (copied; not modified).
    data : FederatedData
    algorithm : Algorithm
    config : TrainConfig
    loss_fn : callable, default cross-entropy
        ``loss_fn(output, y)`` -> batch-mean loss.
    channel : Channel, optional
        Through which every exchange is counted (default: a new one).
    clients : Clients, optional
        Where the clients train (:class:`~bnfl.fl.clients.Clients`: a torch.distributed rank's
        :class:`~bnfl.fl.distributed.RankClients`, Flower's :class:`~bnfl.fl.flower.FlowerClients`);
        default: in this process, batched or one by one as ``config.batched`` chooses.

    Attributes
    ----------
    clients : Clients
        The backend every round calls for its clients' work.
    here : Clients
        This process's clients' engine: the batched one (:mod:`bnfl.fl.batched`) or
        :class:`~bnfl.fl.clients.Sequential`; ``clients`` itself in one process.
    round_hooks : list of callable
        Observers ``hook(sim, r) -> mapping or None`` called after round ``r``'s training, before its
        evaluation, on every engine (each rank; Flower's ServerApp); a returned mapping is added to the
        round's history row (e.g. :class:`bnfl.fl.statistics_log.StatisticsLog`). Empty by default.
    """

    def __init__(self, model: nn.Module, data: FederatedData, algorithm: Algorithm,
                 config: TrainConfig | None = None, *, loss_fn: Callable[[Tensor, Tensor], Tensor] = _cross_entropy,
                 channel: Channel | None = None, clients: Clients | None = None) -> None:
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"algorithm must be a bnfl.fl.Algorithm, got {type(algorithm).__name__}")
        if loss_fn is _cross_entropy:
            for name in ("y_train", "y_test"):
                y = getattr(data, name, None)  # a cross-silo rank's view holds no training labels
                if y is not None and y.is_floating_point() and y.dim() == 1:  # (N, C) float targets are class probabilities
                    raise ValueError(f"{name} holds {str(y.dtype).removeprefix('torch.')} labels; the default loss "
                                     f"(cross-entropy) needs integer class labels: pass {name}.long(), or give "
                                     f"loss_fn= a loss for float targets")
        self._given = clients
        self._set_up_clients(model, data, algorithm, config or TrainConfig(), loss_fn=loss_fn,
                             samples=(clients if clients is not None else Sequential(self)).samples,
                             request=self._request)
        self.channel = channel or Channel()
        cfg_meta = {k: v for k, v in dataclasses.asdict(self.config).items()
                    if k != "schedule" and not (k == "max_loss" and v is None)}  # off: the meta of older bnfl
        cfg_meta["schedule"] = dataclasses.asdict(self.config.schedule) if self.config.schedule else None
        self.history = History(meta={"algorithm": repr(algorithm), "clients": self.num_clients,
                                     "client_sizes": [len(c) for c in self.client_indices], "config": cfg_meta})
        self.round = 0
        self._round_clients: list[int] = []  # the participants of the last round (evaluation statistics)
        #: each round's participants, drawn when the round asks (nothing allocated per round up front;
        #: a pooled partition's one client takes part in every round whatever the rate)
        self._participants = Participation(self.num_clients, self.config.participation, self.config.rounds,
                                           self.config.seed)
        self.round_hooks: list[Callable[[Simulation, int], Mapping[str, Any] | None]] = []  # see Attributes

        #: the batched engine of the clients' local steps (:mod:`bnfl.fl.batched`), or None; the
        #: choice and its reason in ``history.meta["batched"]`` (:func:`bnfl.fl.batched.choose`)
        self._batched, self.history.meta["batched"] = choose(self)
        self.here: Clients = self._batched if self._batched is not None else Sequential(self)
        self.clients: Clients = clients if clients is not None else self.here
        self.clients.attach(self)
        self.history.meta.update(self.clients.meta())

    @property
    def clients_elsewhere(self) -> bool:
        """Whether the clients train in other processes this one messages (Flower's nodes)."""
        return self._given is not None and self._given.elsewhere

    # -- weights and batches ---------------------------------------------------------------
    def weights(self, clients: Sequence[int]) -> list[float]:
        """Aggregation weights p_i over ``clients`` (size-proportional or equal)."""
        return self.server.weights(clients)

    def _request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor], *,
                 tag: str | None = "statistics") -> list[dict[str, Tensor]]:
        """The backend side of :attr:`ServerContext.request <bnfl.fl.context.ServerContext.request>`:
        each of ``clients`` answers on ``state`` over its local state (:meth:`Clients.request
        <bnfl.fl.clients.Clients.request>`); the answers in the order of ``clients``, gathered
        through the channel with ``tag`` (``None``: not counted)."""
        uploads = self.clients.request(kind, clients, state)
        return self.channel.gather(uploads, tag=tag) if tag is not None else uploads

    def _check_max_loss(self, row: Mapping[str, Any]) -> None:
        """The divergence stop of ``config.max_loss`` (off by default; ``bnfl train`` turns it on)."""
        bound, loss = self.config.max_loss, row.get("train_loss")
        if bound is not None and loss is not None and not loss <= bound:
            self._stop(f"round {row['round']}: the training loss {loss:.4g} passed max_loss = {bound:g}; training "
                       f"diverged (lower the learning rate). {len(self.history)} completed rounds kept in .history")

    def _stop(self, why: str) -> None:
        """Mark the history as stopped by divergence, write it (with a checkpoint folder) and raise."""
        self.history.meta["stopped"] = {"reason": "diverged", "detail": why}
        self._write_history()
        raise DivergenceError(why, self.history)

    # -- one round ---------------------------------------------------------------------------
    def _train_round(self, r: int) -> dict[str, Any]:
        """Round ``r`` (the module docstring's steps 1-4) over this run's state, the clients' work
        done by :attr:`clients`; returns the round's history row before its evaluation."""
        alg, ch, backend = self.algorithm, self.channel, self.clients
        backend.begin_round(r)
        # 1. who takes part, with which weights and rate; what the algorithm's round sends
        clients = self._round_clients = [int(c) for c in self._participants[r - 1]]
        p = self.weights(clients)
        lr = self.config.lr_at(r)
        self.server.round = r
        update = alg.begin_round(self.server, r, clients, self.global_state)
        if update:
            self.global_state = {**self.global_state, **update}
        plan = self.plan = alg.round_plan(r)
        self.frozen = self.server.frozen = plan.freeze_bn
        # 2. the broadcast
        if plan.download:
            payload = {k: self.global_state[k] for k in self.download_keys}
            payload.update(alg.extra_download(self.server))
            payload.update(alg.momentum_download(self.server))
            received = ch.broadcast(payload, len(clients))
        else:
            received = [{} for _ in clients]
        # 3. the clients' local steps, the first one coupled across them when the algorithm says so
        step = plan.coupled
        first = backend.exchange(step, clients, p, frozen=plan.freeze_bn) if step is not None else None
        answered, uploads, losses = backend.train(r, clients, received, lr=lr, frozen=plan.freeze_bn, first=first)
        if answered != clients:  # a backend reported failed clients: the rest, weights re-normalised
            clients = self._round_clients = answered
            p = self.weights(clients)
        # 4. the upload and the algorithm's aggregation
        if plan.upload:
            uploads = ch.gather(uploads)
            self.global_state = alg.aggregate(self.server, self.global_state, clients, p, uploads)
            alg.aggregate_momentum(self.server, p, uploads)
        return {"round": r, "lr": lr, "clients": clients,
                "train_loss": float(np.dot(p, losses)), "frozen_stats": bool(plan.freeze_bn),
                "coupled_first_step": step.name if step is not None else ""}

    def coupled_step(self, step: CoupledFirstStep, clients: list[int], weights: Sequence[float],
                     exchange: Exchange | None) -> CoupledStep:
        """The algorithm's coupled first ``step`` of ``clients`` (this process's participants, each
        drawing its next batch; weights ``weights``) from the global state, with ``exchange`` (None:
        the channel's all-reduce, :func:`bnfl.fl.coupled.channel_exchange`)."""
        unfreeze_bn_stats(self._work)
        self._work.load_state_dict(self.global_state)  # what every client starts from
        batches = [self.next_batch(c) for c in clients]
        return step.run(self._work, batches, self.loss_fn, weights,
                        exchange=channel_exchange(self.channel) if exchange is None else exchange)

    def _statistics_round(self) -> None:
        """The algorithm's statistics-only round (HBN's T+1, :meth:`Algorithm.statistics_only_round
        <bnfl.fl.Algorithm.statistics_only_round>`): broadcast, statistics of kind ``"final"`` from the
        last round's clients, :meth:`~bnfl.fl.Algorithm.aggregate_statistics`; the weights are not
        changed. Appends a history row."""
        alg = self.algorithm
        r = self.round + 1
        clients = [int(c) for c in self._participants[(r - 2) % len(self._participants)]]
        t0 = time.perf_counter()
        self.server.round = r
        self._round_clients = clients
        self.channel.broadcast({k: self.global_state[k] for k in self.download_keys}, len(clients))
        uploads = self._request("final", clients, self.global_state, tag="statistics")
        self.global_state = alg.aggregate_statistics(self.server, self.global_state, clients, self.weights(clients), uploads)
        self.round = r
        row = {"round": r, "lr": 0.0, "clients": clients, "train_loss": None, "frozen_stats": False,
               "coupled_first_step": "", "statistics_only": True}
        row.update(self.evaluate())
        row.update(self._comm_fields())
        row["round_time"] = time.perf_counter() - t0
        row["wall_time"] = row["round_time"]
        self.history.rows.append(row)

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, *, resume: bool = False, stop_after: int | None = None, overwrite: bool = False) -> History:
        """Run rounds ``self.round + 1 .. config.rounds`` and return the :class:`History`.

        Parameters
        ----------
        resume, overwrite : bool, default False
            Continue from ``config.checkpoint_dir``'s checkpoint (one of another run is an error);
            replace the run there (a new run into a run's folder is an error: :mod:`bnfl.fl._rundir`).
        stop_after : int, optional
            Stop after this round (simulates an interruption; the checkpoint stays resumable).

        Raises
        ------
        DivergenceError
            A loss became non-finite, or a round's training loss passed ``config.max_loss``;
            ``history.json`` (with a checkpoint folder) then holds the completed rounds and
            ``meta["stopped"]`` says why.
        bnfl._folder_lock.FolderBusyError
            Another process is writing to ``config.checkpoint_dir``.
        """
        with _folder_lock.locked(self.config.checkpoint_dir if self.clients.writes else None), self.clients.running():
            return self._run(resume=resume, stop_after=stop_after, overwrite=overwrite)

    def _run(self, *, resume: bool, stop_after: int | None, overwrite: bool) -> History:
        cfg = self.config
        loaded = self._start(resume=resume, overwrite=overwrite)
        if not loaded and self.round == 0:
            torch.manual_seed(cfg.seed)
        from tqdm.auto import (
            tqdm,  # probes for a notebook's widgets: loaded when a run starts, not with bnfl
        )

        last = cfg.rounds if stop_after is None else min(cfg.rounds, stop_after)
        bar = tqdm(range(self.round + 1, last + 1), desc=self.algorithm.name, disable=not cfg.progress, leave=False)
        for r in bar:
            t0 = time.perf_counter()
            row = self._train_round(r)
            for hook in self.round_hooks:
                row.update(hook(self, r) or {})
            self.round = r
            if r % cfg.eval_every == 0 or r > cfg.rounds - cfg.eval_last or r == cfg.rounds:
                row.update(self.evaluate())
            row.update(self._comm_fields())
            row["round_time"] = time.perf_counter() - t0
            row["wall_time"] = (self.history.rows[-1]["wall_time"] if self.history.rows else 0.0) + row["round_time"]
            self.history.rows.append(row)
            self._check_max_loss(row)
            if "test_acc" in row:
                bar.set_postfix(loss=f"{row['train_loss']:.3f}", acc=f"{row['test_acc']:.3f}")
            if cfg.checkpoint_dir:
                self.save_checkpoint(cfg.checkpoint_dir)
        finished = self.round == cfg.rounds and (stop_after is None or stop_after >= cfg.rounds)
        if finished and self.algorithm.statistics_only_round() and not any(
                row.get("statistics_only") for row in self.history.rows):
            self._statistics_round()  # HBN's round T+1
            if cfg.checkpoint_dir:
                self.save_checkpoint(cfg.checkpoint_dir)
        return self.history

    def global_model(self) -> nn.Module:
        """A copy of the global model with the current global state."""
        m = copy.deepcopy(self.model)
        m.load_state_dict(self.global_state)
        return m

    def client_model(self, c: int) -> nn.Module:
        """A copy of client ``c``'s model (global state plus its local state)."""
        m = copy.deepcopy(self.model)
        m.load_state_dict(self.client_state(c))
        return m
