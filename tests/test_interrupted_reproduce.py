"""Ctrl-C in the middle of ``bnfl reproduce`` (issue 29): a real SIGINT to a subprocess running a
smoke reproduction of two entries, sent while the second one trains. The first entry is complete,
the second left nothing (no result, no figure, no temporary file), the exit is one line and 130;
the same command then finishes the second without recomputing the first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bnfl import cli

IDS = ["fedtan-tab4", "fedtan-fig6"]  # an exact entry, then a training one

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path

    import bnfl.fl.engine as engine
    from bnfl import cli
    from bnfl.experiments import runner

    ready, current = Path(sys.argv[1]), [None]
    real_run, real_round = runner.run, engine.Simulation._train_round

    def run(eid, **kw):
        current[0] = eid
        return real_run(eid, **kw)

    def train_round(self, r):
        if current[0] == sys.argv[2] and not ready.exists():
            out = real_round(self, r)
            ready.write_text("training")  # the parent sends SIGINT now
            time.sleep(60)
            return out
        return real_round(self, r)

    runner.run, engine.Simulation._train_round = run, train_round
    sys.exit(cli.main(sys.argv[3:]))
""")


def _files(d: Path) -> dict[str, int]:
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in sorted(d.rglob("*")) if p.is_file()}


def test_ctrl_c_mid_entry_leaves_no_half_entry_and_resumes(tmp_path):
    out, ready = tmp_path / "figs", tmp_path / "ready"
    argv = ["reproduce", "--paper", "fedtan", "--profile", "smoke", "--out", str(out), "--only", *IDS,
            "--batched", "off"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONPATH": str(Path(__file__).parents[1])}
    # The child starts with Ctrl-C's default disposition whatever an earlier test of this worker left
    # (an ignored SIGINT is inherited across exec, and Python then never raises KeyboardInterrupt).
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(ready), IDS[1], *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        t0 = time.monotonic()
        while not ready.exists() and proc.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # about 1.3 s on an idle machine
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("bnfl reproduce: interrupted;")
    first, second = IDS
    files = _files(out)
    assert {f"{first}/result.json", f"{first}.png", f"{first}.svg", f"{first}.json"} <= set(files)
    assert not [f for f in files if second in f], files  # nothing of the interrupted entry
    assert not [f for f in files if f.endswith(".tmp") or "/." in f or f.startswith(".")], files
    json.loads((out / first / "result.json").read_text())

    assert cli.main(argv) == 0  # the same command again, in this process
    again = _files(out)
    for f in (f"{first}/result.json", f"{first}.png", f"{first}.svg", f"{first}.json"):
        assert again[f] == files[f], f  # the finished entry was not recomputed nor redrawn
    assert json.loads((out / second / "result.json").read_text())["id"] == second
