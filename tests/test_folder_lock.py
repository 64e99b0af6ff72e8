"""A run folder has one writer (issue 40, item 3): ``bnfl train``, ``bnfl run`` and ``bnfl reproduce``
hold an advisory lock on their ``--out``; a second writer gets one line naming the holder's pid;
the lock goes when the holder exits, a ``kill -9`` included.

On bnfl at de45014 nothing was locked: the second writer ran (two ``bnfl train`` on one folder both
exited 0 and mixed their checkpoints; two ``bnfl run`` replaced each other's results).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from bnfl import _folder_lock, cli
from bnfl.fl import _rundir

TOML = 'rounds = {rounds}\nmethod = "{method}"\n[partition]\nkind = "iid"\nnum_clients = 2\n' \
       '[train]\nbatch_size = 8\nprogress = false\nbatched = "off"\n'


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue().strip()


def _holder(d: str, ready, done) -> None:  # noqa: ANN001 - multiprocessing events
    _folder_lock.hold(d)
    ready.set()
    done.wait(60)
    os._exit(0)


@contextlib.contextmanager
def _held_elsewhere(d: Path):
    """The lock of ``d`` held by another (forked) process; yields its pid; the process is killed
    with SIGKILL at the end (the lock must go with it)."""
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_holder, args=(str(d), ready, done))
    p.start()
    try:
        assert ready.wait(30)
        yield p.pid
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)


def test_a_second_writer_gets_one_line_naming_the_holder_and_the_lock_goes_with_a_kill(tmp_path):
    out = tmp_path / "run"
    (tmp_path / "c.toml").write_text(TOML.format(rounds=1, method="fedavg+bn"))
    train = ["train", "--config", str(tmp_path / "c.toml"), "--out", str(out)]
    with _held_elsewhere(out) as pid:
        code, err = _main(train)
        assert code == 2
        assert err == (f"bnfl train: error: {out} is in use by another bnfl run (pid {pid}); wait for it to finish, "
                       f"or give another --out")
        assert {p.name for p in out.iterdir()} == {_folder_lock.LOCK_FILE}  # nothing of the refused run
    assert _main(train)[0] == 0  # the holder was killed: the OS released its lock
    assert not (out / _folder_lock.LOCK_FILE).exists()  # a holder that finishes removes the file
    with _held_elsewhere(out) as pid:
        code, err = _main([*train, "--resume", "--rounds", "2"])
        assert code == 2 and f"(pid {pid})" in err
    assert _main([*train, "--resume", "--rounds", "2"])[0] == 0


def test_bnfl_run_and_reproduce_on_a_held_out_are_refused(tmp_path):
    out = tmp_path / "out"
    with _held_elsewhere(out) as pid:
        for argv in (["run", "fedtan-tab4", "--profile", "smoke", "--out", str(out)],
                     ["reproduce", "--paper", "fedtan", "--only", "fedtan-tab4", "--profile", "smoke", "--out", str(out)]):
            code, err = _main(argv)
            assert code == 2
            assert err == (f"bnfl {argv[0]}: error: {out} is in use by another bnfl run or reproduce (pid {pid}); "
                           f"wait for it to finish, or give another --out")
        assert {p.name for p in out.iterdir()} == {_folder_lock.LOCK_FILE}


def test_the_lock_is_reentrant_in_its_process_and_a_python_run_takes_it(tmp_path):
    from bnfl import fl

    cfg = fl.RunConfig.from_dict({"rounds": 1, "out": str(tmp_path / "r"), "partition": {"kind": "iid", "num_clients": 2},
                                  "train": {"progress": False}})
    with _folder_lock.locked(tmp_path / "r"):
        fl.run(cfg)  # the same process: no refusal
    with _held_elsewhere(tmp_path / "r"):
        try:
            fl.run(cfg, resume=True)
        except _folder_lock.FolderBusyError as err:
            assert "is in use by another bnfl run" in str(err)
        else:
            raise AssertionError("a Python run into a held folder was not refused")


def test_two_concurrent_bnfl_train_leave_one_run_and_one_clear_refusal(tmp_path):
    """The issue's case: one FedTAN and one FedAvg+BN into one --out, started together."""
    out = tmp_path / "run"
    procs = []
    for method in ("fedtan", "fedavg+bn"):
        cfg = tmp_path / f"{method}.toml"
        cfg.write_text(TOML.format(rounds=30, method=method))
        procs.append(subprocess.Popen([sys.executable, "-m", "bnfl", "train", "--config", str(cfg), "--out", str(out),
                                       "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        results = [(p.wait(120), p.stderr.read().strip()) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    codes = sorted(code for code, _ in results)
    refused = [err for code, err in results if code != 0]
    # the second either met the lock, or (started after the first finished) found its run in the folder
    assert codes == [0, 2] and len(refused) == 1 and len(refused[0].splitlines()) == 1, results
    assert ("is in use by another bnfl run (pid " in refused[0] or "already holds a run" in refused[0]), refused
    state = torch.load(out / _rundir.CHECKPOINT, weights_only=True)
    prev = torch.load(out / _rundir.PREVIOUS, weights_only=True)
    assert state["identity"]["method"] == prev["identity"]["method"]  # one run's files, not a mix
    assert state["round"] == 30 and not any(p.name.endswith(".tmp") for p in out.iterdir())


def test_the_lock_file_names_the_holder_while_held(tmp_path):
    with _folder_lock.locked(tmp_path / "x"):
        assert (tmp_path / "x" / _folder_lock.LOCK_FILE).read_text().strip() == str(os.getpid())
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", "import sys; from bnfl import _folder_lock as L; "
                            f"L.hold({str(tmp_path / 'x')!r})"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and f"(pid {os.getpid()})" in r.stderr and time.perf_counter() - t0 < 30
    assert not (tmp_path / "x" / _folder_lock.LOCK_FILE).exists()
    assert Path(tmp_path / "x").is_dir()
