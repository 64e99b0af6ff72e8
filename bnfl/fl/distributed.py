r"""The :class:`~bnfl.fl.engine.Simulation` with its clients on ``torch.distributed`` ranks (:class:`RankClients`).

Every rank holds the server's state (replicated: each rank applies the same aggregation to
the same gathered uploads, so no rank-0 broadcast of the model is needed) and trains only the
clients it owns: a contiguous block of ``np.array_split(range(K), world_size)`` (5 clients on
3 ranks: 2 + 2 + 1). Each rank gathers its clients' uploads with ``all_gather_object`` and the
algorithm's own ``aggregate`` runs unchanged on the list in client order, so the aggregation
is the simulator's, bit for bit. FedTAN's coupled first step is the same autograd function as
in the simulator (:func:`bnfl.fedtan.coupled_step`) with an ``exchange`` that all-reduces:

* forward (eqs. 39-40): rank ``r`` with participants ``S_r`` and shares :math:`P_r=\sum_{i\in
  S_r} p_i` runs the step on its clients with weights :math:`q_i = p_i/P_r` and contributes
  :math:`P_r\sum_{i\in S_r} q_i\,\text{parts}_i`; ``all_reduce(SUM)`` gives :math:`\sum_i p_i
  \,\text{parts}_i` over all clients;
* backward (eq. 41): the rank's stat-gradients are those of :math:`\sum_{S_r} q_i F_i =
  P_r^{-1}\sum_{S_r} p_i F_i`, so it contributes :math:`P_r` times their sum and the
  all-reduce returns :math:`\partial T/\partial(\bar\mu,\bar\sigma^2)` of the global
  :math:`T=\sum_i p_i F_i`; the coupled backward multiplies it by
  :math:`\partial\bar\mu/\partial x_j = q_i/n_i`, so the rank's whole backward is
  :math:`P_r^{-1}\partial T/\partial(\cdot)` and the per-client gradients :math:`g_i/q_i`
  are :math:`p_i^{-1}\partial T/\partial w_i`, the simulator's.

The :class:`~bnfl.fl.comm.Channel` counters are kept on every rank with the simulator's
accounting (the bytes of the federated protocol, not of the collectives that carry it).
Rank 0 alone writes ``history.json`` and checkpoints; a checkpoint holds every client's local
state (gathered), so any rank can resume from it.

Faults: one timeout (:func:`default_timeout_s`: 30 s, or ``BNFL_DIST_TIMEOUT`` seconds) bounds
every wait for another rank: the process group's collectives and the ``monitored_barrier``
(gloo) that starts each round. A collective that fails inside a run (a rank hung past the
timeout, or died: gloo's "Timed out waiting", "Connection reset/closed by peer") stops every
surviving rank with one :class:`RankLostError` that names the missing ranks, learned by each
survivor leaving its mark in the job's key-value store and looking, for at most
:func:`probe_seconds`, whose marks arrive (gloo's own pairs are closed after such a failure, so
a second collective, a ``monitored_barrier`` included, fails at once without naming anyone:
measured with torch 2.13, "Application timeout caused pair closure").
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.fedtan import CoupledStep, Exchange
from bnfl.fl._launch import in_torchrun
from bnfl.fl._run import FederatedData, TrainConfig
from bnfl.fl.algorithms import Algorithm, CoupledFirstStep
from bnfl.fl.clients import Clients, held_samples
from bnfl.fl.engine import Simulation

__all__ = ["DistributedSimulation", "RankClients", "RankLostError", "client_blocks", "default_timeout_s", "init_from_env",
           "in_torchrun"]

#: seconds a rank waits for another before the run stops (:func:`default_timeout_s`)
DEFAULT_TIMEOUT_S = 30.0
#: the environment variable that sets it (every rank reads its own: torchrun passes it on)
TIMEOUT_ENV = "BNFL_DIST_TIMEOUT"
#: the timeout the process group was created with by :func:`init_from_env` (None: not by it)
_group_timeout_s: float | None = None


class RankLostError(RuntimeError):
    """A rank did not take part in a collective within the timeout (it died or hung); the
    message names it. Raised on every surviving rank; ``bnfl train`` prints it as one line."""

    def __init__(self, message: str, missing: list[int] | None) -> None:
        super().__init__(message)
        self.missing = missing


def default_timeout_s() -> float:
    """The timeout of every wait for another rank, in seconds: ``BNFL_DIST_TIMEOUT`` if set (a
    number > 0), else :data:`DEFAULT_TIMEOUT_S` (30). A rank may lag the others within a round
    (local training, evaluation, checkpoint) by at most this much before they stop."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds > 0 (how long a rank waits for the others), "
                         f"got {raw!r}")
    return value


