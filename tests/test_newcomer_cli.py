"""What a newcomer meets on the command line: ``bnfl list`` says what each entry cost, an unknown
method id suggests the near one, ``--quiet`` prints only the result line, and a progress bar
written to a log (not a terminal) does not flood it.

Before (bnfl at e5220bf): ``bnfl list`` had no time column; ``--method fedtn`` listed 33 ids with
no suggestion; ``--quiet`` still printed the "batched: ..." line; 40 rounds to a log wrote one
carriage-return update per round or more.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from bnfl import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fedtan_digits.toml"


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def test_list_shows_what_each_stored_entry_took() -> None:
    code, out, _ = _main(["list", "--paper", "fedbn", "--out", str(ROOT / "figures")])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[-1] == "took"
    d = json.loads((ROOT / "figures" / "fedbn-fig4" / "result.json").read_text())["duration_s"]
    row = next(line for line in lines if line.startswith("fedbn-fig4 "))
    assert row.endswith(f"{round(d / 60)} min") and max(map(len, lines)) <= 100


def test_an_unknown_method_suggests_the_near_id(tmp_path: Path) -> None:
    code, _, err = _main(["train", "--config", str(EXAMPLE), "--method", "fedtn", "--out", str(tmp_path / "o")])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("did you mean 'fedtan' or 'fedtan2' or 'fedbn'?")
    assert not (tmp_path / "o").exists()


def test_quiet_prints_only_the_result_line(tmp_path: Path) -> None:
    code, out, err = _main(["train", "--config", str(EXAMPLE), "--rounds", "1", "--out", str(tmp_path), "--quiet"])
    assert code == 0 and err == ""
    assert out.splitlines() == [out.splitlines()[0]] and out.startswith("fedtan: 1 rounds, test accuracy ")
    meta = json.loads((tmp_path / "history.json").read_text())["meta"]
    assert meta["batched"]["line"].startswith("batched: ")  # kept in the run's meta


def test_a_progress_bar_into_a_log_writes_a_few_updates_not_one_per_round(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TQDM_MININTERVAL", None)
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "bnfl", "train", "--config", str(EXAMPLE), "--rounds", "40",
                        "--out", str(tmp_path / "run")], stdout=subprocess.DEVNULL, stderr=f, env=env, check=True,
                       timeout=300)
    with open(log, newline="") as f:  # keep the carriage returns a bar redraws with
        updates = f.read().count("\r")
    assert updates <= 6, updates
