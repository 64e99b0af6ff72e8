r"""bnfl's algorithms on Flower (1.42 Message API): a ServerApp and a ClientApp from one run.

:func:`flower_apps` turns a :class:`FlowerSetup` (model, :class:`~bnfl.fl.FederatedData`,
:class:`~bnfl.fl.Algorithm`, :class:`~bnfl.fl.TrainConfig`) into a
:class:`flwr.serverapp.ServerApp` and a :class:`flwr.clientapp.ClientApp`;
:func:`run_flower` runs them on Flower's simulation runtime and returns the :class:`FlowerResult`.
``bnfl train --config FILE --engine flower`` and the app folder ``examples/flower_app`` use them.

Nothing of an algorithm is re-implemented here. The ServerApp runs the simulator's round
(:class:`~bnfl.fl.engine.Simulation`, given :class:`FlowerClients` as its
:class:`~bnfl.fl.clients.Clients`, as the torch.distributed ranks give theirs):
participation, ``begin_round``, the broadcast, the Algorithm's own ``aggregate``, evaluation and
the history rows; only *where the clients run* is Flower's. Each ClientApp message builds the
node's :class:`~bnfl.fl.flower_client.ClientRunner` (the run's client state restricted to its
client, no server) and runs its ``client_round``, the simulator's local training. What is sent and what stays local comes from the engine's key lists (by layer type,
:func:`bnfl.fl.state_groups`), never from key names; ``num_batches_tracked`` (group ``bn_count``)
is never sent.

Messages (all content in records; client ids are the nodes' ``partition-id``; every message's
config names the ``run``, its index when several runs share one launch):

==================== ========================================== =============================================================
message type         server -> node                             node -> server
==================== ========================================== =============================================================
``query.hello``      --                                         ``client``, ``num-examples`` (samples), ``samples-crc``
``train``            download keys + extras; round, lr, frozen  upload keys + extras; loss, ``num-examples``, ``samples-crc``
``query.statistics`` the state to compute on; ``kind``          :meth:`Algorithm.client_statistics` tensors
``evaluate``         the global state (personalised methods)    accuracy on the test set and own data
``query.inspect``    -- (if :attr:`FlowerSetup.answer_inspect`) the client's local and algorithm state (tests)
==================== ========================================== =============================================================

Faults: a reply that carries an error, or none within ``reply_timeout_s``, is reported. Methods
whose server pools exact statistics over the round's clients (``bn_stats`` in
``server_state``: HBN, FBN) stop with :class:`FlowerClientError`; the others aggregate the clients
that answered with weights re-normalised over them (:meth:`~bnfl.fl.context.ServerContext.weights`)
and list the failed ones in the row's ``failed_clients``. A diverged client always stops the run
(:class:`~bnfl.fl.DivergenceError`). A missing client is never averaged as zeros.

Not over Flower: FedTAN-type methods (a coupled first step needs :math:`3L+1` exchanges inside
one local step; use :mod:`bnfl.fl.distributed`), centralised baselines, checkpoints/resume (the
clients' state lives in the nodes' Contexts and ends with the run). See ``docs/flower.md``.
"""

from __future__ import annotations

import copy
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import flwr
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.logger import log as flwr_log
from flwr.serverapp import Grid, ServerApp
from torch import Tensor

from bnfl.fl._flower_records import from_arrays, state_from_bytes, to_arrays
from bnfl.fl._run import DivergenceError, History
from bnfl.fl.algorithms import Algorithm
from bnfl.fl.clients import Clients
from bnfl.fl.engine import Simulation
from bnfl.fl.flower_client import client_app
from bnfl.fl.flower_setup import (
    FlowerSetup,
    Setups,
    _as_list,
    flower_exchange,
    samples_crc,
)

__all__ = ["FlowerClientError", "FlowerClients", "FlowerResult", "FlowerSetup", "client_app", "flower_apps", "run_flower",
           "server_app", "server_simulation", "stops_on_failure"]
# the setup (FlowerSetup, samples_crc) is bnfl.fl.flower_setup, the ClientApp bnfl.fl.flower_client,
# the setup of a run config bnfl.train.config.setup_from_config (the builder sits above the engines);
# this module is the ServerApp and the launcher


