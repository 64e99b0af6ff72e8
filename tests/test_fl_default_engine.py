"""The batched engine is the default (``TrainConfig``, ``bnfl train``, ``bnfl.fl.run``), the
sequential reference is one flag away (``--batched off``), and the history says which ran and why."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bnfl import fl
from bnfl.fl.batched_choice import engine_line
from bnfl.train import config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fedtan_digits.toml"


def _train(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bnfl")
    config.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", *argv])
    return args.func(args)


def _meta(out: Path) -> dict:
    return json.loads((out / "history.json").read_text())["meta"]["batched"]


def test_defaults_are_batched_auto():
    assert fl.TrainConfig().batched == "auto"
    assert config.RunConfig().train_config().batched == "auto"


def test_bnfl_train_example_runs_the_batched_engine_by_default(tmp_path, capsys):
    """The done-when of issue 27 item 1: the example config, no flag, trains batched."""
    assert _train(["--config", str(EXAMPLE), "--rounds", "1", "--out", str(tmp_path), "--quiet"]) == 0
    meta = _meta(tmp_path)
    assert meta["mode"] == "auto" and meta["used"] is True
    assert meta["line"].startswith("batched: batched='auto' chose the batched engine")
    assert "FedTAN" in meta["line"] and "not bitwise" in meta["line"]
    out = capsys.readouterr().out  # --quiet: the engine's line stays in the meta, off the screen
    assert meta["line"] not in out and out.startswith("fedtan: 1 rounds, test accuracy ")


def test_bnfl_train_batched_off_is_the_sequential_reference(tmp_path):
    off, ref = tmp_path / "off", tmp_path / "ref"
    assert _train(["--config", str(EXAMPLE), "--rounds", "2", "--out", str(off), "--quiet", "--batched", "off"]) == 0
    meta = _meta(off)
    assert meta["used"] is False and meta["line"].startswith("sequential: batched='off'")
    # the flag overrides the config's train table, and equals naming it there
    cfg = config.load_config(EXAMPLE)
    hist = config.run(config.RunConfig(**{**cfg.__dict__, "rounds": 2, "out": str(ref),
                                          "train": {**cfg.train, "batched": "off", "progress": False}}))
    rows = json.loads((off / "history.json").read_text())["rows"]
    assert [r["train_loss"] for r in rows] == hist.column("train_loss")  # bitwise: the same engine


def test_auto_falls_back_with_the_obstacle_and_on_refuses_it(tmp_path, capsys):
    from bnfl.cli import main

    base = ["train", "--config", str(EXAMPLE), "--rounds", "1", "--quiet", "--method", "moon"]
    assert main([*base, "--out", str(tmp_path)]) == 0
    meta = _meta(tmp_path)
    assert meta["used"] is False
    assert meta["line"].startswith("sequential: batched='auto' fell back to the sequential engine: MOON defines its "
                                   "own local_loss")
    capsys.readouterr()
    assert main([*base, "--batched", "on"]) == 2
    assert "batched='on' but this run cannot be batched: MOON defines its own local_loss" in capsys.readouterr().err


def test_python_api_default_is_batched():
    sim = fl.build({"rounds": 1, "train": {"progress": False}})
    assert sim.batched_engine is not None and sim.history.meta["batched"]["used"] is True
    with pytest.raises(ValueError, match="batched must be 'off', 'auto' or 'on'"):
        fl.TrainConfig(batched="yes")


def test_engine_line_reads_what_ran():
    assert engine_line("on", True, "batched") == "batched: batched='on' (equal to batched='off' up to rounding, not bitwise)"
    assert engine_line("off", False, "batched='off'").startswith("sequential: batched='off' (the reference engine")
    assert engine_line("auto", False, "X runs the clients itself") == \
        "sequential: batched='auto' fell back to the sequential engine: X runs the clients itself"
    assert "(Net)" in engine_line("auto", True, "batched", model="Net", algorithm="FedAvg")
