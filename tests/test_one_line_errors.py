"""Every input and operating-system error of issue 40 is one line (exit 2, the file or field named,
no traceback unless ``bnfl --debug``); rounds and clients are bounded before anything is
allocated; ``bnfl train`` stops a diverging run (``TrainConfig.max_loss``, off in the experiments)
and marks history.json; ``--device`` is checked before a result is stored.

Each case below failed on bnfl at de45014 (a traceback, a hang, a wrong message or exit 0), as the
issue lists them.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bnfl import cli

BASE = 'rounds = 1\n[partition]\nkind = "iid"\nnum_clients = 2\n[train]\nbatch_size = 8\nprogress = false\n'


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue().strip()


def _one_line(code: int, err: str, command: str = "train") -> str:
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"bnfl {command}: error: "), err
    return err.removeprefix(f"bnfl {command}: error: ")


def _cfg(tmp_path: Path, text: str = BASE, name: str = "c.toml") -> str:
    (tmp_path / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return str(tmp_path / name)


# -- operating-system errors --------------------------------------------------------------------------
def test_out_below_a_file_is_one_line_for_train_and_run(tmp_path):
    (tmp_path / "afile").write_text("x")
    sub = tmp_path / "afile" / "sub"
    msg = _one_line(*_main(["train", "--config", _cfg(tmp_path), "--out", str(sub)]))
    assert msg == f"{sub}: not a directory (a part of this path is a file, not a folder; choose another path)"
    msg = _one_line(*_main(["run", "fedtan-tab4", "--profile", "smoke", "--out", str(sub)]), "run")
    assert msg == f"{sub}: not a directory (a part of this path is a file, not a folder; choose another path)"
    assert _one_line(*_main(["train", "--config", _cfg(tmp_path), "--out", str(tmp_path / "afile")])) == \
        f"output folder {tmp_path / 'afile'} is a file; give a folder with --out"


def test_a_read_only_out_is_one_line(tmp_path, monkeypatch):
    from bnfl import _folder_lock

    def read_only(path, *a, **k):  # noqa: ANN001, ANN202 - os.open's signature
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(_folder_lock.os, "open", read_only)  # root ignores chmod: the file system says no
    msg = _one_line(*_main(["train", "--config", _cfg(tmp_path), "--out", str(tmp_path / "ro")]))
    assert msg == f"{tmp_path / 'ro' / '.bnfl.lock'}: read-only file system (the file system is read-only; choose another --out)"


def test_a_full_disk_is_one_line_and_the_finished_rounds_resume(tmp_path, monkeypatch):
    from bnfl.fl import _rundir

    real, calls = _rundir.torch.save, []

    def fills_up(obj, f):  # noqa: ANN001, ANN202
        calls.append(f)
        if len(calls) == 2:  # round 2's checkpoint: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return real(obj, f)

    monkeypatch.setattr(_rundir.torch, "save", fills_up)
    out = tmp_path / "run"
    argv = ["train", "--config", _cfg(tmp_path, BASE.replace("rounds = 1", "rounds = 3")), "--out", str(out)]
    msg = _one_line(*_main(argv))
    assert msg == (f"writing {out / 'checkpoint.pt'} failed (no space left on device): is the disk full? checkpoint.pt "
                   f"was left as it was; free some space and run the same command again (add --resume to continue)")
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.setattr(_rundir.torch, "save", real)
    assert _main([*argv, "--resume"])[0] == 0
    assert [r["round"] for r in json.loads((out / "history.json").read_text())["rows"]] == [1, 2, 3]


def test_a_file_size_limit_hit_while_saving_is_one_line(tmp_path):
    """A real write failure (RLIMIT_FSIZE in a child process: the writes fail as on a full disk),
    which torch's zip writer reports as a RuntimeError (before: two tracebacks)."""
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"
            "from bnfl.cli import main\n"
            f"sys.exit(main(['train', '--rounds', '2', '--out', {str(tmp_path / 'run')!r}, '--quiet']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    msg = _one_line(proc.returncode, proc.stderr.strip())
    assert msg.startswith(f"writing {tmp_path / 'run' / 'checkpoint.pt'} failed (") and "is the disk full?" in msg
    run = tmp_path / "run"  # nothing saved: the folder this run made is removed, as a refused config's is
    assert not run.exists() or not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_config_that_is_a_folder_is_one_line(tmp_path):
    assert _one_line(*_main(["train", "--config", str(tmp_path)])) == \
        f"config file {tmp_path} is a folder; give the path of a TOML file"


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(ValueError, match="is a folder"):
        cli.main(["--debug", "train", "--config", str(tmp_path)])


# -- what a config holds --------------------------------------------------------------------------------
def test_a_deeply_nested_toml_is_one_line(tmp_path):
    path = _cfg(tmp_path, "a = " + "[" * 3000 + "]" * 3000 + "\n")
    for command in ("train", "diagnose"):
        assert _one_line(*_main([command, "--config", path]), command) == \
            f"{path}: nested too deeply to read (a config's tables go a few levels deep at most)"