class FlowerClientError(RuntimeError):
    """A client failed (its reply carried an error, or none came) in a round the method cannot run
    without it. ``.failures`` maps client ids to the reported reasons; raised by :func:`run_flower`,
    ``.results`` holds the launch's :class:`FlowerResult` list (one per run: the runs before the
    failed one are complete, the failed one and those after it are empty)."""

    def __init__(self, message: str, failures: Mapping[int, str]) -> None:
        super().__init__(message)
        self.failures = dict(failures)
        self.results: list[FlowerResult] = []


def stops_on_failure(algorithm: Algorithm) -> bool:
    """Whether a failed client stops the round: the server sets BN statistics pooled exactly over
    the round's clients (``bn_stats`` in ``server_state``: HBN eqs. 8 and 11, FBN)."""
    return "bn_stats" in algorithm.server_state


# -- the server side -------------------------------------------------------------------------------
def server_simulation(setup: FlowerSetup, grid: Grid, run: int = 0) -> Simulation:
    """The ServerApp's run ``run`` of ``setup``: the simulator's rounds with every client on a Flower
    node, reached through the ``grid`` (:class:`FlowerClients`)."""
    return Simulation(setup.model, setup.data, copy.deepcopy(setup.algorithm), setup.config, loss_fn=setup.loss_fn,
                      clients=FlowerClients(grid, run=run, timeout_s=setup.reply_timeout_s))