def probe_seconds(timeout_s: float) -> float:
    """How long a surviving rank looks for the others' marks after a failed collective: the
    timeout, at most 5 s (a rank that died is seen at once; one that hung is never seen)."""
    return min(5.0, float(timeout_s))


def init_from_env(*, rank: int | None = None, world_size: int | None = None, timeout_s: float | None = None) -> None:
    """Join the process group (gloo on CPU, NCCL when CUDA is available, the device then being
    ``cuda:LOCAL_RANK``); a no-op when already joined.

    ``rank`` and ``world_size`` default to the ``torchrun`` environment (``RANK``,
    ``WORLD_SIZE``); give both to start ranks yourself (``torch.multiprocessing``, a scheduler),
    with ``MASTER_ADDR`` and ``MASTER_PORT`` set in the environment. ``timeout_s`` (default
    :func:`default_timeout_s`: 30 s or ``BNFL_DIST_TIMEOUT``) bounds every collective; a
    :class:`DistributedSimulation` in this group waits as long at the start of a round.
    """
    global _group_timeout_s
    if dist.is_initialized():
        return
    timeout_s = default_timeout_s() if timeout_s is None else float(timeout_s)
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
    if (rank is None) != (world_size is None):
        raise ValueError(f"give both rank and world_size or neither, got rank={rank!r}, world_size={world_size!r}")
    if world_size is not None and not 0 <= rank < world_size:  # type: ignore[operator]
        raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    given = {} if world_size is None else {"rank": int(rank), "world_size": int(world_size)}  # type: ignore[arg-type]
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **given)
    _group_timeout_s = timeout_s


def client_blocks(num_clients: int, world_size: int) -> list[list[int]]:
    """Clients of each rank: contiguous blocks, sizes differing by at most one (5 on 3: 2+2+1)."""
    if world_size > num_clients:
        raise ValueError(
            f"{world_size} ranks but only {num_clients} clients: every rank must hold at least one "
            f"client; start at most {num_clients} processes (torchrun --nproc-per-node) or partition "
            "the data into more clients"
        )
    return [list(map(int, b)) for b in np.array_split(np.arange(num_clients), world_size)]


def DistributedSimulation(model: nn.Module, data: FederatedData, algorithm: Algorithm,  # noqa: N802 (the public name)
                          config: TrainConfig | None = None, *, barrier_timeout_s: float | None = None,
                          **kwargs: Any) -> Simulation:
    """A :class:`~bnfl.fl.engine.Simulation` whose clients run on the ranks of the current
    ``torch.distributed`` process group (see the module docstring): the simulator with
    :class:`RankClients` over contiguous blocks of clients (:func:`client_blocks`). Same arguments
    as the Simulation, plus ``barrier_timeout_s`` (seconds a round waits for every rank before
    raising; default: the timeout :func:`init_from_env` gave the process group, else
    :func:`default_timeout_s`).

    Raises :class:`RankLostError` on every surviving rank when a rank dies or hangs, at the start
    of a round or inside it."""
    _need_group("DistributedSimulation")
    clients, _ = algorithm.partition(data.clients, 1)  # as the simulator partitions them (pooled: one)
    ranks = RankClients(client_blocks(len(clients), dist.get_world_size()), barrier_timeout_s=barrier_timeout_s)
    return Simulation(model, data, algorithm, config, clients=ranks, **kwargs)