@pytest.mark.parametrize(("content", "kind"), [
    ("rounds = 1\n".encode("utf-16"), "UTF-16 text"),
    (b"\x00\x01\x02\xff\xfe\x00garbage", "binary data"),
    ("rounds = 1 # café\n".encode("latin-1"), "text in another encoding (latin-1?)"),
])
def test_a_config_not_in_utf8_names_the_file_and_the_encoding(tmp_path, content, kind):
    path = _cfg(tmp_path, content)
    for command in ("train", "diagnose"):
        msg = _one_line(*_main([command, "--config", path]), command)
        assert msg.startswith(f"{path}: not UTF-8 text: byte ") and f"looks like {kind}; save the config as UTF-8" in msg


def test_a_utf8_config_with_a_byte_order_mark_still_reads(tmp_path):
    assert _main(["train", "--config", _cfg(tmp_path, "\ufeff" + BASE)])[0] == 0


@pytest.mark.parametrize(("extra", "want"), [
    ('out = 5\n', "out must be a string, got 5"),
    ('[model]\nname = "q_mlp_bn"\ngroups = "x"\n', "model: groups must be a positive int, got 'x'"),
    ('[model]\nname = "q_mlp_bn"\nnum_classes = 3\n', "data: Q-DIG's y_train holds label 9, but the model scores 3 "
     "classes (model.num_classes, labels 0 .. 2); drop model.num_classes or set it to 10"),
])
def test_bad_values_name_their_field(tmp_path, extra, want):
    text = extra + BASE if not extra.startswith("[") else BASE + extra
    for command in ("train", "diagnose"):
        assert _one_line(*_main([command, "--config", _cfg(tmp_path, text)]), command) == want


LABELS = '''
import torch
from bnfl.data import Split
from bnfl.registry import plugin


@plugin("data set")
def load(*, bad=10):
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
    y = torch.arange(40) % 3
    y[7] = bad
    return Split(x, y, x[:10].clone(), (torch.arange(10) % 3), classes=("a", "b", "c"), name="bad-labels")
'''