class FlowerClients(Clients):
    """The :class:`~bnfl.fl.clients.Clients` of Flower's ServerApp: every client trains on its node
    (the ClientApp of :mod:`bnfl.fl.flower_client`), reached by the messages of the module docstring.
    A failed client is reported (:attr:`failures`); the round goes on without it where the method
    allows (:func:`stops_on_failure`)."""

    elsewhere = True  # every client trains on its node

    def __init__(self, grid: Grid, *, run: int = 0, timeout_s: float = 600.0) -> None:
        self.grid = grid
        self.run_index = run
        self.timeout = float(timeout_s)
        #: every failed client: round, client, node, what failed and why
        self.failures: list[dict[str, Any]] = []
        self._before = 0  # failures before the current round

    def samples(self, data: Any, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor, None]:
        """The server holds no training sample (they stay on the nodes)."""
        return data.x_train[:0].to(device, dtype), data.y_train[:0].to(device), None

    def attach(self, host: Any) -> None:
        self.host = host  # the server's Simulation
        host.round_hooks.append(self._failed_clients)
        self.nodes = self._hello()

    def meta(self) -> dict[str, Any]:
        return {"engine": "flower", "flwr": flwr.__version__}

    def begin_round(self, r: int) -> None:
        self._before = len(self.failures)

    def _failed_clients(self, host: Any, r: int) -> dict[str, Any] | None:
        """A round hook: the row's ``failed_clients``, when a client failed in the round."""
        failed = self.failures[self._before:]
        return {"failed_clients": [f["client"] for f in failed]} if failed else None

    def exchange(self, step: Any, clients: Sequence[int], weights: Sequence[float], *, plan: Any,
                 start: Mapping[str, Tensor]) -> Any:
        """Flower's exchange inside a local step: a refusal (:func:`bnfl.fl.flower_setup.flower_exchange`)."""
        return flower_exchange(self.host.model, self.host.algorithm.name, self.host.server.round)

    # -- messages ------------------------------------------------------------------------------------
    def _hello(self) -> dict[int, int]:
        """Client id -> node id, from every node's ``query.hello``; checks sizes against the partition."""
        k = self.host.num_clients
        deadline = time.monotonic() + (start := max(self.timeout, 60.0))  # nodes start slower than they reply
        while len(list(self.grid.get_node_ids())) < k and time.monotonic() < deadline:
            time.sleep(0.05)
        nodes = list(self.grid.get_node_ids())
        if len(nodes) != k:
            raise RuntimeError(f"the federation has {len(nodes)} nodes but the run has {k} clients; start "
                               f"{k} nodes (run_flower(num_supernodes={k}), options.num-supernodes = {k})")
        hello = RecordDict({"config": ConfigRecord({"run": self.run_index})})
        msgs = [Message(copy.deepcopy(hello), dst_node_id=n, message_type="query.hello") for n in nodes]
        got: dict[int, int] = {}
        for m in self.grid.send_and_receive(msgs, timeout=start):
            if m.has_error():
                raise FlowerClientError(f"node {m.metadata.src_node_id} failed to start: {m.error.reason}",
                                        {-1: m.error.reason})
            c, n = int(m.content["metrics"]["client"]), int(m.content["metrics"]["num-examples"])
            if c in got:
                raise RuntimeError(f"two nodes hold client {c}; every node needs its own partition-id")
            if n != self.host.server.client_sizes[c]:
                raise RuntimeError(f"client {c} reports {n} samples but the partition gives it "
                                   f"{self.host.server.client_sizes[c]}; nodes and server must use the same seeded partition")
            self._check_samples(c, m.content["metrics"])
            got[c] = m.metadata.src_node_id
        missing = sorted(set(range(k)) - set(got))
        if missing:
            raise FlowerClientError(f"clients {missing} did not answer within {start:g} s of the start", {c: "no reply" for c in missing})
        return got

    def _check_samples(self, c: int, metrics: MetricRecord) -> None:
        """A node's reply must come from the seeded partition's client ``c``."""
        if int(metrics["samples-crc"]) != samples_crc(self.host.data.clients[c]):
            raise RuntimeError(f"client {c}'s node holds other training samples than the server's partition "
                               "(a node that re-partitions, or another seed); partition once, seeded, and give every "
                               "node the same FlowerSetup.data")

    def _exchange(self, kind: str, clients: Sequence[int], arrays: Sequence[Mapping[str, Tensor]] | None,
                  config: Mapping[str, Any]) -> tuple[dict[int, RecordDict], dict[int, str]]:
        """One message of type ``kind`` to each of ``clients``: their reply contents and the failures."""
        msgs = []
        for j, c in enumerate(clients):
            content = RecordDict({"config": ConfigRecord({**config, "client": int(c), "run": self.run_index})})
            if arrays is not None:
                content["arrays"] = to_arrays(arrays[j])
            msgs.append(Message(content, dst_node_id=self.nodes[c], message_type=kind, group_id=str(config["round"])))
        by_node = {m.metadata.src_node_id: m for m in self.grid.send_and_receive(msgs, timeout=self.timeout)}
        ok, failed = {}, {}
        for c in clients:
            m = by_node.get(self.nodes[c])
            if m is None:  # hung, crashed or unreachable: failed, and named by its node
                failed[c] = f"node {self.nodes[c]} sent no reply within {self.timeout:g} s (reply_timeout_s)"
            elif m.has_error():
                failed[c] = m.error.reason
            else:
                ok[c] = m.content
        return ok, failed

    def _fail(self, r: int, what: str, failed: Mapping[int, str], *, stop: bool) -> None:
        """Report failed clients; raise unless the round may go on without them."""
        for c, reason in failed.items():
            self.failures.append({"round": r, "client": c, "node": self.nodes[c], "what": what, "reason": reason})
        if any("non-finite loss" in reason for reason in failed.values()):
            self.host.write_history()
            raise DivergenceError(f"round {r}: a client diverged (non-finite loss): {_short(failed)}", self.host.history)
        if stop:
            raise FlowerClientError(f"round {r}: {what} failed on clients {sorted(failed)} ({_short(failed)}); "
                                    f"{self.host.algorithm.name} cannot go on without them", failed)

    # -- where the clients run -----------------------------------------------------------------------
    def train(self, r: int, plan: Any, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float,
              start: Mapping[str, Tensor], first: Any = None) -> tuple[list[int], list[dict[str, Tensor]], list[float]]:
        self.host.start_round(start, plan)  # the server's store: what its evaluation reads until the round ends
        config = {"round": r, "lr": float(lr), "frozen": bool(plan.freeze_bn)}
        ok, failed = self._exchange("train", clients, received, config)
        if failed:
            self._fail(r, "training", failed, stop=stops_on_failure(self.host.algorithm) or not ok)
        answered = [c for c in clients if c in ok]
        for c in answered:
            self._check_samples(c, ok[c]["metrics"])
        uploads = [from_arrays(ok[c]["arrays"], self.host.device) for c in answered]
        losses = [float(ok[c]["metrics"]["train_loss"]) for c in answered]
        return answered, uploads, losses

    def request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
        host, clients = self.host, list(clients)
        payload = {k: state[k] for k in host.download_keys}
        ok, failed = self._exchange("query.statistics", clients, [payload] * len(clients),
                                    {"round": host.server.round, "kind": kind})
        if failed:
            self._fail(host.server.round, f"statistics {kind!r}", failed, stop=True)
        return [from_arrays(ok[c]["arrays"], host.device) for c in clients]

    def accuracies(self, clients: Sequence[int]) -> list[tuple[float, float]]:
        host, clients = self.host, list(clients)
        payload = {k: host.global_state[k] for k in host.download_keys}
        ok, failed = self._exchange("evaluate", clients, [payload] * len(clients), {"round": host.round})
        if failed:
            self._fail(host.round, "evaluation", failed, stop=True)
        return [(float(ok[c]["metrics"]["test_acc"]), float(ok[c]["metrics"]["own_acc"])) for c in clients]

    def client_state_of_nodes(self) -> dict[int, dict[str, dict[str, Any]]]:
        """Every client's local state and algorithm state (``"algorithm"``: :attr:`ClientContext.state
        <bnfl.fl.context.ClientContext>`, momentum buffers included), asked from the nodes
        (``query.inspect``; answered only when the setup allows it: equality tests)."""
        host = self.host
        clients = list(range(host.num_clients))
        ok, failed = self._exchange("query.inspect", clients, None, {"round": host.round})
        if failed:
            self._fail(host.round, "inspection", failed, stop=True)
        return {c: {"local": from_arrays(ok[c]["local"], host.device),
                    "algorithm": state_from_bytes(ok[c]["algorithm"]["state"], host.device)} for c in clients}


