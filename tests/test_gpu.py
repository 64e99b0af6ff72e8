"""bnfl on a CUDA device (``pytest -m gpu``; ``scripts/gpu_check.sh`` runs these): the batched and
sequential engines agree there, FedTAN's round is still the centralized step, a one-rank NCCL job
equals the simulator, a quick entry trained on the GPU reproduces its committed CPU numbers (also
stacked as the paper profile stacks, and with channels-last/TF32/bf16), and stacked runs with
their steady steps replayed as CUDA graphs equal the eager unstacked runs (issue 38).

Skipped without CUDA. ``BNFL_GPU_TEST_DEVICE=cpu`` runs them on the CPU instead (gloo for the
distributed case), which checks the tests themselves on a machine without a GPU. Every test
needs torch, numpy, pytest and tqdm (bnfl's training loop); the quick entry also needs what
``bnfl run`` imports (matplotlib, scipy, scikit-learn). A test skips, naming the missing package,
without them.
``BNFL_GPU_CHECK_OUT``: a folder where the quick-entry comparison is written as markdown.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

_FORCED = os.environ.get("BNFL_GPU_TEST_DEVICE")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _FORCED and not torch.cuda.is_available(),
                       reason="no CUDA device (torch.cuda.is_available() is False); BNFL_GPU_TEST_DEVICE=cpu runs "
                              "these on the CPU"),
]
ROOT = Path(__file__).resolve().parents[1]
#: float32 engines differ by rounding: this much beyond what float32 costs the sequential run
#: itself (its distance from the float64 run), as tests/test_fl_batched.py on the CPU
F32_ATOL = 1e-5


@pytest.fixture(scope="module")
def dev() -> torch.device:
    _require("tqdm")  # Simulation.run's progress bar
    torch.set_num_threads(1)
    return torch.device(_FORCED or "cuda")


@pytest.fixture(autouse=True)
def _exact_float32():
    """No TF32 in matrix products and convolutions (Ampere and later use it by default in cuDNN):
    float32 means float32 here, as on the CPU."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _require(*names: str) -> None:
    """Skip naming the first of ``names`` this Python cannot import."""
    import importlib

    for n in names:
        try:
            importlib.import_module(n)
        except ModuleNotFoundError:
            pytest.skip(f"needs the Python package {n!r}, which this machine lacks")


def _data(n_per=(40, 24, 33, 17), classes=4, seed=0):
    """Uneven non-iid clients on 1x8x8 inputs (client i: mostly class i, shifted)."""
    from bnfl import fl

    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for i, n in enumerate(n_per):
        xs.append(torch.randn(n, 1, 8, 8, generator=g) + 0.5 * i)
        ys.append((torch.arange(n) + i) % classes)
    x, y = torch.cat(xs), torch.cat(ys)
    bounds = np.cumsum((0, *n_per))
    return fl.FederatedData(x, y, x[:32], y[:32], [np.arange(bounds[i], bounds[i + 1]) for i in range(len(n_per))])


def _build(method: str, model: str, batched: str, dtype: str, dev: torch.device):
    """A 3-round run (momentum 0.9, 3 local steps of 8) on the device, built but not run."""
    from bnfl import fl, models
    from bnfl.methods import get

    m = get(method)
    torch.manual_seed(0)
    net = models.build(model, norm=m.norm, num_classes=4, in_channels=1, input_size=8)
    cfg = fl.TrainConfig(rounds=3, local_steps=3, batch_size=8, lr=0.05, momentum=0.9, dtype=dtype, device=str(dev),
                         batched=batched, progress=False)
    return fl.Simulation(net, _data(), m.algorithm(), cfg)


def _sim(method: str, model: str, batched: str, dtype: str, dev: torch.device):
    sim = _build(method, model, batched, dtype, dev)
    sim.run()
    assert sim.history.meta["batched"]["used"] is (batched == "on")
    assert all(v.device.type == dev.type for v in sim.global_state.values())
    return sim


def _state_diff(a, b) -> float:
    return max(float((a.global_state[k].double() - b.global_state[k].double()).abs().max())
               for k in b.global_state if b.global_state[k].is_floating_point())


@pytest.mark.parametrize("method, model", [("fedavg+bn", "q_mlp_bn"), ("fedtan", "q_mlp_bn"), ("scaffold", "q_mlp_bn"),
                                           ("fedavg+bn", "q_scnn"), ("fedtan", "q_scnn")])
def test_batched_equals_sequential_on_the_device(dev, method, model):
    """float32 to rounding (beyond float32's own error of the sequential run), float64 to 1e-12."""
    seq, bat = (_sim(method, model, b, "float32", dev) for b in ("off", "on"))
    exact = _sim(method, model, "off", "float64", dev)
    own = _state_diff(seq, exact)
    assert _state_diff(seq, bat) <= F32_ATOL + own, (method, model, _state_diff(seq, bat), own)
    assert _state_diff(bat, exact) <= own + F32_ATOL
    assert _state_diff(exact, _sim(method, model, "on", "float64", dev)) <= 1e-12