@pytest.mark.parametrize("bad", [10, -1])
def test_labels_outside_the_classes_are_one_line(tmp_path, monkeypatch, bad):
    (tmp_path / "labelmod.py").write_text(LABELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = BASE + f'[data]\nname = "labelmod:load"\nbad = {bad}\n'
    want = (f"data: bad-labels's y_train holds label {bad}, but the model scores 3 classes (model.num_classes, "
            f"labels 0 .. 2); the data set's loader must give labels 0 .. 2")
    for command in ("train", "diagnose"):
        assert _one_line(*_main([command, "--config", _cfg(tmp_path, text)]), command) == want


@pytest.mark.parametrize(("train", "want"), [
    ('lr = "0.1"', "train.lr must be of type float, got '0.1'"),
    ("weight_decay = nan", "train: weight_decay must be a finite number, got nan"),
])
def test_diagnose_wrong_types_are_one_line(tmp_path, train, want):
    assert _one_line(*_main(["diagnose", "--config", _cfg(tmp_path, BASE + train + "\n")]), "diagnose") == want


@pytest.mark.parametrize(("extra", "start"), [
    ('[model]\nname = "q_mlp_bn"\nwhat = 1\n', "model: bad option for q_mlp_bn: "),
    ('[data]\nname = "digits"\nshuffle_everything = true\n', "data"),
    ('[method_options]\nbogus = 1\n', "method_options: bad options for algorithm 'fedavg': "),
])
def test_diagnose_unknown_options_are_one_line(tmp_path, extra, start):
    assert _one_line(*_main(["diagnose", "--config", _cfg(tmp_path, BASE + extra)]), "diagnose").startswith(start)


# -- bounds before allocation ---------------------------------------------------------------------------
def test_absurd_rounds_and_clients_are_refused_at_once(tmp_path):
    t0 = time.perf_counter()
    assert _one_line(*_main(["train", "--config", _cfg(tmp_path, BASE.replace("rounds = 1", "rounds = " + "1" + "0" * 21))])) \
        == "rounds must be at most 1,000,000,000, got 1000000000000000000000"
    text = BASE.replace("num_clients = 2", "num_clients = 1000000000000")
    assert _one_line(*_main(["train", "--config", _cfg(tmp_path, text)])) == \
        "partition.num_clients must be an integer from 1 to the 1437 training samples of Q-DIG, got 1000000000000"
    assert time.perf_counter() - t0 < 30


def test_participation_is_drawn_per_round_not_listed_up_front():
    from bnfl.data.partition import Participation, participation

    lazy = Participation(100, 0.1, 10**9, seed=3)  # before: a list of 10**9 arrays (hours, and memory)
    assert len(lazy) == 10**9 and lazy[10**9 - 1].shape == (10,)
    listed = participation(100, 0.1, 7, seed=3)
    assert all((a == b).all() for a, b in zip(lazy[:7], listed, strict=True)) and (lazy[-1] == lazy[10**9 - 1]).all()


# -- divergence: bnfl train stops, the experiments do not --------------------------------------------------
def test_bnfl_train_stops_a_diverging_run_and_marks_history(tmp_path):
    out = tmp_path / "run"
    text = BASE.replace("rounds = 1", "rounds = 6") + 'lr = 1000.0\nbatched = "off"\n'
    msg = _one_line(*_main(["train", "--config", _cfg(tmp_path, text), "--out", str(out)]))
    assert "passed max_loss = 1000; training diverged (lower the learning rate)" in msg
    meta = json.loads((out / "history.json").read_text())["meta"]
    assert meta["stopped"]["reason"] == "diverged" and meta["stopped"]["detail"] == msg
    assert meta["config"]["max_loss"] == 1000.0


def test_the_divergence_stop_is_off_in_python_runs_and_the_experiments(tmp_path):
    from bnfl import fl
    from bnfl.experiments import training

    cfg = fl.RunConfig.from_dict({"rounds": 4, "partition": {"kind": "iid", "num_clients": 2},
                                  "train": {"lr": 1000.0, "progress": False, "batched": "off", "batch_size": 8}})
    sim = fl.build(cfg)
    assert sim.config.max_loss is None and "max_loss" not in sim.history.meta["config"]  # the meta of before
    try:
        rows = sim.run().rows
    except fl.DivergenceError as err:  # a non-finite loss still stops every run
        rows = err.history.rows
        assert "non-finite" in str(err)
    assert max(r["train_loss"] for r in rows) > 1000 or len(rows) < 4  # it ran past the bound bnfl train uses
    spec = {"method": "fedavg+bn", "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
            "partition": {"kind": "iid", "num_clients": 2}, "train": {"lr": 0.1}, "rounds": 1, "seed": 0}
    sim, _ = training._build(spec, device="cpu", data_root=None, progress=False)
    assert sim.config.max_loss is None


def test_max_loss_is_validated_and_inf_turns_it_off(tmp_path):
    from bnfl import fl

    with pytest.raises(ValueError, match="max_loss must be a positive number"):
        fl.TrainConfig(max_loss=-1.0)
    assert fl.TrainConfig(max_loss=math.inf).max_loss == math.inf
    assert _main(["train", "--config", _cfg(tmp_path, BASE + "max_loss = inf\n"), "--quiet"])[0] == 0


def test_run_device_is_checked_before_anything_is_stored(tmp_path):
    out = tmp_path / "out"
    msg = _one_line(*_main(["run", "fedtan-tab4", "--profile", "smoke", "--device", "warp9", "--out", str(out)]), "run")
    assert msg.startswith("device: 'warp9' cannot be used here")
    assert not out.exists() or not list(out.rglob("result.json"))


# -- issue 50: nothing left behind, nothing printed before the line, plain words ----------------------------
def test_a_config_refused_after_the_folder_was_made_leaves_no_empty_out_folder(tmp_path):
    bad = _cfg(tmp_path, BASE + '[model]\nname = "q_mlp_bn"\nwidthx = 3\n')
    msg = _one_line(*_main(["train", "--config", bad, "--out", str(tmp_path / "new" / "run")]))
    assert "bad option for q_mlp_bn" in msg and not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a folder that was there before stays
    _one_line(*_main(["train", "--config", bad, "--out", str(tmp_path / "mine")]))
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_raw_pickle_checkpoint_is_refused_without_torchs_pickle_warning_before_it(tmp_path, protocol):
    import pickle
    import warnings

    ckpt = tmp_path / "raw.pt"
    ckpt.write_bytes(pickle.dumps({"round": 1, "global_state": {}}, protocol=protocol))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        msg = _one_line(*_main(["diagnose", "--config", _cfg(tmp_path), "--checkpoint", str(ckpt), "--quiet"]),
                        "diagnose")
    assert msg == f"checkpoint {ckpt} is unreadable (not a torch file: garbage or truncated bytes)"
    assert not [w for w in seen if "pickle protocol" in str(w.message)]


def test_the_divergence_line_says_where_the_completed_rounds_are(tmp_path):
    from bnfl import fl

    out = tmp_path / "run"
    text = BASE.replace("rounds = 1", "rounds = 6") + 'lr = 1000.0\nbatched = "off"\n'
    msg = _one_line(*_main(["train", "--config", _cfg(tmp_path, text), "--out", str(out)]))
    assert ".history" not in msg and msg.endswith(f"completed rounds are saved in {out / 'history.json'}")
    with pytest.raises(fl.DivergenceError) as err:
        fl.run(_cfg(tmp_path, text.replace("[train]", "[train]\nmax_loss = 1000.0")))
    assert str(err.value).endswith("completed rounds are saved in the error's .history (DivergenceError.history)")
