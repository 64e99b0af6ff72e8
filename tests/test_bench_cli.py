"""``bnfl bench``: docs/bench.md's command on the worked example at the smoke profile, the reuse of
stored baseline runs by protocol hash, the leaderboard's columns, and one line for bad input."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bnfl.cli import main as cli_main
from bnfl.experiments.benchmarks import bench, bench_board
from bnfl.experiments.benchmarks.bn_fixes_settings import SETTINGS
from bnfl.experiments.compare import compare_folders, load_folder

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/pooled_bn_stats.py"
#: docs/bench.md's smoke command, as written there (the --out folder replaced by the test's).
PAGE_COMMAND = f"bnfl bench {EXAMPLE} --profile smoke --out bench-out"


def _bnfl(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "bnfl", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_page_shows_the_command_the_test_runs():
    page = (ROOT / "docs" / "bench.md").read_text()
    assert PAGE_COMMAND in page
    assert "bench.md" in (ROOT / "docs" / "index.md").read_text()


def test_the_page_command_runs_the_example_at_smoke_then_reuses_its_baselines(tmp_path):
    out = tmp_path / "bench-out"
    args = [*PAGE_COMMAND.split()[1:-1], str(out)]
    first = _bnfl(args, ROOT)
    assert first.returncode == 0, first.stderr
    assert "no stored runs of the built-in methods match this protocol" in first.stdout  # smoke: none committed
    assert "training them too" in first.stdout
    stored = list((out / "baselines").glob("*.json"))
    assert [p.stem for p in stored] == [bench.protocol_hash(bench.protocol("smoke"))]
    folder = out / "bench"
    for name in ("leaderboard.md", "leaderboard.json", "leaderboard-figure.png", "leaderboard-figure.svg", "result.json"):
        assert (folder / name).is_file(), name
    board = json.loads((folder / "leaderboard.json").read_text())["leaderboard"]
    assert list(board) == list(SETTINGS)
    for rows in board.values():
        ids = {r["id"] for r in rows}
        assert ids == {*bench.BUILT_IN, "pooled_bn_stats:PooledStats"}
        for r in rows:
            assert len(r["per seed"]) == 2 and r["comm_per_round"] > 0 and r["seconds"] >= 0
            assert r["rank"] >= 1 and "diff" in r
    md = (folder / "leaderboard.md").read_text()
    assert md.count("| PooledStats |") == 3 and "BN damage repaired" in md and "(baseline)" in md
    # bnfl compare reads the folder: one entry with a claim per method and setting
    results = load_folder(out)
    assert list(results) == ["bench"]
    names = {c.name for c in results["bench"].claims}
    assert "label-skew-pooled-bn-stats-pooledstats" in names and len(names) == 6 * len(SETTINGS)
    assert compare_folders(out, out, stream=open(os.devnull, "w")) == 0

    second = _bnfl(args, ROOT)
    assert second.returncode == 0, second.stderr
    assert "reusing the built-in methods' stored runs" in second.stdout and str(stored[0]) in second.stdout
    assert "training them too" not in second.stdout
    again = json.loads((folder / "leaderboard.json").read_text())["leaderboard"]
    for s in SETTINGS:  # the reused baselines are the first run's, number for number
        assert {r["id"]: r["per seed"] for r in again[s]} == {r["id"]: r["per seed"] for r in board[s]}


def test_the_committed_quick_baselines_are_the_committed_result_under_the_quick_protocol():
    key = bench.protocol_hash(bench.protocol("quick"))
    data, _ = bench.find_baselines(key)
    assert data is not None and Path(data["path"]).parent == bench.STORE
    assert data["machine"]["cpu"] and data["profile"] == "quick"
    res = json.loads((ROOT / "figures" / "bench-bn-fixes" / "result.json").read_text())
    rows = {(r["setting"], r["method"]): r for r in res["rows"]}
    for m in bench.BUILT_IN:
        for s in SETTINGS:
            rec = data["methods"][m][s]
            row = rows[(s, bench_board._label(m))]
            assert rec["scores"] == row["per seed"] and rec["lr"] == row["lr"] and rec["comm_per_round"] > 0
    assert data["reference"]["label skew"]["damaged"] == rows[("label skew", "FedAvg+BN, shared recipe's rate "
                                                                             "(damage)")]["per seed"]
    # the protocol names settings, seeds and grid, not the methods: smoke and quick differ
    assert bench.protocol_hash(bench.protocol("smoke")) != key


def test_the_quick_bench_reuses_the_stored_baselines_and_prices_only_the_new_method(capsys):
    assert cli_main(["bench", EXAMPLE, "--dry-run", "--out", "unused"]) == 0
    out = capsys.readouterr().out
    assert "reusing the built-in methods' stored runs" in out and "made on" in out
    assert "plan: 3 method-settings, 78 training runs" in out  # 7 rates x 3 tuning seeds + 5 seeds, per setting


@pytest.mark.parametrize("args, expected", [
    (["no-such-fix"], "no-such-fix"),
    (["nosuchpkg.algos:MyFix"], "cannot import module 'nosuchpkg.algos'"),
    (["examples/no_such_file.py"], "no such file examples/no_such_file.py"),
    (["examples/fedbn_domains.toml:X"], "no such file"),
    (["--baselines", str(bench.STORE / "8ed21d146d24a4d4.json"), "--profile", "smoke"],
     "is not this bench's"),
])
def test_bad_input_gets_one_line(capsys, args, expected):
    assert cli_main(["bench", *args, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bnfl bench: error: ") and "\n" not in err and expected in err


def test_a_file_is_named_with_or_without_py_and_with_a_class():
    from bnfl.experiments.benchmarks.bench_cli import resolve_method

    want = "pooled_bn_stats:PooledStats"
    assert {resolve_method(a) for a in ("examples/pooled_bn_stats.py", "examples/pooled_bn_stats",
                                        "examples/pooled_bn_stats.py:PooledStats")} == {want}


def test_a_file_with_no_method_says_so(tmp_path, capsys):
    (tmp_path / "nothing_here.py").write_text("X = 1\n")
    assert cli_main(["bench", str(tmp_path / "nothing_here.py"), "--dry-run"]) == 2
    assert "defines 0 methods" in capsys.readouterr().err


def _rec(scores, **kw):
    return {"scores": scores, "stopped": [], "lr": 0.1, "tuning": "t", "comm_per_round": 1000.0, "seconds": 1.0,
            "n_test": 100, **kw}


def test_the_leaderboard_ranks_ties_repair_share_and_an_inapplicable_cell():
    bn, good, same = [50.0, 52.0, 51.0], [80.0, 81.0, 79.0], [51.5, 52.5, 50.5]
    records = {"fedavg+bn": {s: _rec(bn) for s in SETTINGS}, "fedtan": {s: _rec(good) for s in SETTINGS},
               "hbn": {s: _rec(same) for s in SETTINGS},
               "fedbn": {s: {"why": "does not apply here: no statistics for an unseen client"} for s in SETTINGS}}
    reference = {s: {"damaged": bn, "control": [91.0, 91.0, 91.0]} for s in SETTINGS}
    board = bench_board.leaderboard(records, reference, ["fedavg+bn", "fedtan", "hbn", "fedbn"])
    rows = {r["id"]: r for r in board["label skew"]}
    assert rows["fedtan"]["rank"] == 1 and rows["hbn"]["rank"] == rows["fedavg+bn"]["rank"] == 2  # overlap: a tie
    assert math.isclose(rows["fedtan"]["repaired"], 100 * (80 - 51) / (91 - 51))
    assert rows["fedavg+bn"]["repaired"] == 0.0
    assert math.isclose(rows["fedtan"]["diff"]["estimate"], 29.0) and math.isclose(rows["hbn"]["repaired"], 100 * 0.5 / 40)
    assert [r["id"] for r in board["label skew"]] == ["fedtan", "hbn", "fedavg+bn", "fedbn"]
    cells = bench_board.cells(rows["fedbn"])
    assert cells[2] == "n/a: does not apply here: no statistics for an unseen client"
    md = bench_board.markdown(board, title="t", scales={})
    assert "n/a: does not apply here" in md


def test_a_method_that_refuses_a_setting_says_why_in_its_record(monkeypatch):
    from bnfl.experiments import core

    def refuse(*a, **k):
        raise ValueError("this fix needs conv features")

    monkeypatch.setattr(bench, "tuned_runs", refuse)
    rec = bench.method_record(core.Context(profile="smoke", seeds=[0]), bench.protocol("smoke"), "label skew", "hbn")
    assert rec == {"why": "does not apply here: ValueError: this fix needs conv features"}


def test_the_extended_settings_are_declared_and_every_declared_run_builds():
    from bnfl.experiments.benchmarks import bench_extended as ext
    from bnfl.train.builder import build_parts

    assert ext.STATUS.startswith("declared, not yet run") and ext.CALIBRATION == {} and ext.CHOSEN == {}
    assert len(ext.CANDIDATES) == 5 and len(ext.METHODS) >= 12
    for setting, cands in ext.CANDIDATES.items():
        first = next(iter(cands))
        for m in ext.METHODS:
            if (setting, m) in ext.NOT_APPLICABLE:
                with pytest.raises(ValueError, match="does not apply"):
                    ext.run_spec(setting, first, m)
                continue
            spec = ext.run_spec(setting, first, m)
            spec.pop("unseen", None)
            built = build_parts(spec)
            assert any(isinstance(mod, __import__("torch").nn.Conv2d) for mod in built.model.modules())
        for cand in cands:  # the calibration's runs: FedAvg+BN on every candidate and its iid control
            for control in (False, True):
                spec = ext.run_spec(setting, cand, "fedavg+bn", control=control)
                spec.pop("unseen", None)
                assert build_parts(spec).method.id == "fedavg+bn"