def _short(failed: Mapping[int, str], width: int = 300) -> str:
    """Failure reasons, one line each, cut to ``width`` characters (Ray's contain whole tracebacks)."""
    out = []
    for c, reason in failed.items():
        lines = [ln.strip() for ln in str(reason).splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln), lines[-1] if lines else "")
        out.append(f"client {c}: {last[:width]}")
    return "; ".join(out)


@dataclass
class FlowerResult:
    """What :func:`run_flower` returns per run: the server's history and final state (plus the
    clients' local state when ``collect_client_state``), the algorithm's server state
    (``ServerContext.state``), Flower's start-up time (launch to the first run's nodes
    answering) and the whole launch's time."""

    history: History | None = None
    global_state: dict[str, Tensor] = field(default_factory=dict)
    client_state: dict[int, dict[str, dict[str, Tensor]]] = field(default_factory=dict)
    algorithm_state: dict[str, Any] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    startup_s: float = 0.0
    total_s: float = 0.0


def server_app(setup: Setups | Callable[[Context], Setups], results: Sequence[FlowerResult] | None = None, *,
               collect_client_state: bool = False) -> ServerApp:
    """The ServerApp of ``setup`` (one run, or several one after the other on the same nodes; or
    of ``setup(context)``): the simulator's rounds with the clients on the grid's nodes; writes
    ``history.json``/``.csv`` into each ``setup.out``; fills ``results`` (one per run, when
    given) with the history and final state."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        setups = _as_list(setup, context)
        if results is not None and len(results) != len(setups):
            raise ValueError(f"{len(results)} results for {len(setups)} runs")
        for i, s in enumerate(setups):
            sim = server_simulation(s, grid, run=i)
            sim.round_hooks.append(_log_round)
            if results is not None and i == 0:
                launched = results[0].startup_s  # the launch time, set by run_flower
                for res in results:
                    res.startup_s = time.perf_counter() - launched
            hist = sim.run()
            wrote = hist.write(s.out) if s.out else None
            _log(f"bnfl {s.algorithm.name}: {len(hist)} rounds on {len(sim.clients.nodes)} nodes, test accuracy "
                 f"{hist.final_accuracy()}" + (f"; wrote {wrote}" if wrote else ""))
            if results is not None:
                res = results[i]
                res.history = hist
                res.global_state = dict(sim.global_state)
                res.algorithm_state = {**sim.server.state, **sim.algorithm.state_dict()}
                res.failures = list(sim.clients.failures)
                if collect_client_state:
                    res.client_state = sim.clients.client_state_of_nodes()

    return app


def _log(text: str) -> None:
    flwr_log(logging.INFO, text)


def _log_round(sim: Simulation, r: int) -> None:
    """A round hook: the round's clients (and failed ones) in Flower's log; adds nothing to the row."""
    failed = [f["client"] for f in getattr(sim.clients, "failures", []) if f["round"] == r]
    _log(f"bnfl round {r}: trained clients {sim.round_clients}" + (f", failed {failed}" if failed else ""))


def flower_apps(setup: Setups, results: Sequence[FlowerResult] | None = None, *,
                collect_client_state: bool = False) -> tuple[ServerApp, ClientApp]:
    """The ServerApp and ClientApp of ``setup`` (see :func:`server_app`, :func:`client_app`)."""
    return server_app(setup, results, collect_client_state=collect_client_state), client_app(setup)


def run_flower(setup: Setups, *, num_cpus: int | None = None, collect_client_state: bool = False,
               verbose: bool = False) -> FlowerResult | list[FlowerResult]:
    """Run ``setup`` on Flower's simulation runtime (:func:`flwr.simulation.run_simulation`, one
    node per client, Ray actors of one CPU each; ``num_cpus`` caps Ray's CPUs, default all).

    ``setup`` is one :class:`FlowerSetup` (returns its :class:`FlowerResult`) or several with the
    same number of clients (returns one result each): they run one after the other on the same
    nodes, each client's state kept apart per run, so Flower starts once.
    ``collect_client_state`` asks every node for its client's local state at the end of each run
    (needs ``answer_inspect``). Ray is shut down before returning, also on errors; a
    :class:`FlowerClientError` carries the launch's results (``.results``)."""
    from flwr.simulation import (
        run_simulation,  # Flower's simulation runtime starts Ray: loaded when a run starts
    )

    setups = [setup] if isinstance(setup, FlowerSetup) else list(setup)
    if not setups:
        raise ValueError("run_flower needs at least one FlowerSetup")
    sizes = {len(s.data.clients) for s in setups}
    if len(sizes) != 1:
        raise ValueError(f"runs sharing one launch need the same number of clients (nodes), got {sorted(sizes)}")
    if collect_client_state and not all(s.answer_inspect for s in setups):
        raise ValueError("collect_client_state needs FlowerSetup(answer_inspect=True): the nodes answer "
                         "query.inspect only when allowed")
    results = [FlowerResult() for _ in setups]
    server, client = flower_apps(setups, results, collect_client_state=collect_client_state)
    init_args: dict[str, Any] = {"include_dashboard": False, "_node_ip_address": "127.0.0.1",
                                 "logging_level": "ERROR" if not verbose else "INFO"}
    if num_cpus is not None:
        init_args["num_cpus"] = int(num_cpus)
    logger = logging.getLogger("flwr")
    level = logger.level
    if not verbose:
        logger.setLevel(logging.ERROR)
    t0 = results[0].startup_s = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            run_simulation(server, client, num_supernodes=sizes.pop(),
                           backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init_args})
    except FlowerClientError as err:
        err.results = results  # the runs that finished before the failure, for the caller
        raise
    finally:
        logger.setLevel(level)
        _shutdown_ray()
    for res in results:
        res.total_s = time.perf_counter() - t0
    return results[0] if isinstance(setup, FlowerSetup) else results


def _shutdown_ray() -> None:
    """Flower shuts its Ray down at the end; make sure of it after an error too."""
    try:  # Ray comes with flwr[simulation], an optional extra
        import ray
    except ImportError:  # pragma: no cover - flwr[simulation] brings ray
        return
    if ray.is_initialized():
        ray.shutdown()
