"""The simulation engine: rounds of local training, aggregation, evaluation, history, checkpoints.

One :class:`Simulation` holds the global model, the clients' persistent state (local groups,
momentum buffers, batch cursors) and a :class:`~bnfl.fl.comm.Channel` through which every
exchange goes. A round ``r`` (1-based):

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
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from bnfl import _folder_lock
from bnfl.data.datasets import as_index_array
from bnfl.data.partition import Participation
from bnfl.data.stored import decode, keep_or_move
from bnfl.fedtan import CoupledStep, Exchange
from bnfl.fl._checkpoint import CheckpointMixin
from bnfl.fl._evaluate import EvaluationMixin, _cross_entropy, accuracy, ema_global_stats
from bnfl.fl._local import LocalOptimizerMixin
from bnfl.fl._run import TIME_FIELDS, DivergenceError, FederatedData, History, TrainConfig
from bnfl.fl.algorithms import Algorithm, CoupledFirstStep
from bnfl.fl.augment import make_augmenter
from bnfl.fl.batch_orders import BatchOrders
from bnfl.fl.batched import choose
from bnfl.fl.comm import Channel
from bnfl.fl.context import ClientContext, ServerContext
from bnfl.fl.coupled import channel_exchange
from bnfl.fl.state import state_groups
from bnfl.nn import unfreeze_bn_stats

__all__ = ["TrainConfig", "FederatedData", "History", "Simulation", "DivergenceError", "TIME_FIELDS", "ema_global_stats", "accuracy"]


class Simulation(CheckpointMixin, EvaluationMixin, LocalOptimizerMixin):
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

    Attributes
    ----------
    clients_elsewhere : bool, class attribute
        Whether this backend's clients train in other processes that it messages (Flower's
        ServerApp): nothing of theirs can be batched here.
    exchanges_in_process : bool, class attribute
        Whether a coupled first step's exchanges are this process's channel all-reduce (the
        simulator's; a torch.distributed rank or Flower supplies its own exchange), so the
        batched engine may run the step itself.
    round_hooks : list of callable
        Observers ``hook(sim, r) -> mapping or None`` called after round ``r``'s training, before its
        evaluation, on every engine (each rank; Flower's ServerApp); a returned mapping is added to the
        round's history row (e.g. :class:`bnfl.fl.statistics_log.StatisticsLog`). Empty by default.
    """

    clients_elsewhere: ClassVar[bool] = False
    exchanges_in_process: ClassVar[bool] = True

    def __init__(self, model: nn.Module, data: FederatedData, algorithm: Algorithm,
                 config: TrainConfig | None = None, *, loss_fn: Callable[[Tensor, Tensor], Tensor] = _cross_entropy,
                 channel: Channel | None = None) -> None:
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"algorithm must be a bnfl.fl.Algorithm, got {type(algorithm).__name__}")
        if loss_fn is _cross_entropy:
            for name in ("y_train", "y_test"):
                y = getattr(data, name, None)  # a cross-silo rank's view holds no training labels
                if y is not None and y.is_floating_point() and y.dim() == 1:  # (N, C) float targets are class probabilities
                    raise ValueError(f"{name} holds {str(y.dtype).removeprefix('torch.')} labels; the default loss "
                                     f"(cross-entropy) needs integer class labels: pass {name}.long(), or give "
                                     f"loss_fn= a loss for float targets")
        self.config = config or TrainConfig()
        self.algorithm = algorithm
        self.loss_fn = loss_fn
        self.channel = channel or Channel()
        self.device = torch.device(self.config.device)
        self.model_dtype = dtype = getattr(torch, self.config.dtype)
        self.model = copy.deepcopy(model).to(device=self.device, dtype=dtype)
        #: the training samples this process holds; ``_rows`` maps a sample id to its row (None: all, in order)
        self._rows: Tensor | None = None
        self.x_train, self.y_train = self._training_data(data, dtype)
        self.x_test = keep_or_move(data.x_test, self.device, dtype)  # stored uint8 pixels stay on the host
        self.y_test = data.y_test.to(self.device)
        self.data = data
        #: the clients' sample ids and the local batch size, as the algorithm partitions them at build
        #: time (centralized learning: all clients pooled into one, batch N*B)
        self.client_indices, self.batch_size = algorithm.partition(data.clients, self.config.batch_size)
        self.num_clients = len(self.client_indices)
        groups = state_groups(self.model)
        self.groups = groups
        keys = list(self.model.state_dict().keys())
        local = set(groups["bn_count"]).union(*(groups[g] for g in algorithm.local_state))
        server = set().union(*(groups[g] for g in algorithm.server_state)) - local
        self.local_keys = [k for k in keys if k in local]
        self.download_keys = [k for k in keys if k not in local]
        self.upload_keys = [k for k in keys if k not in local and k not in server]
        self.global_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.init_local = {k: self.global_state[k].clone() for k in self.local_keys}
        self.client_local: dict[int, dict[str, Tensor]] = {}
        self.client_algorithm: dict[int, dict[str, Any]] = {}  # each client's ClientContext.state
        self.cursors = {c: [0, 0] for c in range(self.num_clients)}  # epoch, batch position
        cfg_meta = {k: v for k, v in dataclasses.asdict(self.config).items()
                    if k != "schedule" and not (k == "max_loss" and v is None)}  # off: the meta of older bnfl
        cfg_meta["schedule"] = dataclasses.asdict(self.config.schedule) if self.config.schedule else None
        self.history = History(meta={"algorithm": repr(algorithm), "clients": self.num_clients,
                                     "client_sizes": [len(c) for c in self.client_indices], "config": cfg_meta})
        self.round = 0
        self.frozen = False
        #: the message plan of the current round (:meth:`Algorithm.round_plan <bnfl.fl.Algorithm.round_plan>`)
        self.plan = algorithm.round_plan(1)
        #: what the algorithm's server hooks see (:mod:`bnfl.fl.context`); they never see the Simulation
        self.server = ServerContext(model=self.model, config=self.config, groups=groups, upload_keys=self.upload_keys,
                                    download_keys=self.download_keys, local_keys=self.local_keys,
                                    client_sizes=[len(i) for i in self.client_indices], weighting=algorithm.weighting,
                                    device=self.device, request=self._request)
        self._round_clients: list[int] = []  # the participants of the last round (evaluation statistics)
        self._work = copy.deepcopy(self.model)
        self._eval_model = copy.deepcopy(self.model)
        self._orders = None  # the clients' batch orders (bnfl.fl.batch_orders.BatchOrders), on first use
        #: each round's participants, drawn when the round asks (nothing allocated per round up front;
        #: a pooled partition's one client takes part in every round whatever the rate)
        self._participants = Participation(self.num_clients, self.config.participation, self.config.rounds,
                                           self.config.seed)
        #: per BN layer, the union's element count of the coupled first step when this process
        #: holds only some of its clients (set by a distributed backend); None: sum the step's own
        self._union_count: dict[str, int] | None = None
        self.round_hooks: list[Callable[[Simulation, int], Mapping[str, Any] | None]] = []  # see Attributes

        #: training-time augmentation of every drawn batch (:mod:`bnfl.fl.augment`), or None
        self._augment = make_augmenter(self.config, data)

        #: the batched engine of the clients' local steps (:mod:`bnfl.fl.batched`), or None; the
        #: choice and its reason in ``history.meta["batched"]`` (:func:`bnfl.fl.batched.choose`)
        self._batched, self.history.meta["batched"] = choose(self)

    # -- weights and batches ---------------------------------------------------------------
    def weights(self, clients: Sequence[int]) -> list[float]:
        """Aggregation weights p_i over ``clients`` (size-proportional or equal)."""
        return self.server.weights(clients)

    def client_context(self, c: int, received: dict[str, Tensor] | None = None) -> ClientContext:
        """What the algorithm's client hooks see of client ``c`` (:class:`~bnfl.fl.context.ClientContext`)."""
        idx = np.asarray(self.client_indices[c])
        return ClientContext(server=self.server, client=c, indices=idx, received=received or {},
                             first_participation=c not in self.client_local, batch_size=min(self.batch_size, len(idx)),
                             loss_fn=self.loss_fn, data=lambda: self._client_data(c),
                             state=dict(self.client_algorithm.get(c, {})))

    def _training_data(self, data: FederatedData, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The training samples this process keeps, on its device (a distributed backend keeps only
        its clients' samples and sets ``_rows``)."""
        return keep_or_move(data.x_train, self.device, dtype), data.y_train.to(self.device)

    def _keep_clients_samples(self, data: FederatedData, clients: Sequence[int],
                              dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Only the training samples of ``clients`` (for backends whose process holds some clients:
        the rest is dropped before anything moves to the device); sets ``_rows``, which maps a
        sample id to its row here (-1: a sample this process does not hold)."""
        ids = np.unique(np.concatenate([np.asarray(data.clients[c]) for c in clients]))
        rows = torch.full((data.x_train.shape[0],), -1, dtype=torch.long)
        rows[torch.as_tensor(ids)] = torch.arange(len(ids))
        self._rows = rows.to(self.device)
        keep = torch.as_tensor(ids)
        return keep_or_move(data.x_train[keep], self.device, dtype), data.y_train[keep].to(self.device)

    def _samples(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """The training samples with ids ``ids`` (a 1-D integer tensor on the device)."""
        rows = ids if self._rows is None else self._rows.index_select(0, ids)
        x = self.x_train.index_select(0, rows.to(self.x_train.device))  # = x[rows], faster
        return self._decode(x), self.y_train.index_select(0, rows)

    def _decode(self, x: Tensor) -> Tensor:
        """Stored uint8 pixels standardised on the device (:mod:`bnfl.data.stored`); other data as it is."""
        return decode(x, self.data.stored_norm, self.device, self.model_dtype)

    def _client_data(self, c: int) -> tuple[Tensor, Tensor]:
        return self._samples(torch.as_tensor(self.client_indices[c], device=self.device))

    def _request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor], *,
                 tag: str | None = "statistics") -> list[dict[str, Tensor]]:
        """The backend side of :attr:`ServerContext.request <bnfl.fl.context.ServerContext.request>`:
        each of this process's ``clients`` answers on ``state`` over its local state; the answers of all
        ``clients`` in their order, gathered through the channel with ``tag`` (``None``: not counted).
        The statistics are the model's own: BN layers left frozen by a previous round's local steps
        (FixBN-type phases) are thawed first."""
        unfreeze_bn_stats(self._work)
        uploads = []
        for c in self._local_clients(clients):
            full = dict(state)
            full.update(self.client_local.get(c, self.init_local))
            self._work.load_state_dict(full)
            uploads.append(self.algorithm.client_statistics(self.client_context(c), self._work, kind))
        uploads, _ = self._collect(clients, uploads, [0.0] * len(uploads))
        return self.channel.gather(uploads, tag=tag) if tag is not None else uploads

    def _epoch_batches(self, c: int, epoch: int) -> list[Tensor]:
        # = list(iterate_batches(idx, min(B, n_c), seed=seed * 1_000_003 + c, epoch=epoch, drop_last=True)),
        # drawn for many clients and epochs at once (bitwise the same streams)
        if self._orders is None:
            self._orders = BatchOrders([as_index_array(i) for i in self.client_indices], self.batch_size,
                                       self.config.seed)
        return self._orders.batches(c, epoch, self.cursors)

    def next_batch(self, c: int) -> tuple[Tensor, Tensor]:
        """Client ``c``'s next mini-batch of its endless, epoch-shuffled stream (augmented when
        ``config.augment`` says so: :mod:`bnfl.fl.augment`)."""
        ids = self.next_batch_ids(c)
        x, y = self._samples(ids)
        return (x, y) if self._augment is None else (self._augment.augment(x, self._augment.drawn(self.cursors, c, len(ids))), y)

    def next_batch_ids(self, c: int) -> Tensor:
        """The sample ids of client ``c``'s next mini-batch (:meth:`next_batch` without the samples)."""
        epoch, pos = self.cursors[c]
        batches = self._epoch_batches(c, epoch)
        if pos >= len(batches):
            epoch, pos = epoch + 1, 0
            batches = self._epoch_batches(c, epoch)
        self.cursors[c] = [epoch, pos + 1]
        return batches[pos] if self.device.type == "cpu" else batches[pos].to(self.device)

    def _steps_this_round(self, c: int) -> int:
        if self.config.local_unit == "steps":
            return self.config.local_steps
        # epochs: finish the current epoch first so every round covers whole epochs
        epoch, pos = self.cursors[c]
        if pos > 0:
            self.cursors[c] = [epoch + 1, 0]
        return self.config.local_steps * len(self._epoch_batches(c, self.cursors[c][0]))

    # -- client state --------------------------------------------------------------------------
    def client_state(self, c: int) -> dict[str, Tensor]:
        """Full state_dict of client ``c``'s model: global values, then its local state."""
        state = dict(self.global_state)
        state.update(self.client_local.get(c, self.init_local))
        return state

    def _check_loss(self, loss: Tensor, c: int, r: int) -> None:
        if not torch.isfinite(loss).all():
            self._stop(f"round {r}: client {c} reached a non-finite loss ({loss.item()}); training diverged "
                       f"(lower the learning rate). {len(self.history)} completed rounds kept in .history")

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
        alg, cfg, ch = self.algorithm, self.config, self.channel
        clients = [int(c) for c in self._participants[r - 1]]
        p = self.weights(clients)
        lr = cfg.lr_at(r)
        self.server.round = r
        self._round_clients = clients
        update = alg.begin_round(self.server, r, clients, self.global_state)
        if update:
            self.global_state = {**self.global_state, **update}
        plan = self.plan = alg.round_plan(r)  # what this round sends: the algorithm's description
        frozen = plan.freeze_bn
        self.frozen = self.server.frozen = frozen
        if plan.download:
            payload = {k: self.global_state[k] for k in self.download_keys}
            payload.update(alg.extra_download(self.server))
            payload.update(alg.momentum_download(self.server))
            received = ch.broadcast(payload, len(clients))
        else:
            received = [{} for _ in clients]
        first = None
        step = plan.coupled  # the algorithm's coupled first step, run with this backend's exchange
        if step is not None and self._batched is not None and self.exchanges_in_process:
            first = self._batched.defer_first_step(step, p, frozen)  # step 1 of the batched clients
        if step is not None and first is None:
            exchange = self._coupled_exchange(clients, p)  # a backend that cannot exchange in a step refuses here
            unfreeze_bn_stats(self._work)
            # received[0] holds views of global_state's download_keys, so this is what every client starts from
            self._work.load_state_dict(self.global_state)
            mine = self._local_clients(clients)
            batches = [self.next_batch(c) for c in mine]
            first = self._coupled_first_step(step, batches, clients, p, exchange)
        answered, uploads, losses = self._run_clients(r, clients, received, lr=lr, frozen=frozen, first=first)
        if answered != clients:  # a backend reported failed clients: the rest, weights re-normalised
            clients = self._round_clients = answered
            p = self.weights(clients)
        if plan.upload:
            uploads = ch.gather(uploads)
            self.global_state = alg.aggregate(self.server, self.global_state, clients, p, uploads)
            alg.aggregate_momentum(self.server, p, uploads)
        return {"round": r, "lr": lr, "clients": clients,
                "train_loss": float(np.dot(p, losses)), "frozen_stats": bool(frozen),
                "coupled_first_step": step.name if step is not None else ""}

    def _run_clients(self, r: int, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float,
                     frozen: bool, first: CoupledStep | None) -> tuple[list[int], list[dict[str, Tensor]], list[float]]:
        """Every participant's part of round ``r`` (:meth:`client_round`): the clients that answered
        (here: all of ``clients``), their uploads and mean losses, in the order of ``clients``. A
        backend whose clients run elsewhere (Flower) overrides this; one that drops a failed
        client returns the others, and the round re-normalises the weights over them."""
        mine = self._local_clients(clients)
        if self._batched is not None:  # this process's clients at once (bnfl.fl.batched)
            uploads, losses = self._batched.run(r, mine, received, lr=lr, frozen=frozen, first=first)
        else:
            uploads, losses = [], []
            for j, c in enumerate(mine):
                up, loss = self.client_round(r, c, received[j], lr=lr, frozen=frozen, first=first, index=j)
                uploads.append(up)
                losses.append(loss)
        uploads, losses = self._collect(clients, uploads, losses)
        return list(clients), uploads, losses

    def client_round(self, r: int, c: int, received: dict[str, Tensor], *, lr: float, frozen: bool,
                     first: CoupledStep | None = None, index: int = 0) -> tuple[dict[str, Tensor], float]:
        """Client ``c``'s part of round ``r``: load what it ``received`` over its local state, run the
        algorithm's client hooks around its local steps, keep its local state and momentum, and
        return its upload and mean training loss. ``first`` is the round's coupled first step
        (FedTAN), in which this client is number ``index``. Every engine runs a client through this."""
        alg = self.algorithm
        work = self._work
        state = self.client_state(c)
        state.update({k: v for k, v in received.items() if k in state})
        work.load_state_dict(state)
        client = self.client_context(c, received)
        alg.client_start(client, r, work)
        opt = self._optimizer(work, alg.initial_momentum(client), lr)
        steps = self._steps_this_round(c)
        total = 0.0
        self._set_bn_frozen(work, frozen)
        for t in range(1, steps + 1):
            opt.zero_grad(set_to_none=True)
            if t == 1 and first is not None:
                loss = first.losses[index]
                self._check_loss(loss, c, r)
                for n, q in work.named_parameters():
                    if n in first.grads[index]:
                        q.grad = first.grads[index][n].clone()
                ema_global_stats(work, first, union_count=self._union_count)
            else:
                x, y = self.next_batch(c)
                loss = alg.local_loss(client, work, x, y)
                self._check_loss(loss.detach(), c, r)
                loss.backward()
            alg.adjust_grads(client, work)
            opt.step()
            alg.after_step(client, t, work, opt, first)
            total += float(loss.detach())
        up = self.keep_client(c, client, work.state_dict(), extra=lambda: alg.extra_upload(client, work, steps, lr),
                              momentum=lambda: self._momentum_of(work, opt))
        return up, total / steps

    def keep_client(self, c: int, client: ClientContext, trained: Mapping[str, Tensor], *,
                    extra: Callable[[], Mapping[str, Tensor]], momentum: Callable[[], dict[str, Tensor]],
                    copy_upload: bool = True) -> dict[str, Tensor]:
        """The end of client ``c``'s round on every engine (sequential and batched): keep its local
        state (from ``trained``, its model's tensors by state key), its algorithm state and momentum
        as the algorithm says, and return its upload as the round's plan says: the upload keys
        (cloned unless ``copy_upload`` is False: the caller's tensors are the round's own), the
        algorithm's ``extra()`` upload and what :meth:`Algorithm.final_momentum
        <bnfl.fl.Algorithm.final_momentum>` returns of ``momentum()``. A plan whose server trains
        (pooled data) takes ``trained`` as the global state."""
        plan = self.plan
        if self.local_keys:
            self.client_local[c] = {k: trained[k].detach().clone() for k in self.local_keys}
        up = ({k: trained[k].detach().clone() if copy_upload else trained[k] for k in self.upload_keys}
              if plan.upload else {})
        up.update(extra())
        up.update(self.algorithm.final_momentum(client, momentum))  # kept or uploaded: the algorithm's
        if client.state or c in self.client_algorithm:  # the client's algorithm state goes back to the store
            self.client_algorithm[c] = client.state
        if plan.server_trains:
            self.global_state = {k: trained[k].detach().clone() for k in self.global_state}
        return up

    # -- where the clients run (a distributed backend overrides these) ------------------------------
    def _local_clients(self, clients: Sequence[int]) -> list[int]:
        """The participants ``clients`` whose data is in this process (here: all of them)."""
        return list(clients)

    def _coupled_exchange(self, clients: Sequence[int], weights: Sequence[float]) -> Exchange:
        """The exchange a coupled first step of ``clients`` (weights p_i) runs with: here the
        channel's all-reduce (:func:`bnfl.fl.coupled.channel_exchange`)."""
        return channel_exchange(self.channel)

    def _coupled_first_step(self, step: CoupledFirstStep, batches: Sequence[tuple[Tensor, Tensor]],
                            clients: Sequence[int], weights: Sequence[float], exchange: Exchange) -> CoupledStep:
        """The algorithm's coupled first ``step`` of this process's participants (``batches``, in the
        order of :meth:`_local_clients`) with ``exchange``; ``clients`` and ``weights`` are all
        participants and their p_i."""
        return step.run(self._work, batches, self.loss_fn, weights, exchange=exchange)

    def _collect(self, clients: Sequence[int], uploads: list[dict[str, Tensor]],
                 values: list[float]) -> tuple[list[dict[str, Tensor]], list[float]]:
        """Every participant's upload and per-client number, in the order of ``clients``, from
        this process's (here: they already are all)."""
        return uploads, values

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
        with _folder_lock.locked(self.config.checkpoint_dir if getattr(self, "rank", 0) == 0 else None):
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
