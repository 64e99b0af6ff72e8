"""The client side of :mod:`bnfl.fl.flower`: the ClientApp, whose every message runs the
simulator's code for the node's one client (:meth:`ClientWork.client_round
<bnfl.fl._client_work.ClientWork.client_round>`, the code every engine trains a client with) in a
:class:`ClientRunner`, on the client state kept in the node's Context
(:mod:`bnfl.fl._flower_records`: local groups, momentum, batch cursor and the algorithm's client
state, nothing of the server's or of another client). A node builds no Simulation."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bnfl.fl._client_work import ClientWork
from bnfl.fl._flower_records import (
    from_arrays,
    load_client_state,
    save_client_state,
    state_to_bytes,
    to_arrays,
)
from bnfl.fl._run import DivergenceError, History
from bnfl.fl.clients import held_samples
from bnfl.fl.flower_setup import FlowerSetup, Setups, _as_list, samples_crc

__all__ = ["ClientRunner", "client_app"]


class ClientRunner(ClientWork):
    """A Flower node's client ``c`` of ``setup``: the clients' state of the run restricted to it (only
    its training rows; its state from the node's Context), and the simulator's one-client work
    (:class:`~bnfl.fl._client_work.ClientWork`). Not a Simulation: the node holds no server."""

    def __init__(self, setup: FlowerSetup, c: int) -> None:
        self.client = c
        self._set_up_clients(setup.model, setup.data, copy.deepcopy(setup.algorithm), setup.config,
                             loss_fn=setup.loss_fn, samples=lambda data, device, dtype: held_samples(data, [c], device, dtype),
                             request=self._request)
        self.client_indices = [np.array(i) for i in self.client_indices]  # Ray hands over read-only arrays
        self.history = History()  # what a divergence error carries: no round was completed here

    def _request(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a Flower node runs its client's hooks; statistics are requested by the ServerApp")

    def _stop(self, why: str) -> None:
        raise DivergenceError(why, self.history)


def _node_client(context: Context, setup: FlowerSetup) -> int:
    """This node's client id: its ``partition-id`` (checked against the partition)."""
    if "partition-id" not in context.node_config:
        raise ValueError("the node has no 'partition-id' in its node config; start it with "
                         "--node-config 'partition-id=<client id>' (the simulation runtime sets it)")
    c = int(context.node_config["partition-id"])
    if not 0 <= c < len(setup.data.clients):
        raise ValueError(f"node partition-id {c} but the run has {len(setup.data.clients)} clients")
    return c


def _open(setup: FlowerSetup, msg: Message, context: Context) -> tuple[ClientRunner, int, ConfigRecord]:
    cfg = msg.content["config"]
    c = _node_client(context, setup)
    if int(cfg["client"]) != c:
        raise ValueError(f"message for client {int(cfg['client'])} reached the node of client {c}")
    sim = ClientRunner(setup, c)
    load_client_state(sim, c, context.state, int(cfg["run"]))
    r = int(cfg["round"])
    sim.server.round = r
    sim.server.frozen = bool(cfg.get("frozen", False))
    sim.start_round(sim.base_state, sim.algorithm.round_plan(r))  # what this client's round sends back
    return sim, c, cfg


def _reply(msg: Message, **records: Any) -> Message:
    return Message(RecordDict(records), reply_to=msg)


def client_app(setup: Setups | Callable[[Context], Setups]) -> ClientApp:
    """The ClientApp of ``setup`` (one or several runs; or of ``setup(context)``, for apps that
    read it from the run config). Every handler runs the simulator's code for this node's client
    on its Context state, for the run its message names."""
    app = ClientApp()

    def get(context: Context, msg: Message) -> FlowerSetup:
        setups = _as_list(setup, context)
        run = int(msg.content["config"]["run"])
        if not 0 <= run < len(setups):
            raise ValueError(f"message for run {run} but this ClientApp has {len(setups)} run(s)")
        return setups[run]

    @app.query("hello")
    def hello(msg: Message, context: Context) -> Message:
        s = get(context, msg)
        c = _node_client(context, s)
        ids = s.data.clients[c]
        return _reply(msg, metrics=MetricRecord({"client": c, "num-examples": len(ids), "samples-crc": samples_crc(ids)}))

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        s = get(context, msg)
        sim, c, cfg = _open(s, msg, context)
        received = from_arrays(msg.content["arrays"], sim.device)
        up, loss = sim.client_round(int(cfg["round"]), c, received, lr=float(cfg["lr"]), frozen=sim.server.frozen)
        save_client_state(sim, c, context.state, int(cfg["run"]))
        # num-examples in samples (the weights' N_i), never in batches
        ids = sim.client_indices[c]
        return _reply(msg, arrays=to_arrays(up), metrics=MetricRecord({"train_loss": loss, "num-examples": len(ids),
                                                                      "samples-crc": samples_crc(ids)}))

    @app.query("statistics")
    def statistics(msg: Message, context: Context) -> Message:
        s = get(context, msg)
        sim, c, cfg = _open(s, msg, context)
        state = {**sim.base_state, **from_arrays(msg.content["arrays"], sim.device)}
        up = sim.client_statistics(c, state, str(cfg["kind"]))
        save_client_state(sim, c, context.state, int(cfg["run"]))
        return _reply(msg, arrays=to_arrays(up))

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        s = get(context, msg)
        sim, c, _ = _open(s, msg, context)
        sim.base_state = {**sim.base_state, **from_arrays(msg.content["arrays"], sim.device)}
        per, own = sim.client_accuracy(c)
        return _reply(msg, metrics=MetricRecord({"test_acc": per, "own_acc": own}))

    @app.query("inspect")
    def inspect(msg: Message, context: Context) -> Message:
        s = get(context, msg)
        if not s.answer_inspect:
            raise PermissionError("this ClientApp does not reveal its local state (FlowerSetup.answer_inspect=False)")
        sim, c, _ = _open(s, msg, context)
        return _reply(msg, local=to_arrays(sim.client_local.get(c, {})),
                      algorithm=ConfigRecord({"state": state_to_bytes(sim.client_algorithm.get(c, {}))}))

    return app
