"""bnfl on Flower (bnfl.fl.flower): equal to bnfl's simulator, and the Flower users' failure modes.

Every equality run goes through Flower's simulation runtime (``flwr.simulation.run_simulation``,
Ray actors, one node per client) and is compared with ``bnfl.fl.build(cfg).run()`` on the same
config and seed: the global state, every client's local state (asked from the nodes), and the
history rows without their time fields. Measured: bit-identical in float64 and float32 (max
difference 0.0); asserted to 1e-12 (float64) and 1e-6 (float32).

Ray's start-up costs most of a run (about 15 s on a 2-core machine), so each method runs once
per module and every assertion on it shares that run, and HBN's stop on a failed client ends
that launch (its last run). Every exchange has a reply timeout and every test a wall-clock alarm.

The failure-mode tests set bnfl's way (layer-type state groups, the engine's merge of what a
client received over its own state, the seeded partition, sample counts) against the one Flower
users report trouble with: BN state chosen by ``"bn" in key``. The substring variant is expected
to fail (strict xfail: the test fails if it ever passes).
"""

from __future__ import annotations

import copy
import math
import os
import re
import signal

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("flwr")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bnfl.fl._flower_records import from_arrays, to_arrays  # noqa: E402
from bnfl.fl.clients import Clients  # noqa: E402
from bnfl.fl.engine import TIME_FIELDS, Simulation  # noqa: E402
from bnfl.fl.flower import FlowerClientError, run_flower  # noqa: E402
from bnfl.train.config import build, setup_from_config  # noqa: E402

ROUNDS = 2
# partition: dirichlet gives the three clients different sample counts (the weights matter)
BASE = {"seed": 3, "rounds": ROUNDS, "partition": {"kind": "dirichlet", "num_clients": 3, "phi": 1.0},
        "train": {"local_steps": 2, "batch_size": 16, "lr": 0.05, "dtype": "float64", "progress": False,
                  "batched": "off"}}  # the simulator the Flower runs are compared with: the sequential reference
METHODS = {
    "fedavg+bn": {},
    "fedbn": {},
    "silobn": {},
    # the freeze at T* = 1 (round 2 frozen) and the momenta kept on each client across rounds
    "fixbn": {"method_options": {"switch": 1, "momentum": "local"}, "rounds": 3,
              "train": {**BASE["train"], "momentum": 0.9}},
    # eq. 7 on the clients, eqs. 8 and 11 on the server, the statistics-only round T+1
    "hbn": {},
    # algorithm state as values: each node keeps its client's c_i in its Context, the ServerApp c
    "scaffold": {},
}  # FedACG and MOON's state over the same apps, without Ray: tests/test_fl_client_state.py
TIME_LIMIT_S = 240


def config(method: str, **over) -> dict:
    return {**BASE, "method": method, **METHODS.get(method, {}), **over}


@pytest.fixture(autouse=True)
def _alarm():
    """Each test (its share of the module's runs included) ends within TIME_LIMIT_S."""
    def expire(signum, frame):
        raise TimeoutError(f"a Flower test ran over {TIME_LIMIT_S} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TIME_LIMIT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


CASES = {**{m: config(m) for m in METHODS},
         "fedbn-float32": config("fedbn", train={**BASE["train"], "dtype": "float32"}),
         "fedavg+bn-fault": config("fedavg+bn")}


@pytest.fixture(scope="module")
def runs():
    """case -> (bnfl's simulator after its run, the Flower result). Flower's start-up (Ray,
    actors) costs most of a launch, so all cases run in one launch, one after the other on the
    same 3 nodes (each client's state kept apart per run); the fault case's client 1 fails in round 2.
    Last, HBN with client 2 failing in round 1 stops the launch: ``"hbn-stop"`` -> (None, the
    :class:`FlowerClientError` raised, or None if none was)."""
    setups, refs = [], {}
    for name, cfg in CASES.items():
        ref = build(cfg)
        ref.run()
        refs[name] = ref
        setup = setup_from_config(cfg, out=None, reply_timeout_s=60.0, answer_inspect=True)
        if name == "fedavg+bn-fault":
            setup.algorithm = _failing(setup.algorithm, 1, 2)
        setups.append(setup)
    stop = setup_from_config(config("hbn", rounds=1), out=None, reply_timeout_s=60.0, answer_inspect=True)
    stop.algorithm = _failing(stop.algorithm, 2, 1)
    try:
        results, stopped = run_flower([*setups, stop], num_cpus=2, collect_client_state=True), None
    except FlowerClientError as err:
        results, stopped = err.results, err
    return {**{name: (refs[name], res) for name, res in zip(CASES, results, strict=False)}, "hbn-stop": (None, stopped)}


def _max_diff(a: dict, b: dict) -> float:
    assert list(a) == list(b)
    return max((float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a), default=0.0)


def _rows(history) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIME_FIELDS} for row in history.rows]