@pytest.mark.parametrize("batched", ["off", "on"])
def test_fedtan_round_equals_centralized_step_on_the_device(dev, batched):
    """FedTAN (Properties 1-3) in float64 on the device: one round, one full-batch local step, non-iid
    clients of unequal sizes, equals one SGD step of the model on the union batch (parameters and
    BN running statistics); FedAvg+BN does not."""
    from torch import nn

    from bnfl import fl

    data = _data()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)).double()
    central = copy.deepcopy(net).to(dev).train()
    x = data.x_train.to(dev, torch.float64)
    y = data.y_train.to(dev)
    nn.functional.cross_entropy(central(x), y).backward()
    with torch.no_grad():
        for p in central.parameters():
            p -= 0.3 * p.grad
    want = {k: v for k, v in central.state_dict().items() if not k.endswith("num_batches_tracked")}
    cfg = fl.TrainConfig(rounds=1, local_steps=1, batch_size=1000, lr=0.3, dtype="float64", device=str(dev),
                         batched=batched, progress=False)
    for alg, close in ((fl.FedTAN(), True), (fl.FedAvg(), False)):
        sim = fl.Simulation(net, data, alg, cfg)
        sim.run()
        diff = max(float((sim.global_state[k] - v).abs().max()) for k, v in want.items())
        assert (diff < 1e-12) is close, (type(alg).__name__, diff)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _one_rank(backend: str, dev: torch.device):
    import torch.distributed as dist

    if dev.type == "cuda":
        torch.cuda.set_device(dev.index or 0)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("method", ["fedtan", "scaffold"])
def test_one_rank_nccl_equals_the_simulator(dev, method):
    """torch.distributed with NCCL (gloo on the CPU), one rank holding every client: the same
    history, channel counters and states as the simulator (float64, 1e-12). FedTAN's coupled
    step goes through NCCL's all-reduce."""
    import torch.distributed as dist

    from bnfl.fl.distributed import DistributedSimulation

    backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend == "nccl" and not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    ref = _sim(method, "q_mlp_bn", "off", "float64", dev)
    with _one_rank(backend, dev):
        twin = _build(method, "q_mlp_bn", "off", "float64", dev)  # the same model, data, algorithm and config
        sim = DistributedSimulation(twin.model, twin.data, twin.algorithm, twin.config)
        hist = sim.run()
        assert hist.meta["engine"] == "torch.distributed" and hist.meta["backend"] == backend
    assert sim.channel.counters() == ref.channel.counters()
    assert _state_diff(sim, ref) <= 1e-12
    for got, want in zip(hist.without_time(), ref.history.without_time(), strict=True):
        for k, v in want.items():
            if isinstance(v, float):
                assert abs(got[k] - v) <= 1e-12, (k, got[k], v)
            else:
                assert got[k] == v, k


_CELL = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*±\s*(\d+(?:\.\d+)?)\s*$")
#: the quick entry: FixBN Table 2 at the quick profile (3 seeds, 9 runs, synthetic data: no files)
ENTRY = "fixbn-tab2"
#: a method's mean over the seeds may move this many of the committed run's seed standard
#: deviations: the same seeds train on another device, whose rounding drifts the runs apart (at
#: most as far as other seeds would: the difference of two 3-seed means has 0.82 sd)
SEED_SDS = 2.5


def _compare(committed: dict, got: dict, title: str) -> tuple[list[str], list[str], int]:
    """The quick entry's mean ± sd cells against the committed ones: markdown lines, the cells
    outside SEED_SDS seed sds, and how many cells were compared."""
    lines = [f"## {title}", "", f"tolerance: |mean difference| <= {SEED_SDS} x the committed seed sd", "",
             "| row | column | committed (CPU) | this device | difference | tolerance | ok |", "|---|---|---|---|---|---|---|"]
    bad, checked = [], 0
    for want_row, got_row in zip(committed["rows"], got["rows"], strict=True):
        label = next(iter(want_row.values()))
        for col, cell in want_row.items():
            w, g = _CELL.match(str(cell)), _CELL.match(str(got_row.get(col, "")))
            if not w or "paper" in col.lower():
                continue
            assert g, (label, col, got_row.get(col))
            diff, tol = float(g[1]) - float(w[1]), SEED_SDS * float(w[2])
            checked += 1
            ok = abs(diff) <= tol
            lines.append(f"| {label} | {col} | {cell} | {got_row[col]} | {diff:+.2f} | {tol:.2f} | {'yes' if ok else 'NO'} |")
            if not ok:
                bad.append(lines[-1])
    return lines, bad, checked


