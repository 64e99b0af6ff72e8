"""bnfl.compat.flower.BNSafe around Flower's own FedAdam, on Flower's simulation runtime.

One launch of ``flwr.simulation.run_simulation`` (Ray actors on 127.0.0.1, three nodes) runs two
strategies one after the other on the same nodes: Flower's ``FedAdam`` on every array, and
``BNSafe(FedAdam, policy="exact")``. Each client loads the global arrays, runs its BN layer in
training mode on its own data (small scale: the layer's variance is about 0.003) and takes one SGD
step, then replies with its arrays and ``num-examples``. Plain FedAdam moves ``running_var`` by
about ``eta`` per round whatever its scale, overshoots the small target and drives it negative;
the wrapper merges the statistics exactly (bnfl.compat.aggregate_state_dicts) and keeps them
positive. Its first round's statistics equal that aggregation of the clients' replies recomputed
here. Bounded by an alarm; Ray is shut down at the end (no process left behind).
"""

from __future__ import annotations

import signal
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAdam  # noqa: E402

from bnfl import compat  # noqa: E402
from bnfl.compat.flower import BNSafe  # noqa: E402
from bnfl.fl.flower import _shutdown_ray  # noqa: E402

NODES, ROUNDS, LIMIT_S = 3, 16, 240
EXAMPLES = (6, 10, 16)  # per client: the weights differ
OFFSETS = (-1.0, 0.5, 2.0)  # the clients' means differ: the between-client term is large


class Net(nn.Module):
    """A linear layer and a BN layer whose name holds no "bn" (``features.1``)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))

    def forward(self, x):
        return self.features(x)


def client_data(cid: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 + cid)
    return OFFSETS[cid] + 0.05 * torch.randn(EXAMPLES[cid], 4, generator=gen)  # (N, 4)


def client_update(state: dict, cid: int) -> dict:
    """One client's round: load ``state``, one SGD step in training mode (BN's running statistics
    move by momentum 0.1 towards the client's), return the new state."""
    model = Net()
    model.load_state_dict(state)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = model(client_data(cid)).pow(2).mean()
    loss.backward()
    opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    cid = int(context.node_config["partition-id"])
    state = client_update(msg.content["arrays"].to_torch_state_dict(), cid)
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({"num-examples": EXAMPLES[cid]})})
    return Message(content=content, reply_to=msg)


RESULTS: dict[str, list[dict]] = {}


def make_server() -> ServerApp:
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        for name in ("fedadam", "bnsafe"):
            inner = FedAdam(fraction_evaluate=0.0, min_train_nodes=NODES, min_available_nodes=NODES, eta=0.1)
            strategy = inner if name == "fedadam" else BNSafe(inner, model=Net(), policy="exact")
            rows = RESULTS.setdefault(name, [])

            def record(server_round, arrays, rows=rows):
                rows.append({k: torch.from_numpy(np.array(a.numpy())) for k, a in arrays.items()})
                return None

            strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=ROUNDS,
                           timeout=60, evaluate_fn=record)

    return server


#: The worker's child processes before the run (one frozenset), so the check sees only the run's own.
STARTED: set[frozenset[int]] = set()


def _children() -> frozenset[int]:
    try:
        import psutil
    except ImportError:
        return frozenset()
    return frozenset(p.pid for p in psutil.Process().children(recursive=True))


@pytest.fixture(scope="module")
def runs():
    import ray.cloudpickle
    from flwr.simulation import run_simulation

    def expire(signum, frame):
        raise TimeoutError(f"the Flower run ran over {LIMIT_S} s")

    STARTED.clear()
    STARTED.add(_children())  # what earlier tests of this worker left running is not this run's
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(LIMIT_S)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the nodes cannot import this test file
    try:
        RESULTS.clear()
        run_simulation(make_server(), client, num_supernodes=NODES,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"include_dashboard": False, "_node_ip_address": "127.0.0.1",
                                                     "num_cpus": 2, "logging_level": "ERROR"}})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        _shutdown_ray()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    return dict(RESULTS)


def test_no_process_is_left_behind(runs):
    """Ray's processes (raylet, GCS, the node actors) started by the run end with it."""
    psutil = pytest.importorskip("psutil")
    deadline = time.monotonic() + 30
    before = next(iter(STARTED), frozenset())
    while (left := [p for p in psutil.Process().children(recursive=True) if p.pid not in before
                    and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [p.name() for p in left]


def _var(row: dict) -> torch.Tensor:
    return row["features.1.running_var"]


def test_plain_fedadam_on_the_buffers_drives_the_variance_negative(runs):
    rows = runs["fedadam"]
    assert len(rows) == ROUNDS + 1  # the initial arrays and each round's
    broken = [r for r, row in enumerate(rows) if not bool(torch.isfinite(_var(row)).all()) or bool((_var(row) < 0).any())]
    assert broken, f"plain FedAdam kept running_var positive: {[float(_var(r).min()) for r in rows]}"


def test_bnsafe_fedadam_keeps_the_variance_positive_on_the_same_run(runs):
    rows = runs["bnsafe"]
    assert len(rows) == ROUNDS + 1
    for r, row in enumerate(rows):
        v = _var(row)
        assert bool(torch.isfinite(v).all()) and bool((v > 0).all()), (r, v)
    assert rows[-1]["features.1.num_batches_tracked"].dtype == torch.int64


def test_bnsafe_round_statistics_are_the_exact_merge_of_the_replies(runs):
    """Round 1 from the initial arrays: the clients' replies recomputed here, merged by compat."""
    start = Net().state_dict()
    states = [client_update(start, c) for c in range(NODES)]
    want = compat.aggregate_state_dicts(states, list(EXAMPLES), model=Net(), policy="exact")
    got = runs["bnsafe"][1]
    for key in ("features.1.running_mean", "features.1.running_var"):  # the replies' order may differ: rounding
        torch.testing.assert_close(got[key], want[key], rtol=1e-6, atol=1e-7)
    assert torch.equal(got["features.1.num_batches_tracked"], want["features.1.num_batches_tracked"])
    # the weights went through FedAdam, not through the BN policy: they moved from the start
    assert not torch.equal(got["features.0.weight"], start["features.0.weight"])
