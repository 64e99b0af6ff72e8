"""Recipe: keep BN state on the clients of an existing Flower app (FedBN).

Flower's ``FedAvg`` sends and averages every array of the model. Under
feature shift the BN layers' statistics and affine parameters should stay on
each client (FedBN); the usual fix, ``if "bn" not in key``, silently misses
layers named otherwise (``downsample.1``, ``norm``) and drops
``num_batches_tracked`` into the average. Here the split comes from the layer
types (``bnfl.fl.state.keys_in``), and the strategy refuses a reply that
carries BN state.

Three pieces, each a drop-in for a Flower 1.42 app (Message API):

- :class:`KeepBNLocal`, a ``FedAvg`` that sends and averages only the
  non-BN arrays;
- ``client_app``, a ``ClientApp`` whose ``train`` restores the node's own BN
  state from its ``Context``, loads the downloaded arrays, trains, keeps the
  new BN state and replies with the rest;
- ``server_app``, a ``ServerApp`` that starts the strategy.

Replace :func:`make_model` and :func:`load_partition` by yours.
``tests/test_recipes.py`` calls the strategy's ``configure_train`` and
``aggregate_train`` and the client's ``train`` and ``evaluate`` on Flower's
record types directly, and runs this file once as written::

    python examples/recipes/flower_strategy.py --rounds 3

which runs both apps on Flower's simulation runtime in this one process (3
nodes), prints each round's evaluated accuracy, and leaves no process
behind (``flwr run`` would start a SuperLink that keeps running).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

from bnfl.fl.state import keys_in

torch.set_num_threads(1)


# -- your model and data -----------------------------------------------------
def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 10),
    )


def load_partition(partition_id: int, num_partitions: int, *,
                   test: bool = False):
    """This node's data (its test data with ``test``): the embedded digits,
    with a feature shift per node (its own brightness)."""
    from bnfl.data import load

    split = load("digits", form="image")
    x, y = (split.x_test, split.y_test) if test else (split.x_train,
                                                       split.y_train)
    idx = torch.arange(partition_id, x.shape[0], num_partitions)
    return x[idx] * (1.0 + partition_id), y[idx]


# -- what is shared and what stays, by layer type ----------------------------
def shared_keys(model: nn.Module) -> list[str]:
    """FedBN: all but the BN layers' affine parameters, statistics and
    counters."""
    return keys_in(model, "other")


def shared_record(model: nn.Module) -> ArrayRecord:
    state = model.state_dict()
    return ArrayRecord({k: state[k] for k in shared_keys(model)})


def load_shared(model: nn.Module, arrays: ArrayRecord) -> None:
    """Load the downloaded arrays; the BN state of ``model`` is kept."""
    got = arrays.to_torch_state_dict()
    extra = sorted(set(got) - set(shared_keys(model)))
    if extra:
        raise ValueError(f"the server sent BN state {extra}; "
                         "it must stay on the client")
    model.load_state_dict({**model.state_dict(), **got})


class KeepBNLocal(FedAvg):
    """``FedAvg`` over the non-BN arrays only (FedBN); any ``FedAvg``
    option passes through.

    ``model`` fixes the split (by layer type); ``configure_train`` drops BN
    arrays before they are sent, ``aggregate_train`` refuses a reply that
    carries any.
    """

    def __init__(self, *, model: nn.Module, **fedavg_options) -> None:
        super().__init__(**fedavg_options)
        self.model = model
        self.shared = shared_keys(model)

    def global_record(self) -> ArrayRecord:
        """The initial arrays to send (``initial_arrays`` of ``start``)."""
        return shared_record(self.model)

    def configure_train(self, server_round: int, arrays: ArrayRecord,
                        config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        kept = ArrayRecord({k: v for k, v in arrays.items()
                            if k in self.shared})
        return super().configure_train(server_round, kept, config, grid)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]):
        replies = list(replies)
        for msg in replies:
            if msg.has_error():
                continue
            for record in msg.content.array_records.values():
                extra = sorted(set(record.keys()) - set(self.shared))
                if extra:
                    raise ValueError(
                        f"node {msg.metadata.src_node_id} uploaded BN "
                        f"state {extra[:3]}...; its ClientApp must keep "
                        "BN arrays local (shared_record)")
        return super().aggregate_train(server_round, replies)


# -- the apps ----------------------------------------------------------------
client_app = ClientApp()


def node_model(msg: Message, context: Context) -> nn.Module:
    """The model with the downloaded arrays and this node's own BN state
    (from its last round; none before its first)."""
    model = make_model()
    if "bn" in context.state.array_records:
        own = context.state["bn"].to_torch_state_dict()
        model.load_state_dict({**model.state_dict(), **own})
    load_shared(model, msg.content["arrays"])
    return model


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    model = node_model(msg, context)
    node = context.node_config
    x, y = load_partition(int(node["partition-id"]),
                          int(node["num-partitions"]))
    lr = float(context.run_config.get("lr", 0.05))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    seed = int(msg.content["config"]["server-round"])
    gen = torch.Generator().manual_seed(seed)
    for _ in range(int(context.run_config.get("local-steps", 5))):
        idx = torch.randint(len(x), (32,), generator=gen)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    state = model.state_dict()
    bn = keys_in(model, "bn_affine", "bn_stats", "bn_count")
    context.state["bn"] = ArrayRecord({k: state[k] for k in bn})
    content = RecordDict({
        "arrays": shared_record(model),
        "metrics": MetricRecord({"num-examples": len(x),
                                 "train_loss": float(loss)}),
    })
    return Message(content=content, reply_to=msg)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Accuracy of the shared arrays with this node's own BN layers on its
    test data (FedBN's per-client evaluation)."""
    model = node_model(msg, context).eval()
    node = context.node_config
    x, y = load_partition(int(node["partition-id"]),
                          int(node["num-partitions"]), test=True)
    with torch.no_grad():
        out = model(x)
    metrics = {"accuracy": float((out.argmax(1) == y).float().mean()),
               "loss": float(F.cross_entropy(out, y)),
               "num-examples": len(x)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}),
                   reply_to=msg)


server_app = ServerApp()
#: Server rounds when the run config does not set ``num-server-rounds``.
ROUNDS = 3


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(0)
    strategy = KeepBNLocal(model=make_model())  # every node trains, evaluates
    rounds = int(context.run_config.get("num-server-rounds", ROUNDS))
    result = strategy.start(grid=grid,
                            initial_arrays=strategy.global_record(),
                            num_rounds=rounds)
    for r, metrics in sorted(result.evaluate_metrics_clientapp.items()):
        print(f"round {r}: evaluated accuracy {100 * metrics['accuracy']:.2f}%"
              f" (mean over nodes, weighted by test samples)", flush=True)


# -- run it here: Flower's simulation runtime in this process ----------------
def run(rounds: int = 3, nodes: int = 3) -> None:
    """Both apps on Flower's simulation runtime, ``nodes`` nodes, in this
    process: no SuperLink is started, and nothing keeps running after it."""
    from flwr.simulation import run_simulation

    global ROUNDS
    ROUNDS = rounds  # the ServerApp runs in this process and reads it
    run_simulation(server_app=server_app, client_app=client_app,
                   num_supernodes=nodes,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   # Ray's local cluster: this machine only
                                   "init_args": {"include_dashboard": False,
                                                 "_node_ip_address":
                                                     "127.0.0.1"}})


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3,
                        help="server rounds (default 3)")
    parser.add_argument("--nodes", type=int, default=3,
                        help="simulated nodes (default 3)")
    args = parser.parse_args()
    run(args.rounds, args.nodes)
