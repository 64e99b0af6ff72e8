"""Nothing lost (issue 29): a run's folder is never silently overwritten or mixed; checkpoints are
kept until their successor is verified, load without running code, and belong to the run that
resumes them; ``--resume`` with nothing to resume says so; data pickles never run code."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import cli, fl
from bnfl.fl import _rundir
from bnfl.fl._history_file import read_rows

TOML = """
method = "{method}"
rounds = {rounds}
seed = 0
[model]
name = "q_mlp1"
[data]
name = "digits"
form = "flat"
[partition]
kind = "iid"
num_clients = 2
[train]
local_steps = 1
batch_size = 8
progress = false
"""


def _data(k=3, n=8, dim=6, classes=3):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(k * n, dim, generator=g)
    y = torch.arange(k * n) % classes
    return fl.FederatedData(x, y, x[:10], y[:10], [np.arange(i * n, (i + 1) * n) for i in range(k)])


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _sim(d, alg=None, **kw):
    cfg = fl.TrainConfig(**{"rounds": 3, "batch_size": 4, "progress": False, "checkpoint_dir": str(d), **kw})
    return fl.Simulation(_model(), _data(), alg or fl.FedAvg(), cfg)


def _digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def _train(tmp_path, capsys, *argv, method="fedavg+bn", rounds=2):
    cfg = tmp_path / f"{method}-{rounds}.toml"
    cfg.write_text(TOML.format(method=method, rounds=rounds))
    code = cli.main(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), *argv])
    out, err = capsys.readouterr()
    return code, err.strip()


# -- 1. resume checks the checkpoint against the run it continues -----------------------------------
def test_resume_with_another_method_is_refused_naming_both_and_nothing_changes(tmp_path, capsys):
    assert _train(tmp_path, capsys, method="fedtan")[0] == 0
    before = _digest(tmp_path / "run")
    code, err = _train(tmp_path, capsys, "--resume", "--rounds", "4", method="fedavg+bn")
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("bnfl train: error:") and "is of another run" in err
    assert "method: 'fedtan' (checkpoint) vs 'fedavg+bn' (this run)" in err
    assert "algorithm: 'FedTAN()' (checkpoint) vs 'FedAvg()' (this run)" in err
    assert _digest(tmp_path / "run") == before


@pytest.mark.parametrize(("change", "field"), [
    ({"lr": 0.05}, "train.lr: 0.1 (checkpoint) vs 0.05 (this run)"),
    ({"seed": 1}, "seed: 0 (checkpoint) vs 1 (this run)"),
    ({"batch_size": 5}, "train.batch_size: 4 (checkpoint) vs 5 (this run)"),
    ({"dtype": "float64"}, "train.dtype: 'float32' (checkpoint) vs 'float64' (this run)"),
])
def test_resume_refuses_each_changed_training_field(tmp_path, change, field):
    _sim(tmp_path).run(stop_after=2)
    before = _digest(tmp_path)
    with pytest.raises(_rundir.CheckpointError, match="is of another run") as info:
        _sim(tmp_path, **change).run(resume=True)
    assert field in str(info.value) and "\n" not in str(info.value)
    assert _digest(tmp_path) == before


def test_resume_refuses_other_data_model_or_algorithm_options(tmp_path):
    _sim(tmp_path).run(stop_after=1)
    data = _data()
    data.x_test = data.x_test + 1.0
    other_data = fl.Simulation(_model(), data, fl.FedAvg(), _sim(tmp_path).config)
    with pytest.raises(_rundir.CheckpointError, match="test data: "):
        other_data.run(resume=True)
    wider = nn.Sequential(nn.Linear(6, 9), nn.BatchNorm1d(9), nn.ReLU(), nn.Linear(9, 3))
    with pytest.raises(_rundir.CheckpointError, match="model architecture: "):
        fl.Simulation(wider, _data(), fl.FedAvg(), _sim(tmp_path).config).run(resume=True)
    with pytest.raises(_rundir.CheckpointError, match=r"algorithm: 'FedAvg\(\)' \(checkpoint\) vs 'FedProx"):
        _sim(tmp_path, alg=fl.FedProx(mu=0.1)).run(resume=True)


def test_resume_may_extend_rounds_and_change_eval_cadence_and_progress(tmp_path):
    full = _sim(tmp_path / "full", rounds=5).run()
    _sim(tmp_path / "r", rounds=2).run()
    resumed = _sim(tmp_path / "r", rounds=5, eval_every=1, progress=False).run(resume=True)
    assert resumed.without_time() == full.without_time()
    meta = json.loads((tmp_path / "r" / "history.json").read_text())["meta"]
    assert meta["config"]["rounds"] == 5  # the meta describes the run it now holds
    with pytest.raises(_rundir.CheckpointError, match="rounds: .* is at round 5, past rounds = 3"):
        _sim(tmp_path / "r", rounds=3).run(resume=True)


# -- 2. a new run never replaces another run's files -------------------------------------------------
def test_a_new_run_into_a_run_folder_is_an_error_unless_overwrite(tmp_path, capsys):
    assert _train(tmp_path, capsys)[0] == 0
    before = _digest(tmp_path / "run")
    code, err = _train(tmp_path, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "already holds a run" in err and all(w in err for w in ("--resume", "--overwrite", "another --out"))
    assert _digest(tmp_path / "run") == before
    (tmp_path / "run" / "notes.txt").write_text("mine")
    code, _ = _train(tmp_path, capsys, "--overwrite", rounds=3)
    assert code == 0
    assert len(json.loads((tmp_path / "run" / "history.json").read_text())["rows"]) == 3
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"  # only bnfl's run files are replaced
    assert _train(tmp_path, capsys, "--resume", "--overwrite")[0] == 2


def test_the_api_refuses_too(tmp_path):
    _sim(tmp_path).run()
    with pytest.raises(_rundir.RunFolderError, match="already holds a run"):
        _sim(tmp_path).run()
    assert len(_sim(tmp_path, rounds=2).run(overwrite=True)) == 2


# -- 3. checkpoints kept until the next one is verified; O(R) history; unreadable = one line --------
def test_previous_checkpoint_is_kept_and_an_interrupted_save_changes_nothing(tmp_path, monkeypatch):
    _sim(tmp_path).run(stop_after=2)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["round"] == 2
    assert torch.load(tmp_path / "checkpoint.prev.pt", weights_only=True)["round"] == 1
    before = _digest(tmp_path)
    real_save = torch.save

    def torn(obj, f):  # the disk fills up half way through
        real_save(obj, f)
        Path(f).write_bytes(Path(f).read_bytes()[:100])

    monkeypatch.setattr(_rundir.torch, "save", torn)
    with pytest.raises(_rundir.CheckpointError, match="read back is unreadable"):
        _sim(tmp_path).run(resume=True)
    after = _digest(tmp_path)
    assert after["checkpoint.pt"] == before["checkpoint.pt"] and set(after) == set(before)  # no temp file left


def test_an_unreadable_checkpoint_is_one_line_naming_the_earlier_one(tmp_path, capsys):
    assert _train(tmp_path, capsys, rounds=3)[0] == 0
    ck = tmp_path / "run" / "checkpoint.pt"
    ck.write_bytes(ck.read_bytes()[:1000])
    code, err = _train(tmp_path, capsys, "--resume", "--rounds", "4")
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"checkpoint {ck} is unreadable (not a complete zip archive" in err
    assert "checkpoint.prev.pt (round 2) is intact: rename it to checkpoint.pt" in err
    os.replace(tmp_path / "run" / "checkpoint.prev.pt", ck)
    assert _train(tmp_path, capsys, "--resume", "--rounds", "4")[0] == 0
    rows = json.loads((tmp_path / "run" / "history.json").read_text())["rows"]
    assert [r["round"] for r in rows] == [1, 2, 3, 4]  # round 3 of the broken checkpoint was redone


def test_history_is_appended_not_rewritten_and_checkpoints_do_not_grow(tmp_path, monkeypatch):
    from bnfl import _atomic

    full_writes, sizes = [], []
    real = _atomic.write_bytes
    monkeypatch.setattr(_atomic, "write_bytes", lambda p, *a, **k: (full_writes.append(Path(p).name), real(p, *a, **k))[1])
    sim = _sim(tmp_path, rounds=8)
    sim.round_hooks.append(lambda s, r: sizes.append((tmp_path / "checkpoint.pt").stat().st_size) if r > 1 else None)
    hist = sim.run()
    assert full_writes.count("history.json") == 1  # the header once; every round after appends its row
    assert (tmp_path / "history.json").read_text() == hist.dumps()
    assert json.loads((tmp_path / "history.json").read_text())["rows"] == json.loads(hist.dumps())["rows"]
    assert max(sizes) - min(sizes) < 100, sizes  # the rows are not in the checkpoint


def test_a_history_cut_mid_append_still_resumes(tmp_path):
    full = _sim(tmp_path / "full", rounds=4).run()
    _sim(tmp_path / "r", rounds=4).run(stop_after=3)
    h = tmp_path / "r" / "history.json"
    h.write_bytes(h.read_bytes()[:-30])  # round 3's row torn (the checkpoint of round 3 was kept)
    assert len(read_rows(h)) == 2
    # the checkpoint holds its round's row (issue 40): the torn row is restored without hand work
    assert _sim(tmp_path / "r", rounds=4).run(resume=True).without_time() == full.without_time()
    _sim(tmp_path / "r2", rounds=4).run(stop_after=3)
    h = tmp_path / "r2" / "history.json"
    h.write_bytes(h.read_bytes()[:-400])  # two rows torn: more than a kill between two writes leaves
    assert len(read_rows(h)) == 1
    with pytest.raises(_rundir.CheckpointError, match="holds 1 rounds but .* is at row 3"):
        _sim(tmp_path / "r2", rounds=4).run(resume=True)


def test_two_kills_in_a_row_between_checkpoint_and_history_still_resume(tmp_path, monkeypatch):
    """A resume restores the newest row from the checkpoint in memory; that row must reach
    ``history.json`` before the next checkpoint is written, or a second kill at the same place
    leaves a file two rows short of its checkpoint. Before the change (bnfl at 24946f7; one CI run
    in the kill test) the third start raised "history.json holds 0 rounds but ... is at row 2"."""
    from bnfl.fl import _checkpoint

    class Killed(BaseException):
        pass

    full = _sim(tmp_path / "full", rounds=4).run()
    real = _checkpoint.CheckpointMixin._sync_history
    kills = iter([1, 2])  # the rounds whose history append never happens
    at = {"kill": next(kills)}

    def sync(self, d, history=None):
        if history is None and self.round == at["kill"] and (d / _rundir.CHECKPOINT).is_file():
            at["kill"] = next(kills, None)
            raise Killed  # the process dies after the checkpoint, before its row is appended
        real(self, d, history)

    monkeypatch.setattr(_checkpoint.CheckpointMixin, "_sync_history", sync)
    for _ in range(2):
        with pytest.raises(Killed):
            _sim(tmp_path / "r", rounds=4).run(resume=True)
    monkeypatch.setattr(_checkpoint.CheckpointMixin, "_sync_history", real)
    assert _sim(tmp_path / "r", rounds=4).run(resume=True).without_time() == full.without_time()


# -- 4. --resume with nothing to resume ---------------------------------------------------------------
def test_resume_with_nothing_to_resume_warns_and_starts_at_round_1(tmp_path, capsys):
    code, err = _train(tmp_path, capsys, "--resume")
    assert code == 0
    assert err == f"bnfl train: warning: --resume: no checkpoint in {tmp_path / 'run'}; starting a new run at round 1"
    (tmp_path / "run" / "checkpoint.pt").unlink()
    (tmp_path / "run" / "checkpoint.prev.pt").unlink()
    code, err = _train(tmp_path, capsys, "--resume")  # a history without a checkpoint is another run's
    assert code == 2 and "holds a run (history.json, history.csv) but no checkpoint.pt" in err


# -- 6. nothing in a file runs as code -----------------------------------------------------------------
class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"{sys.executable} -c \"open({str(self.marker)!r}, 'w').write('ran')\"",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    _sim(tmp_path).run(stop_after=1)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    state["algorithm"] = {"x": _Evil(tmp_path / "marker")}
    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(_rundir.CheckpointError, match="it asks to run (posix|nt).system, and a checkpoint never runs code"):
        _sim(tmp_path).run(resume=True)
    assert not (tmp_path / "marker").exists()


def test_a_checkpoint_of_older_bnfl_still_loads(tmp_path):
    """Before: numpy's RNG state as numpy objects and the rows inside (weights_only=False)."""
    full = _sim(tmp_path / "full").run()
    sim = _sim(tmp_path / "old")
    sim.run(stop_after=2)
    state = sim.state_dict()
    state["numpy_rng"] = np.random.get_state()
    state["history"] = sim.history.dumps()
    del state["identity"], state["history_rows"]
    torch.save(state, tmp_path / "old" / "checkpoint.pt")
    assert _sim(tmp_path / "old").run(resume=True).without_time() == full.without_time()


