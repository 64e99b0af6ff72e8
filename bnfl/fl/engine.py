"""The simulation engine: rounds of local training, aggregation, evaluation, history, checkpoints.

A round is one function, :func:`run_round`, read top to bottom: it takes the run's
:class:`~bnfl.fl.RunState` (the round number, the global state, the algorithm's server state, the
last round's participants) and returns the next one with the round's history row, calling the
:class:`~bnfl.fl.clients.Clients` it is given for the clients' side: in this process one by one or
batched, on torch.distributed ranks (:class:`~bnfl.fl.distributed.RankClients`) or on Flower's
nodes (:class:`~bnfl.fl.flower.FlowerClients`). :func:`run_statistics_round` is the
statistics-only round. A :class:`Simulation` holds the current RunState, the clients' persistent
state (local groups, momentum buffers, batch cursors: :class:`~bnfl.fl._client_work.ClientWork`)
and a :class:`~bnfl.fl.comm.Channel` through which every exchange goes, and adds steps 5-6 around
each round. A round ``r`` (1-based):

1. the round's clients are drawn (seeded; :func:`bnfl.data.partition.participation`) and the
   algorithm describes the round's messages (:class:`~bnfl.fl.RoundPlan`), which the engine obeys;
2. the server broadcasts every state key that is not client-local (plus algorithm extras);
3. each client loads what it received over its own local state and takes ``E`` local SGD steps
   (``local_unit="steps"``) or epochs; an algorithm that couples the first step across clients
   (FedTAN) hands the engine its step (:meth:`Algorithm.coupled_step <bnfl.fl.Algorithm.coupled_step>`),
   which the engine runs with its exchange (:mod:`bnfl.fl.coupled`); frozen-statistics phases put BN layers in eval mode;
4. the clients upload (one ``gather`` = one communication round) and the algorithm aggregates;
5. the round hooks run; the global (and, for personalised algorithms, every client's) model is
   evaluated;
6. the row is appended to the :class:`History`; a checkpoint is written (:mod:`bnfl.fl._checkpoint`).

Determinism: batch order depends only on ``(seed, client, epoch)``, participation only on
``(seed, round)``; the torch RNG state is checkpointed, so a resumed run reproduces the
uninterrupted one bitwise on CPU (time fields aside).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bnfl import _folder_lock
from bnfl._progress import bar_options
from bnfl.data.partition import Participation
from bnfl.fedtan import CoupledStep, Exchange
from bnfl.fl import fast_path
from bnfl.fl._checkpoint import CheckpointMixin
from bnfl.fl._client_work import ClientWork
from bnfl.fl._evaluate import EvaluationMixin, _cross_entropy, accuracy, ema_global_stats
from bnfl.fl._run import TIME_FIELDS, DivergenceError, FederatedData, History, TrainConfig
from bnfl.fl.algorithms import Algorithm, CoupledFirstStep
from bnfl.fl.batched import BatchedClients
from bnfl.fl.batched_choice import choose
from bnfl.fl.clients import Clients, Sequential
from bnfl.fl.comm import Channel
from bnfl.fl.context import ServerContext
from bnfl.fl.coupled import channel_exchange
from bnfl.fl.run_state import RunState
from bnfl.nn import unfreeze_bn_stats

__all__ = ["TrainConfig", "FederatedData", "History", "RunState", "Simulation", "DivergenceError", "TIME_FIELDS",
           "ema_global_stats", "accuracy", "run_round", "run_statistics_round"]


def run_round(state: RunState, r: int, *, algorithm: Algorithm, clients: Clients, server: ServerContext,
              channel: Channel, participation: Participation) -> tuple[RunState, dict[str, Any]]:
    """Round ``r`` (1-based) from ``state``: the module docstring's steps 1-4.

    Parameters
    ----------
    state : RunState
        The run after round ``r - 1``; not changed.
    r : int
    algorithm : Algorithm
    clients : Clients
        Who trains the clients (:mod:`bnfl.fl.clients`).
    server : ServerContext
        What the algorithm's hooks see of the server; the round sets its ``round``, ``frozen`` and
        ``state`` (a copy of ``state.server_state`` the hooks then write).
    channel : Channel
        Through which the broadcast and the uploads go (and are counted).
    participation : Participation
        Each round's participants (seeded: :func:`bnfl.data.partition.participation`).

    The round passes values: ``clients`` get the round's plan (what a client's epilogue uploads,
    whether BN is frozen) and the global state the clients start from (after the algorithm's
    :meth:`~bnfl.fl.Algorithm.begin_round`: a client that receives nothing trains from it, a coupled
    first step loads it) as arguments of :meth:`Clients.exchange <bnfl.fl.clients.Clients.exchange>`
    and :meth:`Clients.train <bnfl.fl.clients.Clients.train>`; no callback reaches back into a run.

    Returns
    -------
    state : RunState
        The run after round ``r``.
    row : dict
        The round's history row before its evaluation.
    """
    clients.begin_round(r)
    # 1. who takes part, with which weights and rate; what the algorithm's round sends
    participants = [int(c) for c in participation[r - 1]]
    p = server.weights(participants)
    lr = server.config.lr_at(r)
    server.round, server.state = r, dict(state.server_state)
    global_state = state.global_state
    update = algorithm.begin_round(server, r, participants, global_state)
    if update:
        global_state = {**global_state, **update}
    plan = algorithm.round_plan(r)
    server.frozen = plan.freeze_bn
    # 2. the broadcast
    if plan.download:
        payload = {k: global_state[k] for k in server.download_keys}
        payload.update(algorithm.extra_download(server))
        payload.update(algorithm.momentum_download(server))
        received = channel.broadcast(payload, len(participants))
    else:
        received = [{} for _ in participants]
    # 3. the clients' local steps, the first one coupled across them when the algorithm says so
    step = plan.coupled
    first = clients.exchange(step, participants, p, plan=plan, start=global_state) if step is not None else None
    answered, uploads, losses = clients.train(r, plan, participants, received, lr=lr, start=global_state, first=first)
    if answered != participants:  # a backend reported failed clients: the rest, weights re-normalised
        participants, p = answered, server.weights(answered)
    # 4. the upload and the algorithm's aggregation (or, where the server trains, its trained model)
    if plan.server_trains:
        global_state = {k: uploads[0][k] for k in global_state}
    server_state = server.state
    if plan.upload:
        uploads = channel.gather(uploads)
        new = algorithm.aggregate(server, global_state, participants, p, uploads)
        # the new server state: the one the algorithm returns with the global state (Aggregated; a
        # plain mapping, an algorithm of older bnfl: server.state as its hooks left it) and the momentum
        server_state = {**getattr(new, "server_state", server.state), **(algorithm.aggregate_momentum(server, p, uploads) or {})}
        global_state = dict(new)
    row = {"round": r, "lr": lr, "clients": participants, "train_loss": float(np.dot(p, losses)),
           "frozen_stats": bool(plan.freeze_bn), "coupled_first_step": step.name if step is not None else ""}
    return RunState(global_state, round=r, server_state=server_state, participants=tuple(participants)), row


def run_statistics_round(state: RunState, *, algorithm: Algorithm, clients: Clients, server: ServerContext,
                         channel: Channel, participation: Participation) -> tuple[RunState, dict[str, Any]]:
    """The algorithm's statistics-only round after ``state.round`` (HBN's T+1,
    :meth:`Algorithm.statistics_only_round <bnfl.fl.Algorithm.statistics_only_round>`): the broadcast,
    statistics of kind ``"final"`` from the last round's clients, then
    :meth:`~bnfl.fl.Algorithm.aggregate_statistics`; the weights are not changed. Returns the state
    after it and its history row before its evaluation (arguments as :func:`run_round`'s)."""
    r = state.round + 1
    participants = [int(c) for c in participation[(r - 2) % len(participation)]]
    server.round, server.state = r, dict(state.server_state)
    channel.broadcast({k: state.global_state[k] for k in server.download_keys}, len(participants))
    uploads = channel.gather(clients.request("final", participants, state.global_state), tag="statistics")
    new = algorithm.aggregate_statistics(server, state.global_state, participants,
                                         server.weights(participants), uploads)
    server_state, global_state = getattr(new, "server_state", server.state), dict(new)
    row = {"round": r, "lr": 0.0, "clients": participants, "train_loss": None, "frozen_stats": False,
           "coupled_first_step": "", "statistics_only": True}
    return RunState(global_state, round=r, server_state=server_state, participants=tuple(participants)), row


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
    run_state : RunState
        The run between two rounds (:class:`~bnfl.fl.RunState`): what :func:`run_round` takes and
        returns, and what a checkpoint saves; ``global_state``, ``round`` are views of it.
    participation : Participation
        Each round's participants (seeded; drawn when a round asks).
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
        self._adopt(RunState(self.base_state))  # round 0: the initial model, no server state, no participants
        #: each round's participants, drawn when the round asks (nothing allocated per round up front;
        #: a pooled partition's one client takes part in every round whatever the rate)
        self.participation = Participation(self.num_clients, self.config.participation, self.config.rounds,
                                           self.config.seed)
        self.round_hooks: list[Callable[[Simulation, int], Mapping[str, Any] | None]] = []  # see Attributes

        #: the batched engine of the clients' local steps (:mod:`bnfl.fl.batched`), or None; the
        #: choice and its reason in ``history.meta["batched"]`` (:func:`bnfl.fl.batched_choice.choose`)
        self.batched_engine, self.history.meta["batched"] = choose(self, BatchedClients)
        self.here: Clients = self.batched_engine if self.batched_engine is not None else Sequential(self)
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
                       f"diverged (lower the learning rate)")

    def _stop(self, why: str) -> None:
        """Mark the history as stopped by divergence, write it (with a checkpoint folder) and raise."""
        d = self.config.checkpoint_dir if self.clients.writes else None  # where _write_history writes
        why += f"; its {len(self.history)} completed rounds are saved in " + (
            str(Path(d) / "history.json") if d else "the error's .history (DivergenceError.history)")
        self.history.meta["stopped"] = {"reason": "diverged", "detail": why}
        self.write_history()
        raise DivergenceError(why, self.history)

    # -- the run's state ------------------------------------------------------------------------
    @property
    def global_state(self) -> dict[str, Tensor]:
        """The global model's state (:attr:`RunState.global_state <bnfl.fl.RunState.global_state>`)."""
        return self.run_state.global_state

    @global_state.setter
    def global_state(self, value: Mapping[str, Tensor]) -> None:
        self._adopt(dataclasses.replace(self.run_state, global_state=value))

    @property
    def round(self) -> int:
        """The last completed round (:attr:`RunState.round <bnfl.fl.RunState.round>`)."""
        return self.run_state.round

    @round.setter
    def round(self, value: int) -> None:
        self.run_state = dataclasses.replace(self.run_state, round=int(value))

    @property
    def round_clients(self) -> list[int]:
        """The participants of the last round (:attr:`RunState.participants <bnfl.fl.RunState.participants>`)."""
        return list(self.run_state.participants)

    def _adopt(self, state: RunState) -> None:
        """Hold ``state`` as the run's: the algorithm's hooks see its server state (:attr:`server`),
        this process's clients its global state (:attr:`base_state`)."""
        self.run_state = state
        self.server.state = state.server_state
        self.base_state = state.global_state

    # -- one round ---------------------------------------------------------------------------
    def _train_round(self, r: int) -> dict[str, Any]:
        """Round ``r`` over this run's state (:func:`run_round`); returns the round's history row
        before its evaluation."""
        state, row = run_round(self.run_state, r, algorithm=self.algorithm, clients=self.clients, server=self.server,
                               channel=self.channel, participation=self.participation)
        self._adopt(state)
        return row

    def coupled_step(self, step: CoupledFirstStep, clients: list[int], weights: Sequence[float],
                     exchange: Exchange | None) -> CoupledStep:
        """The algorithm's coupled first ``step`` of ``clients`` (this process's participants, each
        drawing its next batch; weights ``weights``) from the global state, with ``exchange`` (None:
        the channel's all-reduce, :func:`bnfl.fl.coupled.channel_exchange`)."""
        unfreeze_bn_stats(self.work_model)
        fast_path.load_state(self.work_model, self.base_state)  # what every client starts from
        batches = [self.next_batch(c) for c in clients]
        return step.run(self.work_model, batches, self.loss_fn, weights,
                        exchange=channel_exchange(self.channel) if exchange is None else exchange)

    def _statistics_round(self) -> None:
        """The algorithm's statistics-only round (:func:`run_statistics_round`), evaluated; appends a
        history row."""
        t0 = time.perf_counter()
        state, row = run_statistics_round(self.run_state, algorithm=self.algorithm, clients=self.clients,
                                          server=self.server, channel=self.channel, participation=self.participation)
        self._adopt(state)
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
        last = cfg.rounds if stop_after is None else min(cfg.rounds, stop_after)
        rounds = range(self.round + 1, last + 1)
        bar = None
        if cfg.progress:
            # Only a shown bar is built: any tqdm, a disabled one too, takes tqdm's lock, which is shared
            # with forked processes, and starts its monitor thread. A forked run killed while it held that
            # lock (a worker stopped with kill -9) would hang every later run forked from the same parent.
            # tqdm.auto probes for a notebook's widgets: loaded when a run starts, not with bnfl.
            from tqdm.auto import tqdm

            bar = tqdm(rounds, desc=self.algorithm.name, leave=False, **bar_options())  # a log: every 30 s
        for r in rounds if bar is None else bar:
            t0 = time.perf_counter()
            row = self._train_round(r)
            for hook in self.round_hooks:
                row.update(hook(self, r) or {})
            if r % cfg.eval_every == 0 or r > cfg.rounds - cfg.eval_last or r == cfg.rounds:
                row.update(self.evaluate())
            row.update(self._comm_fields())
            row["round_time"] = time.perf_counter() - t0
            row["wall_time"] = (self.history.rows[-1]["wall_time"] if self.history.rows else 0.0) + row["round_time"]
            self.history.rows.append(row)
            self._check_max_loss(row)
            if bar is not None and "test_acc" in row:
                bar.set_postfix(loss=f"{row['train_loss']:.3f}", acc=f"{row['test_acc']:.3f}", refresh=False)
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