def _assert_rows_close(got: list[dict], want: list[dict], tol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert sorted(g) == sorted(w)
        for k, v in w.items():
            if isinstance(v, float) and not math.isnan(v):
                assert g[k] == pytest.approx(v, abs=tol, rel=0), k
            else:
                assert g[k] == v, k


@pytest.mark.parametrize("method", list(METHODS))
def test_flower_run_equals_the_simulator(runs, method):
    ref, res = runs[method]
    assert res.history.meta["engine"] == "flower"
    assert res.failures == []
    # global state, float64, dtypes kept (num_batches_tracked stays a 0-d int64)
    assert {k: v.dtype for k, v in res.global_state.items()} == {k: v.dtype for k, v in ref.global_state.items()}
    assert _max_diff(res.global_state, ref.global_state) <= 1e-12
    # every client's local state (FedBN's BN layers, SiloBN's statistics, HBN's alpha) and momenta
    for c in range(ref.num_clients):
        assert _max_diff(res.client_state[c]["local"], ref.client_local.get(c, {})) <= 1e-12
        got, want = res.client_state[c]["algorithm"], ref.client_algorithm.get(c, {})  # e.g. SCAFFOLD's c_i
        assert list(got) == list(want)
        for key in want:
            assert _max_diff(got[key], want[key]) <= 1e-12, key
    # the server's own (SCAFFOLD's c, FedACG's m; what an algorithm still keeps on itself, HBN's solver)
    assert list(res.algorithm_state) == list({**ref.server.state, **ref.algorithm.state_dict()})
    _assert_rows_close(_rows(res.history), _rows(ref.history), 1e-12)
    assert {k: v for k, v in res.history.meta.items() if k not in ("engine", "flwr")} == ref.history.meta


def test_the_methods_keep_what_they_say(runs):
    """The runs above cover what is special per method (so equality is not vacuous)."""
    _, fixbn = runs["fixbn"]
    assert [r["frozen_stats"] for r in fixbn.history.rows] == [False, True, True]
    assert all(fixbn.client_state[c]["algorithm"]["optimizer.momentum"] for c in range(3))  # FixBN-star: kept on the node
    _, hbn = runs["hbn"]
    assert hbn.history.rows[-1].get("statistics_only") is True and len(hbn.history) == ROUNDS + 1
    _, fedbn = runs["fedbn"]
    locals_ = [fedbn.client_state[c]["local"] for c in range(3)]
    key = next(k for k in locals_[0] if k.endswith("running_mean"))
    assert not torch.equal(locals_[0][key], locals_[1][key])  # BN statistics differ per client
    assert "client_test_acc" in fedbn.history.rows[-1]


def test_float32_run_equals_the_simulator(runs):
    ref, res = runs["fedbn-float32"]
    assert res.global_state[next(iter(res.global_state))].dtype == torch.float32
    assert _max_diff(res.global_state, ref.global_state) <= 1e-6
    for c in range(3):
        assert _max_diff(res.client_state[c]["local"], ref.client_local[c]) <= 1e-6
    _assert_rows_close(_rows(res.history), _rows(ref.history), 1e-6)


# -- faults -------------------------------------------------------------------------------------------
def _failing(algorithm, client: int, round_: int):
    """A copy of ``algorithm`` whose ``client_start`` raises on ``client`` in ``round_`` (on its node)."""
    base = type(algorithm)

    class Failing(base):
        def client_start(self, ctx, r, model):
            if ctx.client == client and r == round_:
                raise RuntimeError(f"injected failure of client {client} in round {r}")
            return super().client_start(ctx, r, model)

    out = copy.deepcopy(algorithm)
    out.__class__ = Failing
    return out


class _Dropping(Clients):
    """The simulator's own clients without ``client`` in round ``r`` (what the Flower server must do
    when it fails), by composition: a :class:`~bnfl.fl.clients.Clients` around the run's own."""

    def __init__(self, drop: tuple[int, int]) -> None:
        self.drop = drop

    def attach(self, host):
        self.inner = host.here

    def train(self, r, plan, clients, received, *, lr, start, first=None):
        kept = [c for c in clients if (c, r) != self.drop]
        return self.inner.train(r, plan, kept, received[:len(kept)], lr=lr, start=start, first=first)

    def exchange(self, step, clients, weights, *, plan, start):
        return self.inner.exchange(step, clients, weights, plan=plan, start=start)

    def request(self, kind, clients, state):
        return self.inner.request(kind, clients, state)

    def accuracies(self, clients):
        return self.inner.accuracies(clients)


def test_a_failed_client_is_left_out_with_weights_renormalised(runs):
    cfg = CASES["fedavg+bn-fault"]
    _, res = runs["fedavg+bn-fault"]
    rows = res.history.rows
    assert rows[1]["failed_clients"] == [1] and rows[1]["clients"] == [0, 2]
    assert "failed_clients" not in rows[0] and rows[0]["clients"] == [0, 1, 2]
    assert [(f["round"], f["client"]) for f in res.failures] == [(2, 1)]
    assert "injected failure of client 1" in res.failures[0]["reason"]
    ref = build(cfg)
    want = Simulation(ref.model, ref.data, ref.algorithm, ref.config, clients=_Dropping((1, 2)))
    want.run()
    assert _max_diff(res.global_state, want.global_state) <= 1e-12
    want_rows = _rows(want.history)
    want_rows[1]["failed_clients"] = [1]
    _assert_rows_close(_rows(res.history), want_rows, 1e-12)
    # the weights are N_0/(N_0+N_2), N_2/(N_0+N_2): averaging client 1 as zeros would shrink the state
    sizes = [len(i) for i in ref.data.clients]
    p = [sizes[0] / (sizes[0] + sizes[2]), sizes[2] / (sizes[0] + sizes[2])]
    assert want.weights([0, 2]) == pytest.approx(p, abs=1e-15)
    shrunk = {k: v * (1 - sizes[1] / sum(sizes)) for k, v in want.global_state.items() if v.is_floating_point()}
    assert _max_diff({k: res.global_state[k] for k in shrunk}, shrunk) > 1e-3


def test_hbn_stops_with_the_failed_client_named(runs):
    """The launch's last run (HBN, client 2 failing in round 1) stops it; the runs before it are kept."""
    _, err = runs["hbn-stop"]
    assert isinstance(err, FlowerClientError), "HBN went on without its failed client"
    assert re.search(r"round 1: training failed on clients \[2\]", str(err))
    assert list(err.failures) == [2]
    assert "injected failure of client 2" in err.failures[2]
    assert len(err.results) == len(CASES) + 1 and err.results[-1].history is None
    assert all(res.history is not None for res in err.results[:-1])



# -- the Flower users' failure modes ---------------------------------------------------------------
class UserNet(nn.Module):
    """A model as Flower users write it: a BN layer named ``bn1``, one inside a Sequential
    (``block.1``), and a bottleneck layer named ``bneck`` (not a normalisation)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.bn1 = nn.Linear(6, 8), nn.BatchNorm1d(8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.bneck, self.head = nn.Linear(8, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.head(torch.relu(self.bneck(self.block(torch.relu(self.bn1(self.fc1(x)))))))


SIZES, BATCH = (10, 25, 29), 8  # sample counts that are not multiples of the batch size


@pytest.fixture(scope="module")
def user_sim():
    """SiloBN (BN statistics local, sample-count weights) on UserNet in bnfl's engine, the
    simulator the Flower nodes run (float64)."""
    from bnfl.fl.algorithms import SiloBN
    from bnfl.fl.engine import FederatedData, TrainConfig

    g = torch.Generator().manual_seed(0)
    n = sum(SIZES)
    x, y = torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)
    clients = np.split(np.arange(n), np.cumsum(SIZES)[:-1])
    data = FederatedData(x, y, x[:12], y[:12], clients)
    torch.manual_seed(0)
    return Simulation(UserNet(), data, SiloBN(), TrainConfig(rounds=2, local_steps=2, batch_size=BATCH, lr=0.05,
                                                            dtype="float64", progress=False, batched="off"))


def _wire(state: dict) -> dict:
    """Through a Flower message and back (bnfl's wire format)."""
    return from_arrays(to_arrays(state))


class Users:
    """The approach Flower users report trouble with: BN state is every key with "bn" in its name
    (Flower's FedBN baseline), the client loads what it received with strict=True, each client
    instantiation re-partitions without a seed, num_examples is the DataLoader's length (batches)."""

    @staticmethod
    def shared_keys(sim):
        return [k for k in sim.model.state_dict() if "bn" not in k]

    upload_keys = shared_keys

    @staticmethod
    def client_update(sim, c, received):
        model = copy.deepcopy(sim.model)
        model.load_state_dict(received, strict=True)  # the users' set_parameters
        return {k: v for k, v in model.state_dict().items() if k in received}

    @staticmethod
    def client_samples(c):
        n = len(build(CASES["fedbn"]).data.y_train)
        perm = np.random.default_rng().permutation(n)  # an unseeded split, anew in each instantiation
        return perm[c * (n // 3):(c + 1) * (n // 3)]

    @staticmethod
    def weights(sim, clients):
        batches = [math.ceil(len(sim.client_indices[c]) / BATCH) for c in clients]  # len(DataLoader)
        return [b / sum(batches) for b in batches]


class Bnfl:
    """bnfl over Flower: the engine's key lists from the layer types (state groups), the
    ClientApp's client_round (merges what it received over the client's own state), the seeded
    partition of the setup, the server's sample-count weights."""

    @staticmethod
    def shared_keys(sim):
        return sim.download_keys

    @staticmethod
    def upload_keys(sim):
        return sim.upload_keys

    @staticmethod
    def client_update(sim, c, received):
        work = copy.deepcopy(sim)
        up, _ = work.client_round(1, c, received, lr=0.05, frozen=False)
        return up

    @staticmethod
    def client_samples(c):
        from bnfl.fl.flower_client import ClientRunner

        setup = setup_from_config(CASES["fedbn"], out=None)  # what each ClientApp instantiation builds
        return ClientRunner(setup, c).client_indices[c]

    @staticmethod
    def weights(sim, clients):
        return sim.weights(clients)


APPROACHES = [pytest.param(Bnfl, id="bnfl"),
              pytest.param(Users, id="bn-substring", marks=pytest.mark.xfail(strict=True, raises=(AssertionError, RuntimeError)))]


@pytest.mark.parametrize("approach", APPROACHES)
def test_num_batches_tracked_never_reaches_the_aggregation(user_sim, approach):
    """Averaging the uploads in place, as a strategy does, must not meet a 0-d integer counter
    (Sequential's ``block.1.num_batches_tracked`` has no "bn" in its name)."""
    sim = copy.deepcopy(user_sim)
    received = {k: sim.global_state[k] for k in sim.download_keys}
    uploads = []
    for c in range(3):  # each client's local training (bnfl's ClientApp: client_round), then the upload
        sent, _ = sim.client_round(1, c, received, lr=0.05, frozen=False)
        trained = sim.work_model.state_dict()
        uploads.append(_wire({k: trained[k] for k in approach.upload_keys(sim)}))
        assert approach is Users or list(sent) == list(uploads[-1])
    assert all(v.is_floating_point() for up in uploads for v in up.values())
    avg = {k: torch.zeros_like(v) for k, v in uploads[0].items()}
    for up, p in zip(uploads, sim.weights([0, 1, 2]), strict=True):
        for k in avg:
            avg[k] += p * up[k]  # an integer counter: "result type Float can't be cast to ... Long"


@pytest.mark.parametrize("approach", APPROACHES)
def test_client_loads_what_it_received_strictly(user_sim, approach):
    """A client gets only the shared state; its model must still load completely (strict), with
    its own BN statistics (SiloBN) and nothing that is not BN kept back."""
    sim = user_sim
    received = _wire({k: sim.global_state[k] for k in approach.shared_keys(sim)})
    approach.client_update(sim, 0, received)  # Users: strict load raises "Missing key(s) ... bn1..."
    assert "bneck.weight" in received and "block.1.running_mean" not in received


@pytest.mark.parametrize("approach", APPROACHES)
def test_partition_is_seeded_once(approach):
    """Flower instantiates the ClientApp anew for each message: the client's samples must not change."""
    from bnfl.fl.flower import samples_crc

    first, again = approach.client_samples(1), approach.client_samples(1)
    assert samples_crc(first) == samples_crc(again)
    assert np.array_equal(np.sort(first), np.sort(again))


@pytest.mark.parametrize("approach", APPROACHES)
def test_weights_are_sample_counts(user_sim, approach):
    """FedAvg's p_i = N_i / N in samples, not batches (10, 25, 29 samples are 2, 4, 4 batches of 8)."""
    sizes = np.array(SIZES, dtype=float)
    assert approach.weights(user_sim, [0, 1, 2]) == pytest.approx(sizes / sizes.sum(), abs=1e-15)


# -- the command line ------------------------------------------------------------------------------
def test_bnfl_train_engine_flower_writes_the_default_engines_history(tmp_path):
    from bnfl.cli import main
    from bnfl.fl.engine import History

    toml = tmp_path / "run.toml"
    toml.write_text('method = "fedbn"\nseed = 3\nrounds = 2\n[partition]\nkind = "dirichlet"\nnum_clients = 3\nphi = 1.0\n'
                    '[train]\nlocal_steps = 2\nbatch_size = 16\nlr = 0.05\ndtype = "float64"\n')
    for engine in ("simulation", "flower"):
        assert main(["train", "--config", str(toml), "--engine", engine, "--quiet", "--out", str(tmp_path / engine)]) == 0
        assert (tmp_path / engine / "history.csv").exists()
    sim, fl = (History.from_json(tmp_path / e / "history.json") for e in ("simulation", "flower"))
    assert fl.meta["engine"] == "flower" and "engine" not in sim.meta
    # batched='auto' (the default): the simulator batches FedBN's clients, Flower's nodes run one client each
    assert sim.meta["batched"]["used"] and sim.meta["batched"]["line"].startswith("batched: batched='auto' chose")
    assert not fl.meta["batched"]["used"] and fl.meta["batched"]["line"].startswith("sequential: batched='auto' fell back")
    _assert_rows_close(_rows(fl), _rows(sim), 1e-12)
    assert (tmp_path / "flower" / "history.csv").read_text().splitlines()[0] == \
        (tmp_path / "simulation" / "history.csv").read_text().splitlines()[0]
    assert main(["train", "--config", str(toml), "--engine", "flower", "--resume"]) == 2  # no checkpoints over Flower


@pytest.mark.parametrize("method", ["fedtan", "fedtan2", "centralized"])
def test_methods_flower_cannot_carry_are_refused_with_the_way_out(method, capsys):
    from bnfl.cli import main

    cfg = config(method, partition={"kind": "classes_per_client", "num_clients": 5, "k": 2})
    want = "torch.distributed engine" if method.startswith("fedtan") else "simulation engine"
    with pytest.raises(ValueError, match=want):
        setup_from_config(cfg)
    if method == "fedtan":  # q_mlp_bn has L = 2 BN layers: 7 exchanges in the coupled step
        with pytest.raises(ValueError, match=r"3L\+1 = 7 exchanges .* L = 2 BN layers.*bnfl\.fl\.distributed"):
            setup_from_config(cfg)
        assert main(["train", "--method", "fedtan", "--rounds", "1", "--engine", "flower", "--quiet"]) == 2
        assert "bnfl.fl.distributed" in capsys.readouterr().err