def test_a_data_pickle_that_would_run_code_is_refused(tmp_path, capsys):
    from bnfl.data import load
    from bnfl.data._safe_pickle import UnsafePickleError

    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    marker = tmp_path / "marker"
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
        with open(base / name, "wb") as f:
            pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": _Evil(marker)}, f, protocol=2)
    with pytest.raises(UnsafePickleError, match=r"data_batch_1: refused to load: the pickle asks for "
                                                r"(posix|nt)\.system, which could run code"):
        load("cifar10", root=tmp_path)
    assert not marker.exists()
    # the same from the command line: one error line, no traceback, no marker
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nname = "cifar10"\nroot = "' + str(tmp_path) + '"\n[model]\nname = "q_mlp1"\n')
    assert cli.main(["train", "--config", str(cfg), "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bnfl train: error: ") and "refused to load" in err and len(err.splitlines()) == 1
    assert not marker.exists()


def test_the_safe_unpickler_reads_numpy_arrays_and_plain_data():
    from bnfl.data import _safe_pickle

    obj = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [1, 2.5, "s", b"x", None, True],
           "c": (np.int64(3), np.array(["u", "v"])), b"k": np.zeros((0,), np.uint8)}
    for protocol in (2, 4, 5):
        got = _safe_pickle.loads(pickle.dumps(obj, protocol=protocol))
        assert got["b"] == obj["b"] and got["c"][0] == 3 and list(got["c"][1]) == ["u", "v"]
        assert np.array_equal(got["a"], obj["a"]) and got["a"].dtype == np.float32
    py2 = pickle.dumps({b"data": np.arange(3, dtype=np.uint8)}, protocol=2)
    assert np.array_equal(_safe_pickle.loads(py2, encoding="latin1")[b"data"], np.arange(3))
