"""Issue 27's speed targets, every ratio from one run, each against its baseline in the same run.

(a) a round of 100 clients over a round of 5 (digits MLP, FedAvg+BN, batched, all clients every
    round, 5 local steps of batch 32: the 100 clients hold about 14 samples each); target <= 5;
(b) a FedTAN round over a FedAvg+BN round, batched, 5 clients, 5 steps of 32: digits MLP,
    Q-SCNN (1x8x8), ResNet-20 (3x32x32); target <= 1.15;
(c) FedTAN's coupled first step over a centralized step on the union batch (the 5 clients'
    160 samples; forward and backward of the plain model, as ``bench_core.py``): the batched
    engine's step 1 of a FedTAN round (``BatchedClients._coupled_step``: the clients' batches,
    the coupled forward and backward, the per-client gradients, eq. 6), and the sequential
    engine's :func:`bnfl.fedtan.coupled_step`; digits MLP and Q-SCNN; target <= 1.5;
(d) the 300-round digits FedAvg+BN run against the plain-numpy implementation of
    ``bench_numpy_baseline.py`` (its arithmetic only, one evaluation at the end): ``bnfl train
    --config examples/fedtan_digits.toml --method fedavg+bn --rounds 300`` with one evaluation at
    the end, as a whole process (data, model, its history files and a checkpoint every round, the
    default engine) minus bnfl's start-up (a process that imports ``bnfl.cli`` and ``bnfl.fl``),
    and ``Simulation.run`` of the same run in this process (build excluded, no checkpoints);
    target <= 1.0.

Usage::

    python benchmarks/bench_targets.py [--samples 40] [--repeats 3] [--rounds 300] [--skip-resnet]

Round times are medians over rounds after a warm-up round, the two settings of a ratio advanced
round by round alternately (load on a shared machine hits both); each ratio is printed for the
medians and, in brackets, for the minima (steadier on a loaded machine). One torch thread. Not a test:
the numbers depend on the machine; ``docs/engines.md`` records a run.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_batched import MODELS, digits_run_seconds, paired_rounds  # noqa: E402
from bench_numpy_baseline import CONFIG, numpy_seconds  # noqa: E402

from bnfl import fedtan, fl  # noqa: E402
from bnfl.fl import batched as fl_batched  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def ratio(a: list[float], b: list[float]) -> str:
    """``a / b`` of the medians, and of the minima in brackets (the minima are steadier where
    other work preempts the process: a long measurement is interrupted more often than a short)."""
    return f"{statistics.median(a) / statistics.median(b):.2f} (min {min(a) / min(b):.2f})"


def ms(a: list[float]) -> str:
    return f"{statistics.median(a) * 1e3:.1f}"


# (c) ------------------------------------------------------------------------------------------
def first_step_times(model: dict, form: str, steps: int) -> tuple[list[float], list[float], list[float]]:
    """Seconds of the batched engine's coupled first step (inside FedTAN rounds), of
    :func:`bnfl.fedtan.coupled_step` on the same clients' batches, and of a centralized forward
    and backward on their union, measured alternately ``steps`` times each."""
    cfg = {**CONFIG, "method": "fedtan", "model": model, "data": {"name": "digits", "form": form},
           "rounds": steps + 2, "train": {**CONFIG["train"], "eval_every": steps + 2, "batched": "on"}}
    sim = fl.build(cfg)
    timed: list[float] = []
    inner = fl_batched.BatchedClients._coupled_step

    def coupled(self, *args, **kwargs):  # the engine's own step, timed where it runs
        t0 = time.perf_counter()
        out = inner(self, *args, **kwargs)
        timed.append(time.perf_counter() - t0)
        return out

    clients = list(range(sim.num_clients))
    batches = [sim.next_batch(c) for c in clients]
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])  # the union batch
    plain = copy.deepcopy(sim.model).train()
    weights = sim.weights(clients)

    def central() -> float:
        t0 = time.perf_counter()
        plain.zero_grad(set_to_none=True)
        F.cross_entropy(plain(x), y).backward()
        return time.perf_counter() - t0

    def sequential() -> float:
        t0 = time.perf_counter()
        fedtan.coupled_step(plain, batches, F.cross_entropy, weights=weights, aggregate="fedtan")
        return time.perf_counter() - t0

    fl_batched.BatchedClients._coupled_step = coupled
    try:
        sim.run(stop_after=1)  # warm-up
        central(), sequential()
        timed.clear()
        tc, ts = [], []
        for r in range(2, steps + 2):
            sim.run(stop_after=r)
            tc.append(central())
            ts.append(sequential())
    finally:
        fl_batched.BatchedClients._coupled_step = inner
    return timed, ts, tc


# (d) ------------------------------------------------------------------------------------------
def _process_seconds(args: list[str]) -> float:
    """Wall time of ``python ARGS`` in a fresh process, run from an empty folder (so the bnfl it
    imports is the one on ``PYTHONPATH``, this repository's unless set)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, *args], env=env, cwd=tmp, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"python {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return seconds


def train_process_seconds(rounds: int) -> float:
    """Wall time of ``bnfl train`` of the digits FedAvg+BN run as a whole process:
    ``examples/fedtan_digits.toml`` with FedAvg+BN and, as the numpy baseline does, one evaluation
    after the last round (``[train] eval_every = rounds``; the example evaluates every round); its
    history files and its checkpoint every round as ``bnfl train`` writes them."""
    example = (ROOT / "examples" / "fedtan_digits.toml").read_text()
    if "\n[train]\n" not in example:
        raise RuntimeError("examples/fedtan_digits.toml has no [train] table")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "digits.toml"
        config.write_text(example.replace("\n[train]\n", f"\n[train]\neval_every = {rounds}\n"))
        return _process_seconds(["-m", "bnfl", "train", "--config", str(config), "--method", "fedavg+bn",
                                 "--rounds", str(rounds), "--out", str(Path(tmp) / "run")])


def startup_seconds() -> float:
    """bnfl's start-up: a process that imports the CLI and ``bnfl.fl``."""
    return _process_seconds(["-c", "import bnfl.cli, bnfl.fl, bnfl.train.config"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=40, help="rounds (steps) timed per setting of (a)-(c)")
    ap.add_argument("--resnet-rounds", type=int, default=2, help="rounds timed per ResNet-20 setting")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of (d), median")
    ap.add_argument("--rounds", type=int, default=300, help="rounds of (d)")
    ap.add_argument("--skip-resnet", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {cpu_name()}, {os.cpu_count()} cores; "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)
    mlp, flat = MODELS["digits MLP"]

    # (a)
    hundred, five = paired_rounds(("fedavg+bn", mlp, flat, {"clients": 100}), ("fedavg+bn", mlp, flat, {"clients": 5}),
                                  args.samples)
    print(f"  (a) 100 clients {ms(hundred)} ms, 5 clients {ms(five)} ms", flush=True)

    # (b)
    ratios_b = {}
    for label, (model, form) in MODELS.items():
        if label == "ResNet-20" and args.skip_resnet:
            continue
        n = args.resnet_rounds if label == "ResNet-20" else args.samples
        ratios_b[label] = paired_rounds(("fedtan", model, form, {}), ("fedavg+bn", model, form, {}), n)
        print(f"  (b) {label}: FedTAN {ms(ratios_b[label][0])} ms, FedAvg+BN {ms(ratios_b[label][1])} ms", flush=True)

    # (c)
    ratios_c = {}
    for label in ("digits MLP", "Q-SCNN"):
        model, form = MODELS[label]
        ratios_c[label] = first_step_times(model, form, args.samples)
        tb, ts, tc = ratios_c[label]
        print(f"  (c) {label}: batched step 1 {ms(tb)} ms, fedtan.coupled_step {ms(ts)} ms, centralized {ms(tc)} ms",
              flush=True)

    # (d)
    train_process_seconds(2), startup_seconds(), numpy_seconds(5), digits_run_seconds(5, "on")  # warm caches
    rows: dict[str, list[float]] = {"process": [], "startup": [], "numpy": [], "run": []}
    for rep in range(args.repeats):
        rows["process"].append(train_process_seconds(args.rounds))
        rows["startup"].append(startup_seconds())
        rows["numpy"].append(numpy_seconds(args.rounds)[0])
        rows["run"].append(digits_run_seconds(args.rounds, "on")[0])
        print(f"  (d) repeat {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in rows.items()), flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    proc = [p - s for p, s in zip(rows["process"], rows["startup"], strict=True)]

    print("\n=== issue 27 targets (one run; ratio of medians, of minima in brackets) ===")
    print(f"(a) 100 / 5 clients per round, digits MLP, batched: {ratio(hundred, five)}   (target <= 5; "
          f"{ms(hundred)} / {ms(five)} ms)")
    print("(b) FedTAN round / FedAvg+BN round, batched, 5 clients (target <= 1.15):")
    for label, (tan, avg) in ratios_b.items():
        print(f"    {label:11s} {ratio(tan, avg)}   ({ms(tan)} / {ms(avg)} ms)")
    print("(c) FedTAN first step / centralized fwd+bwd on the union batch (target <= 1.5):")
    for label, (tb, ts, tc) in ratios_c.items():
        print(f"    {label:11s} batched engine {ratio(tb, tc)}, fedtan.coupled_step {ratio(ts, tc)}   "
              f"({ms(tb)}, {ms(ts)} / {ms(tc)} ms)")
    print(f"(d) digits FedAvg+BN, {args.rounds} rounds, {args.repeats} repeats (target <= 1.0):")
    print(f"    bnfl train process - start-up / numpy: {ratio(proc, rows['numpy'])}   ({med['process']:.2f} - "
          f"{med['startup']:.2f} s / {med['numpy']:.2f} s)")
    print(f"    Simulation.run (batched, in process) / numpy: {ratio(rows['run'], rows['numpy'])}   "
          f"({med['run']:.2f} s / {med['numpy']:.2f} s)")


if __name__ == "__main__":
    main()