def _write(name: str, lines: list[str]) -> None:
    out = os.environ.get("BNFL_GPU_CHECK_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text("\n".join(lines) + "\n")


def test_quick_entry_on_the_device_matches_its_committed_cpu_numbers(dev, tmp_path):
    """``bnfl run fixbn-tab2 --profile quick --device cuda``: every mean ± sd cell of the table
    within SEED_SDS committed seed sds of the committed CPU number (figures/fixbn-tab2)."""
    _require("tqdm", "matplotlib", "scipy", "sklearn")
    from bnfl.cli import main

    committed = json.loads((ROOT / "figures" / ENTRY / "result.json").read_text())
    assert main(["run", ENTRY, "--profile", "quick", "--device", str(dev), "--out", str(tmp_path)]) == 0
    got = json.loads((tmp_path / ENTRY / "result.json").read_text())
    assert got["device"] == str(dev)
    lines, bad, checked = _compare(committed, got, f"{ENTRY} --profile quick: {dev} against the committed CPU result")
    _write("quick-entry.md", [f"# {ENTRY} --profile quick on {dev}", "", *lines])
    assert checked >= 3, lines
    assert not bad, "\n".join(bad)


#: the options of the stacked path (issue 38): the entry stacked as the paper profile stacks on a
#: GPU (CUDA graphs on), then with channels-last, TF32 and bf16 on too
VARIANTS = {"stacked": None, "stacked+channels_last+tf32+bf16": {"channels_last": True, "tf32": True, "bf16": True}}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_quick_entry_stacked_on_the_device_stays_within_seed_noise(dev, tmp_path, variant):
    """The quick entry run through the paper profile's path (every run of the entry planned and
    stacked, ``stack="entry"``; the steady steps replayed as CUDA graphs) and with the arithmetic
    options: each cell within SEED_SDS committed seed sds of the committed CPU number. The
    differences are what the options do to a committed quick number (quick-entry-<variant>.md)."""
    _require("tqdm", "matplotlib", "scipy", "sklearn")
    from bnfl.experiments.runner import run
    from bnfl.fl.device_options import DeviceOptions

    extra = VARIANTS[variant]
    opts = None if extra is None else DeviceOptions(cuda_graphs=dev.type == "cuda", **extra)
    committed = json.loads((ROOT / "figures" / ENTRY / "result.json").read_text())
    got = run(ENTRY, profile="quick", device=str(dev), out=tmp_path, stack="entry", device_options=opts).to_dict()
    lines, bad, checked = _compare(committed, got, f"{ENTRY} --profile quick, {variant}, on {dev}")
    _write(f"quick-entry-{variant.replace('+', '-')}.md", [f"# {ENTRY} --profile quick on {dev}: {variant}", "", *lines])
    assert checked >= 3, lines
    assert not bad, "\n".join(bad)


RUNS = ((0, 0.05), (1, 0.1), (2, 0.05))  # (seed, learning rate): a grid's rows


def _stacked(dev, method: str, graphs: bool, dtype: str, runs=RUNS):
    from bnfl import fl, models
    from bnfl.fl.device_options import DeviceOptions
    from bnfl.fl.lockstep import run_lockstep
    from bnfl.methods import get

    m = get(method)
    data = _data(n_per=(40, 40, 40, 40))  # equal batches: no padding mask, so the steady steps may replay
    sims = []
    for s, lr in runs:
        cfg = fl.TrainConfig(rounds=3, local_steps=4, batch_size=8, lr=lr, momentum=0.9, dtype=dtype, device=str(dev),
                             batched="on", progress=False, seed=s)
        torch.manual_seed(s)
        net = models.build("q_scnn", norm=m.norm, num_classes=4, in_channels=1, input_size=8)
        sim = fl.Simulation(net, data, m.algorithm(), cfg)
        sim.batched_engine.options = DeviceOptions(cuda_graphs=graphs)
        sims.append(sim)
    run_lockstep(sims, stack_coupled=True)
    return sims


@pytest.mark.parametrize("method", ["fedavg+bn", "fedtan"])
def test_stacked_runs_and_graph_replay_equal_the_eager_unstacked_runs_on_the_device(dev, method):
    """A learning-rate grid of three runs stacked (FedTAN's coupled steps too), eager and with the
    steady steps replayed as a CUDA graph: each run equals its own eager run, float64 to 1e-12,
    float32 to rounding; on CUDA the graph was captured and replayed."""
    exact = [_stacked(dev, method, False, "float64", runs=(run,))[0] for run in RUNS]
    for dtype in ("float64", "float32"):
        alone = [_stacked(dev, method, False, dtype, runs=(run,))[0] for run in RUNS]
        own = max(_state_diff(a, e) for a, e in zip(alone, exact, strict=True))  # float32's own error
        tol = 1e-12 if dtype == "float64" else F32_ATOL + own
        for graphs in (False, True):
            sims = _stacked(dev, method, graphs, dtype)
            for s in sims:
                assert s.batched_engine.graph_error is None, s.batched_engine.graph_error
            for got, want in zip(sims, alone, strict=True):
                assert _state_diff(got, want) <= tol, (method, dtype, graphs, _state_diff(got, want))
            if graphs and dev.type == "cuda":
                made = [g for net in sims[0].batched_engine._graphs.values() for g in net.values()]
                assert made and all(g.replays > 0 for g in made)
