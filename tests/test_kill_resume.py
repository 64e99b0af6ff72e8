"""A run killed at any moment resumes by itself (issue 40, item 4).

Runs are forked (the parent has imported torch and built the data once) and SIGKILLed at seeded
random moments; each kill is followed by ``run(resume=True)`` in a new process, with no hand work,
until the run finishes, and every finished run equals the uninterrupted one row for row and weight
for weight. At no moment does a folder hold ``checkpoint.prev.pt`` without ``checkpoint.pt``, and
the temporary files of killed writers are gone after the next start.

Before this change (bnfl at de45014) the test fails: a kill between the two renames of the
rotation left only ``checkpoint.prev.pt`` (resume refused until a person renamed it), and a kill
between ``history.json``'s append and the checkpoint of round 1 left a folder that resume refused.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bnfl import fl
from bnfl.fl import _rundir

ROUNDS = 5
KILLS = 60


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 6, generator=g)
    y = torch.arange(48) % 3
    return fl.FederatedData(x, y, x[:12], y[:12], [np.arange(i * 16, (i + 1) * 16) for i in range(3)])


def _sim(d: Path) -> fl.Simulation:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    cfg = fl.TrainConfig(rounds=ROUNDS, batch_size=4, local_steps=2, progress=False, batched="off",
                         checkpoint_dir=str(d))
    return fl.Simulation(model, _data(), fl.FedAvg(), cfg)


def _child(d: str) -> None:
    import warnings

    warnings.showwarning = lambda *a, **k: None  # "--resume: no checkpoint" when killed before the first one
    # a child that hangs leaves its stack after 30 s and exits (code 1), which the test reports with that stack
    faulthandler.dump_traceback_later(30, exit=True, file=open(f"{d}.stack", "w"))  # noqa: SIM115 - kept until exit
    try:
        _sim(Path(d)).run(resume=True)
    except BaseException as err:  # noqa: BLE001 - report, do not print a traceback into the test's output
        Path(d, "FAILED").write_text(f"{type(err).__name__}: {err}")
        os._exit(3)
    os._exit(0)


def _state(d: Path) -> tuple[list, dict]:
    sim = _sim(d)
    assert sim.load_checkpoint(d)
    return sim.history.without_time(), sim.global_state


def test_a_run_killed_at_random_moments_resumes_by_itself(tmp_path):
    torch.set_num_threads(1)
    ref = tmp_path / "reference"
    ref_rows = _sim(ref).run().without_time()
    ref_state = _sim(ref)
    ref_state.load_checkpoint(ref)
    ctx = mp.get_context("fork")
    times = []  # how long a forked run takes, start to exit: the window the kills fall in
    for i in range(3):
        t0 = time.perf_counter()
        p = ctx.Process(target=_child, args=(str(tmp_path / f"timing{i}"),))
        p.start()
        p.join(60)
        times.append(time.perf_counter() - t0)
        assert p.exitcode == 0
    duration = min(times)
    rnd = random.Random(40)
    kills, folders, finished = 0, 0, []
    d = tmp_path / "run0"
    start = time.perf_counter()
    while kills < KILLS or not finished or d != finished[-1]:
        p = ctx.Process(target=_child, args=(str(d),))
        p.start()
        if kills < KILLS:
            time.sleep(rnd.uniform(0, duration))
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                kills += 1
        p.join(40)
        if p.exitcode is None:  # a hang, not a slow run (one takes well under a second): fail and say so
            p.kill()
            p.join()
            raise AssertionError(f"a resumed run in {d.name} hung for 40 s after {kills} kills")
        why = [f.read_text() for f in (d / "FAILED", Path(f"{d}.stack")) if f.is_file()]
        assert p.exitcode in (0, -signal.SIGKILL), (p.exitcode, why)
        names = {f.name for f in d.iterdir()} if d.is_dir() else set()
        assert not (_rundir.PREVIOUS in names and _rundir.CHECKPOINT not in names), f"only {_rundir.PREVIOUS} left"
        if p.exitcode == 0:
            assert not [n for n in names if n.endswith(".tmp")], names  # the killed writers' temp files are gone
            rows, state = _state(d)
            assert rows == ref_rows
            assert state.keys() == ref_state.global_state.keys()
            assert all(torch.equal(state[k], ref_state.global_state[k]) for k in state)
            finished.append(d)
            if kills >= KILLS:
                break
            folders += 1
            d = tmp_path / f"run{folders}"
        assert time.perf_counter() - start < 90, f"{kills} kills, {len(finished)} runs finished"
    assert kills >= 50 and len(finished) >= 2
    print(f"{kills} kills over {len(finished)} runs resumed to the reference in {time.perf_counter() - start:.1f} s "
          f"(one run: {duration * 1e3:.0f} ms)")


_SIBLING = """
import multiprocessing as mp, os, signal, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from tqdm.auto import tqdm
import test_kill_resume as t

lock = tqdm.get_lock()  # what any tqdm takes, a disabled one too; its multiprocessing half is shared with forks
ctx = mp.get_context("fork")
held = ctx.Event()

def hold():
    lock.acquire()
    held.set()
    time.sleep(60)

a = ctx.Process(target=hold)
a.start()
assert held.wait(30)
os.kill(a.pid, signal.SIGKILL)  # killed while it holds the lock: nothing ever releases it
a.join()
b = ctx.Process(target=t._child, args=({run!r},))
b.start()
b.join(30)
if b.exitcode is None:
    b.kill()
print("exit", b.exitcode)
"""


def test_a_forked_run_finishes_after_a_sibling_was_killed_holding_tqdms_lock(tmp_path):
    """The kills above once stalled a run for good (one CI run in about three): a run killed inside
    tqdm's lock (taken by every tqdm, a disabled bar too) left that lock, shared with every process
    forked from the same parent, held forever. A run with ``progress=False`` builds no bar and takes
    no lock. Before the change (bnfl at adbd03e) the second run hangs and this prints ``exit None``.
    Run in a fresh interpreter: the broken lock must not reach the other tests' progress bars."""
    import subprocess
    import sys

    script = _SIBLING.format(tests=str(Path(__file__).parent), run=str(tmp_path / "run"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "exit 0", out.stdout + out.stderr[-2000:]
