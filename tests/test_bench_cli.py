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
from bnfl.experiments.benchmarks import bench_extended as ext
from bnfl.experiments.benchmarks.bn_fixes_settings import SETTINGS
from bnfl.experiments.compare import compare_folders, load_folder
from bnfl.experiments.core import deep_merge

#: The default suite's settings and built-in methods (the extended benchmark).
EXT_SETTINGS = list(ext.CANDIDATES)

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
    assert bench.protocol("smoke")["suite"] == "extended"  # the default suite
    folder = out / "bench"
    for name in ("leaderboard.md", "leaderboard.json", "leaderboard-figure.png", "leaderboard-figure.svg", "result.json"):
        assert (folder / name).is_file(), name
    board = json.loads((folder / "leaderboard.json").read_text())["leaderboard"]
    assert list(board) == EXT_SETTINGS
    for rows in board.values():
        ids = {r["id"] for r in rows}
        assert ids == {*ext.METHODS, "pooled_bn_stats:PooledStats"}
        for r in rows:
            assert len(r["per seed"]) == 2 and r["comm_per_round"] > 0 and r["seconds"] >= 0
            assert r["rank"] >= 1 and "diff" in r
    md = (folder / "leaderboard.md").read_text()
    assert md.count("| PooledStats |") == len(EXT_SETTINGS) and "BN damage repaired" in md and "(baseline)" in md
    # bnfl compare reads the folder: one entry with a claim per method and setting
    results = load_folder(out)
    assert list(results) == ["bench"]
    names = {c.name for c in results["bench"].claims}
    assert "label-skew-pooled-bn-stats-pooledstats" in names and len(names) == len(ext.METHODS) * len(EXT_SETTINGS)
    assert compare_folders(out, out, stream=open(os.devnull, "w")) == 0

    second = _bnfl(args, ROOT)
    assert second.returncode == 0, second.stderr
    assert "reusing the built-in methods' stored runs" in second.stdout and str(stored[0]) in second.stdout
    assert "training them too" not in second.stdout
    again = json.loads((folder / "leaderboard.json").read_text())["leaderboard"]
    for s in EXT_SETTINGS:  # the reused baselines are the first run's, number for number
        assert {r["id"]: r["per seed"] for r in again[s]} == {r["id"]: r["per seed"] for r in board[s]}


def test_the_committed_quick_baselines_are_the_committed_result_under_the_quick_protocol():
    key = bench.protocol_hash(bench.protocol("quick", "bn-fixes"))
    assert key == "8ed21d146d24a4d4"  # the bn-fixes suite's protocol is the one its baselines were stored under
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
    assert bench.protocol_hash(bench.protocol("smoke", "bn-fixes")) != key


def test_the_quick_bench_reuses_the_stored_baselines_and_prices_only_the_new_method(capsys):
    assert cli_main(["bench", EXAMPLE, "--dry-run", "--out", "unused"]) == 0
    out = capsys.readouterr().out
    assert "reusing the built-in methods' stored runs" in out and "made on" in out
    assert "plan: 5 method-settings, 85 training runs" in out  # 4 rates x 3 tuning seeds + 5 seeds, per setting


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

    def blow_up(*a, **k):  # a statistics check refusing what a diverged run produced is no inapplicability
        import torch

        from bnfl._checks import check_finite

        check_finite(torch.tensor([1.0, float("inf")]), "client 5 var")

    monkeypatch.setattr(bench, "tuned_runs", blow_up)
    rec = bench.method_record(core.Context(profile="smoke", seeds=[0]), bench.protocol("smoke"), "label skew", "fbn")
    assert rec["why"] == ("diverged: non-finite values in its training (client 5 var contains Inf values; remove or "
                          "impute them before computing statistics)")