def _need_group(who: str) -> None:
    if not dist.is_initialized():
        raise RuntimeError(f"{who} needs a process group: call bnfl.fl.distributed.init_from_env() "
                           "(or start the program with torchrun)")


class RankClients(Clients):
    """The :class:`~bnfl.fl.clients.Clients` of a ``torch.distributed`` rank: this rank trains the
    participants it holds (batched or one by one, as the Simulation chose) and all-gathers every
    rank's uploads in client order; a coupled first step's exchanges are all-reduces across the
    ranks (module docstring). Every rank holds the server's state; rank 0 alone writes files.

    Parameters
    ----------
    blocks : list of list of int
        The clients of each rank (:func:`client_blocks`; cross-silo: each rank's silo).
    mode : str, default "simulation-over-ranks"
        The history meta's ``mode``: every rank loads the whole data set and keeps its clients'
        rows; :func:`bnfl.train.cross_silo.CrossSiloSimulation`: ``"cross-silo"``.
    barrier_timeout_s : float, optional
        Seconds a round waits for every rank (default: the process group's timeout).
    samples : callable, optional
        ``samples(device, dtype) -> (x, y, rows)``: this rank's training samples (a silo's own);
        default: the rows of this rank's clients in the data set.
    """

    def __init__(self, blocks: list[list[int]], *, mode: str = "simulation-over-ranks",
                 barrier_timeout_s: float | None = None,
                 samples: Callable[[torch.device, torch.dtype], tuple[Tensor, Tensor, Tensor]] | None = None) -> None:
        _need_group("RankClients")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.blocks = blocks
        self.owned = set(blocks[self.rank])
        self.mode = mode
        self.writes = self.rank == 0
        self._own_samples = samples
        if barrier_timeout_s is None:
            barrier_timeout_s = _group_timeout_s if _group_timeout_s is not None else default_timeout_s()
        self.barrier_timeout = datetime.timedelta(seconds=barrier_timeout_s)
        self._where = "the start of the run"  # what the ranks were doing, for RankLostError

    # -- where the clients and their data are ------------------------------------------------------
    def samples(self, data: Any, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """Only the samples of this rank's clients (rows: -1 for another rank's sample)."""
        if self._own_samples is not None:
            return self._own_samples(device, dtype)
        return held_samples(data, sorted(self.owned), device, dtype)

    def attach(self, host: Any) -> None:
        self.host = host  # the Simulation: its state, and ``here``, the engine of this rank's clients

    def meta(self) -> dict[str, Any]:
        return {"engine": "torch.distributed", "mode": self.mode, "world_size": self.world_size,
                "backend": dist.get_backend()}

    def held(self, clients: Sequence[int]) -> list[int]:
        """The participants ``clients`` this rank holds."""
        return [c for c in clients if c in self.owned]

    def _collect(self, clients: Sequence[int], uploads: list[dict[str, Tensor]],
                 values: list[float]) -> tuple[list[dict[str, Tensor]], list[float]]:
        """Every participant's upload and number, in the order of ``clients``, from every rank's."""
        mine = self.held(clients)
        got: list[Any] = [None] * self.world_size
        dist.all_gather_object(got, [(c, {k: v.cpu() for k, v in u.items()}, x)
                                     for c, u, x in zip(mine, uploads, values, strict=True)])
        by_client = {c: (u, x) for part in got for c, u, x in part}
        device = self.host.device
        ordered = [({k: v.to(device) for k, v in by_client[c][0].items()}, by_client[c][1]) for c in clients]
        return [u for u, _ in ordered], [x for _, x in ordered]

    # -- a round's client work ---------------------------------------------------------------------
    def train(self, r: int, plan: Any, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float,
              start: Mapping[str, Tensor], first: Any = None) -> tuple[list[int], list[dict[str, Tensor]], list[float]]:
        _, uploads, losses = self.host.here.train(r, plan, self.held(clients), received, lr=lr, start=start,
                                                  first=first)
        uploads, losses = self._collect(clients, uploads, losses)
        return list(clients), uploads, losses

    def request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
        answers = self.host.here.request(kind, self.held(clients), state)
        return self._collect(clients, answers, [0.0] * len(answers))[0]

    def accuracies(self, clients: Sequence[int]) -> list[tuple[float, float]]:
        """Each rank evaluates the clients it holds; the accuracies are all-gathered, so every rank
        returns them for all ``clients``."""
        mine_ids = self.held(clients)
        mine = dict(zip(mine_ids, self.host.here.accuracies(mine_ids), strict=True))
        got: list[Any] = [None] * self.world_size
        dist.all_gather_object(got, mine)
        allc = {c: v for part in got for c, v in part.items()}
        return [allc[c] for c in clients]

    def exchange(self, step: CoupledFirstStep, clients: Sequence[int], weights: Sequence[float], *, plan: Any,
                 start: Mapping[str, Tensor]) -> CoupledStep:
        r"""The step of this rank's participants with weights :math:`q_i = p_i/P_r` and an exchange
        that all-reduces :math:`P_r\sum_{S_r} q_i\,\text{parts}_i` over the group (module
        docstring), counted in the channel as the simulator counts it; a rank without
        participants joins every exchange with zeros."""
        host = self.host
        host.start_round(start, plan)
        mine = self.held(clients)
        p = {c: float(w) for c, w in zip(clients, weights, strict=True)}
        share = sum(p[c] for c in mine)
        k = len(clients)
        ch = host.channel

        def exchange(layer: str, kind: str, parts: Tensor, w: Tensor) -> Tensor:
            out = torch.tensordot(w.to(parts.dtype), parts, dims=1) * share if parts.shape[0] else parts.sum(0)
            out = out.contiguous()
            dist.all_reduce(out)
            size = out.numel() * out.element_size()
            ch.count("allreduce", f"{layer}.{kind}", up=size * k, down=size, clients=k, closes_round=True)
            return out

        if not mine:  # no participant here this round: join every exchange of the step with zeros
            self._idle_exchanges(exchange, step)
            host.union_count = self._all_counts({})
            return CoupledStep(grads=[], losses=torch.zeros(0), layer_stats={}, local_stats={})
        out = host.coupled_step(step, mine, [p[c] / share for c in mine], exchange)
        host.union_count = self._all_counts({n: sum(m.count for m in ms) for n, ms in out.local_stats.items()})
        return out

    def _all_counts(self, mine: dict[str, int]) -> dict[str, int]:
        """Per BN layer, the union's element count: the all-reduce of the ranks' counts (the
        server knows the clients' batch sizes in FedTAN, so the channel does not count it)."""
        names = [n for n, m in self.host.work_model.named_modules() if isinstance(m, _BatchNorm)]
        t = torch.tensor([float(mine.get(n, 0)) for n in names], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.to(self.host.device)
        dist.all_reduce(t)
        return {n: int(round(float(v))) for n, v in zip(names, t.cpu(), strict=True)}

    def _idle_exchanges(self, exchange: Exchange, step: CoupledFirstStep) -> None:
        z = torch.zeros(0, dtype=getattr(torch, self.host.config.dtype), device=self.host.device)
        for layer, kind, width in step.exchanges(self.host.work_model):
            exchange(layer, kind, z.new_zeros(0, width), z.new_zeros(0))

    # -- the rank's place in the run: rounds, failures, checkpoints ---------------------------------
    def begin_round(self, r: int) -> None:
        self._barrier(f"round {r}")
        self._where = f"round {r}"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """A collective that failed because a rank did not take part stops the run with one
        :class:`RankLostError` naming the missing ranks."""
        try:
            yield
        except RankLostError:
            raise
        except RuntimeError as err:
            if not _is_comm_failure(err):
                raise  # a bug, a divergence: not about another rank
            raise self._lost(err, f"stopped answering in {self._where}") from err

    def gather_clients(self, mine: dict[str, dict[int, Any]]) -> dict[str, dict[int, Any]]:
        """A client's state (local groups, cursor, algorithm state with its momentum) lives on the
        rank that owns it: every rank's, merged in client order (a collective)."""
        got: list[Any] = [None] * self.world_size
        dist.all_gather_object(got, {key: {c: _cpu(v) for c, v in part.items() if c in self.owned}
                                     for key, part in mine.items()})
        merged: dict[str, dict[int, Any]] = {}
        for key in mine:
            both: dict[int, Any] = {}
            for part in got:
                both.update(part[key])
            merged[key] = dict(sorted(both.items()))
        return merged

    def after_save(self) -> None:
        dist.barrier()  # the other ranks wait until rank 0 has written the checkpoint

    def _barrier(self, where: str) -> None:
        self._where = where
        if dist.get_backend() != "gloo":
            dist.barrier()
            return
        try:
            dist.monitored_barrier(timeout=self.barrier_timeout, wait_all_ranks=True)
        except RuntimeError as err:
            raise self._lost(err, f"did not reach {where}") from err

    def _lost(self, err: RuntimeError, what: str) -> RankLostError:
        """The one-line error of a failed wait for other ranks, naming the ranks that do not answer."""
        seconds = self.barrier_timeout.total_seconds()
        missing = self._missing_ranks(self._where)
        who = ("a rank" if not missing else
               f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing)))
        named = (f"missing {who}" if missing else "could not tell which rank is missing")
        return RankLostError(
            f"rank {self.rank}: {who} {what} within {seconds:g} s (died or hung): {named}; a rank may lag the "
            f"others by at most {seconds:g} s within a round ({TIMEOUT_ENV}=SECONDS raises it); "
            f"gloo: {_reason(err)}", missing)

    def _missing_ranks(self, where: str) -> list[int] | None:
        """The ranks that leave no mark in the job's store by a common deadline (every survivor of
        a failed collective leaves one under a key of ``where``, the same on all of them: each
        collective takes every rank; the first to arrive sets the deadline, :func:`probe_seconds`
        ahead, so that the survivors agree). ``None``: no store; if the store stopped answering
        (rank 0 holds it outside torchrun), a non-zero rank names rank 0."""
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception:  # noqa: BLE001 (a private accessor: without it the error names no rank)
            return None
        prefix = f"bnfl/lost/{where}/"
        window = probe_seconds(self.barrier_timeout.total_seconds())
        try:
            store.set_timeout(datetime.timedelta(seconds=window))
            store.set(f"{prefix}{self.rank}", "1")
            now = time.time()
            until = float(store.compare_set(f"{prefix}until", "", f"{now + window!r}"))
            until = min(until, now + 2 * window)  # a clock far ahead on another machine
            while True:
                seen = {r for r in range(self.world_size) if store.check([f"{prefix}{r}"])}
                if len(seen) == self.world_size or time.time() >= until:
                    break
                time.sleep(0.05)
            store.add(f"{prefix}done", 1)
            if self.rank == 0:  # outside torchrun the store lives in rank 0: leave it up until all have looked
                stop = time.monotonic() + window
                while store.add(f"{prefix}done", 0) < len(seen) and time.monotonic() < stop:
                    time.sleep(0.05)
            return sorted(set(range(self.world_size)) - seen)
        except Exception:  # noqa: BLE001 (the store itself is gone or hung)
            return [0] if self.rank != 0 else None


#: the marks of a failed wait for another rank in gloo's errors (and torch's own classes)
_COMM_FAILURE = re.compile(r"gloo/|Timed out waiting|Connection (reset|closed) by peer|pair closure|Broken pipe|"
                           r"monitoredBarrier|Socket Timeout|Connection refused")


def _is_comm_failure(err: BaseException) -> bool:
    """Whether ``err`` is a collective that failed because a rank did not take part."""
    return isinstance(err, getattr(dist, "DistError", ())) or bool(_COMM_FAILURE.search(str(err)))


def _reason(err: BaseException) -> str:
    """gloo's message on one line without its source location and advice."""
    text = " ".join(str(err).split())
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    return text.split(". This is typically")[0].rstrip(".")


def _cpu(v: Any) -> Any:
    if isinstance(v, Tensor):
        return v.detach().cpu()
    if isinstance(v, dict):
        return {k: _cpu(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return type(v)(_cpu(x) for x in v)
    return v