def test_the_extended_settings_were_chosen_by_the_rule_from_their_calibration_and_every_run_builds():
    from bnfl.intervals import estimate
    from bnfl.train.builder import build_parts

    # each stored damage is the paired interval of its stored per-seed scores, and the rule applied to
    # those intervals gives the stored choice
    damages = {}
    for s, cal in ext.CALIBRATION.items():
        damages[s] = {}
        for c, v in cal["candidates"].items():
            iv = estimate(v["iid per seed"], v["skewed per seed"], paired=True, method="t")
            got = [iv.low, iv.estimate, iv.high]  # from the per-seed scores as stored (2 decimals): +-0.01
            assert all(abs(a - b) <= 0.011 for a, b in zip(got, v["damage"], strict=True)), (s, c, got)
            damages[s][c] = iv
    assert ext.calibrate(damages) == ext.CHOSEN and set(ext.CHOSEN) == set(ext.CANDIDATES)
    assert len(ext.CANDIDATES) == 5 and len(ext.METHODS) >= 12
    proto = bench.protocol("quick")
    assert {s: v["scale"] for s, v in proto["settings"].items()} == ext.CHOSEN
    for setting in ext.CANDIDATES:
        for m in ext.METHODS:
            spec = bench.method_spec(proto, setting, m)
            built = build_parts(spec)
            assert any(isinstance(mod, __import__("torch").nn.Conv2d) for mod in built.model.modules())
        for control in (False, True):
            assert build_parts(deep_merge(proto["settings"][setting]["control" if control else "skewed"],
                                          {"method": "fedavg+bn"})).method.id == "fedavg+bn"


def test_jobs_train_the_same_records_as_one_process():
    from bnfl.experiments import core

    proto = bench.protocol("smoke")
    units = [("reference", "label skew"), ("fedavg+bn", "label skew"), ("hbn", "unseen client")]
    one = bench.run_units(core.Context(profile="smoke", seeds=list(proto["seeds"]), batched="auto"), proto, units)
    two = bench.run_units(core.Context(profile="smoke", seeds=list(proto["seeds"]), batched="auto"), proto, units,
                          jobs=2)

    def strip(records):
        return {m: {s: {k: v for k, v in r.items() if k != "seconds"} for s, r in by.items()} for m, by in records.items()}

    assert strip(one[0]) == strip(two[0]) and one[1] == two[1]
    assert set(one[0]["hbn"]["unseen client"]) >= {"scores", "lr", "n_test"} and one[0]["hbn"]["unseen client"]["n_test"] > 0


def test_the_paper_profile_dry_run_reads_the_data_root_and_prices_the_runs(tmp_path, capsys):
    from tests.paper_fakes import write_paper_root

    assert cli_main(["bench", "--profile", "paper", "--dry-run", "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr().out
    assert "MISSING  cifar10: no --data-root given" in out and "MISSING  digit5" in out
    # without --dry-run: the same missing data, in one line, before anything trains
    assert cli_main(["bench", "--profile", "paper", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bnfl bench: error: --profile paper needs the papers' data sets: cifar10: no --data-root")
    assert "\n" not in err and not (tmp_path / "o" / "bench").exists()
    root = write_paper_root(tmp_path / "data")
    proto = bench.protocol("paper")
    assert {s["skewed"]["data"]["name"] for s in proto["settings"].values()} == {"cifar10", "digit5"}
    assert proto["settings"]["unseen client"]["unseen"] == ["digit5:MNIST-M"]
    units = bench.work_units(["fedavg+bn"], with_reference=True, settings=bench.settings_of(proto))
    plan = bench.dry_plan(proto, units, profile="paper", data_root=str(root), time_steps=0)
    assert plan.ok, plan.lines()
    names = {r["data"]["name"] for r in plan.runs}
    assert names == {"cifar10", "digit5"} and {r["model"]["name"] for r in plan.runs} == {"resnet20", "digit_cnn"}
    # per setting: the damage pair (2 x 5 seeds), and FedAvg+BN's widest grid (6 rates x 3 tuning seeds) + 5 seeds
    assert len(plan.runs) == 5 * (10 + 6 * 3 + 5)
    text = "\n".join(plan.lines())
    assert "data     cifar10: 60 train" in text and "digit5" in text


def test_data_root_is_named_as_unread_outside_the_paper_profile(capsys):
    assert cli_main(["bench", EXAMPLE, "--dry-run", "--profile", "smoke", "--data-root", "/nowhere", "--out",
                     "unused"]) == 0
    assert "the smoke profile's data sets are embedded in bnfl; the folder is not read" in capsys.readouterr().out


def test_the_bn_fixes_suite_is_still_the_stored_protocol(capsys):
    assert cli_main(["bench", EXAMPLE, "--suite", "bn-fixes", "--dry-run", "--out", "unused"]) == 0
    out = capsys.readouterr().out
    assert "reusing the built-in methods' stored runs (protocol 8ed21d146d24a4d4" in out
    assert "plan: 3 method-settings, 78 training runs" in out


def test_each_setting_states_fedavg_bn_damage_and_says_when_there_is_none_to_repair():
    hurt = bench_board.damage_line({"control": [91.0, 92.0, 90.5], "damaged": [80.0, 82.0, 79.0]})
    assert hurt.startswith("FedAvg+BN's damage (iid control - skewed, shared recipe's rate): +10.83 [")
    assert "not measurably hurt" not in hurt
    none = bench_board.damage_line({"control": [91.0, 92.0, 90.5], "damaged": [91.5, 91.0, 90.0]})
    assert "its interval reaches 0: BN is not measurably hurt here" in none
    assert "no interval" in bench_board.damage_line({"control": [91.0], "damaged": [90.0]})
    md = bench_board.markdown({"label skew": []}, title="t", scales={"label skew": "k=2"},
                              reference={"label skew": {"control": [91.0, 92.0, 90.5], "damaged": [80.0, 82.0, 79.0]}})
    assert hurt + "." in md


def test_the_paper_unseen_client_is_scored_on_the_held_out_digit5_domain(tmp_path):
    """The paper profile's unseen client: trained on four Digit-5 domains, scored on MNIST-M's test
    set (FedBN App. G's new-client model for FedBN) from the data root, as the observer loads it."""
    from bnfl.experiments import core
    from bnfl.experiments.training import load_data
    from tests.paper_fakes import write_paper_root

    root = str(write_paper_root(tmp_path / "data"))
    proto = bench.protocol("paper")
    s = proto["settings"]["unseen client"]
    spec = deep_merge(bench.method_spec(proto, "unseen client", "fedbn"),
                      {"rounds": 1, "train": {"local_steps": 1, "batch_size": 4, "eval_every": 1}})
    ctx = core.Context(profile="paper", seeds=[0], data_root=root)
    (run,) = ext.train(ctx, "unseen client", spec, s["unseen"])
    held_out = load_data({"name": "digit5", "fraction": 0.1, "domains": ["MNIST-M"]}, data_root=root)
    assert set(run["unseen_acc"]) == {"digit5:MNIST-M"} and 0 < run["n_test_unseen"] < len(held_out.y_test)
    assert ext.score("unseen client", run) == run["unseen_acc"]["digit5:MNIST-M"]


def test_the_pages_typed_numbers_are_the_stored_calibration_and_leaderboard():
    """docs/bench.md's calibration table and its sentence on PooledStats restate stored numbers:
    each must be what ``CALIBRATION`` and the committed leaderboard hold, and "sits on that line in
    all five settings" must be what the intervals say."""
    page = (ROOT / "docs" / "bench.md").read_text()

    def fmt(v):
        return f"{v[1]:+.2f} [{v[0]:+.2f}, {v[2]:+.2f}]"

    for cal in ext.CALIBRATION.values():
        for v in cal["candidates"].values():
            assert fmt(v["damage"]) in page, fmt(v["damage"])
    board = json.loads((ROOT / "docs" / "_data" / "bench" / "leaderboard.json").read_text())["leaderboard"]
    diffs = [next(r for r in board[s] if r["method"] == "PooledStats")["diff"] for s in EXT_SETTINGS]
    assert all(d["low"] <= 0 <= d["high"] for d in diffs)  # on the line at 0 in every setting
    text = " ".join(page.split())
    for d in diffs:
        assert (want := f"{d['estimate']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]") in text, want
