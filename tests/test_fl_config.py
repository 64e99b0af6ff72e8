"""RunConfig / TOML / `bnfl train`: every method from a tmp config; one builder; clear errors for bad configs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from bnfl.methods import METHODS
from bnfl.train import config


def _train(argv: list[str]) -> int:
    """Run the ``train`` sub-command exactly as ``bnfl train`` registers it."""
    parser = argparse.ArgumentParser(prog="bnfl")
    config.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", *argv])
    return args.func(args)


def _needs_images(method):
    """Instance norm normalises over spatial positions: it needs a conv model on images."""
    return METHODS[method].norm == "in"


def _toml(path, method, extra=""):
    model, form = ("q_res", "image") if _needs_images(method) else ("q_mlp1", "flat")
    path.write_text(f"""
method = "{method}"
rounds = 2
seed = 3
out = "{path.parent / 'out'}"
{extra}
[model]
name = "{model}"
[data]
name = "digits"
form = "{form}"
[partition]
kind = "classes_per_client"
num_clients = 5
k = 2
[train]
local_steps = 2
batch_size = 16
lr = 0.05
progress = false
""")
    return path


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_from_bnfl_train(tmp_path, name, capsys):
    extra = "[method_options]\nswitch = 1\n" if name == "fedtan2" else ""
    cfg = _toml(tmp_path / "run.toml", name, extra)
    assert _train(["--config", str(cfg)]) == 0
    hist = json.loads((tmp_path / "out" / "history.json").read_text())
    assert len(hist["rows"]) >= 2
    assert (tmp_path / "out" / "history.csv").exists()
    assert name in capsys.readouterr().out


def test_flags_override_and_resume(tmp_path):
    cfg = _toml(tmp_path / "run.toml", "fedavg+bn")
    assert _train(["--config", str(cfg), "--rounds", "1", "--lr", "0.1"]) == 0
    one = json.loads((tmp_path / "out" / "history.json").read_text())["rows"]
    assert len(one) == 1 and one[0]["lr"] == 0.1
    assert _train(["--config", str(cfg), "--rounds", "2", "--lr", "0.1", "--resume"]) == 0
    two = json.loads((tmp_path / "out" / "history.json").read_text())["rows"]
    full = config.run(config.RunConfig(**{**config.load_config(cfg).__dict__, "out": None,
                                          "train": {**config.load_config(cfg).train, "lr": 0.1}}))
    assert [r["train_loss"] for r in two] == full.column("train_loss")


def test_bad_configs_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="unknown method 'fedsgd'; valid ids: .*fedavg\\+gn"):
        config.RunConfig(method="fedsgd")
    with pytest.raises(ValueError, match="data.name: unknown 'mnsit'; valid names: .*mnist"):
        config.RunConfig(data={"name": "mnsit"})
    with pytest.raises(ValueError, match="model.norm 'gn' contradicts .*use method 'fedavg\\+gn'"):
        config.RunConfig(method="fedavg+bn", model={"name": "q_mlp1", "norm": "gn"})
    with pytest.raises(ValueError, match="partition .classes_per_client..phi: unknown field"):
        config.RunConfig(partition={"kind": "classes_per_client", "phi": 0.1})
    with pytest.raises(ValueError, match="rounds"):
        config.RunConfig(rounds="3")
    with pytest.raises(ValueError, match="lr"):
        config.RunConfig(train={"lr": -0.5})
    with pytest.raises(TypeError, match="train.batch_size"):
        config.RunConfig(train={"batch_size": 3.5})
    with pytest.raises(ValueError, match="train.epochs: unknown field"):
        config.RunConfig(train={"epochs": 3})
    with pytest.raises(ValueError, match="partition.kind: unknown 'random'; valid: iid, classes_per_client"):
        config.RunConfig(partition={"kind": "random"})
    bad = tmp_path / "bad.toml"
    bad.write_text('method = "fedavg+bn"\nlearning_rate = 0.1\n')
    with pytest.raises(ValueError, match="config.learning_rate: unknown field"):
        config.load_config(bad)
    with pytest.raises(FileNotFoundError):
        config.load_config(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="model.name: unknown 'vgg'; valid: .*q_mlp_bn"):
        config.build({"model": {"name": "vgg"}})
    with pytest.raises(FileNotFoundError, match="root=PATH"):
        config.build({"data": {"name": "cifar10"}, "model": {"name": "resnet20"}})


def test_bnfl_main_train_entry_point(tmp_path, capsys):
    """The real console entry point dispatches `bnfl train` to bnfl.train.config."""
    from bnfl import cli

    cfg = _toml(tmp_path / "run.toml", "fedtan")
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    assert "fedtan: 2 rounds" in capsys.readouterr().out
    assert cli.main(["train", "--config", str(cfg), "--algorithm", "nope"]) == 2
    assert "valid ids" in capsys.readouterr().err
    assert cli.main(["train", "--config", str(cfg), "--method", "nope"]) == 2
    assert "unknown method 'nope'; valid ids: centralized, fedtan" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('method = "fedavg+bn"\n[train]\nbatch_size = "big"\n')
    assert cli.main(["train", "--config", str(bad)]) == 2
    assert "train.batch_size" in capsys.readouterr().err


def test_example_config_runs(tmp_path, capsys):
    example = Path(__file__).resolve().parents[1] / "examples" / "fedtan_digits.toml"
    cfg = config.load_config(example)
    assert cfg.method == "fedtan"
    assert _train(["--config", str(example), "--rounds", "1", "--out", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "history.json").is_file() and (tmp_path / "history.csv").is_file()


def test_train_help_lists_every_method_id(capsys):
    parser = argparse.ArgumentParser(prog="bnfl")
    config.register(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for mid in METHODS:
        assert mid in text


@pytest.mark.parametrize("mid", list(METHODS))
def test_method_id_round_trips_through_the_cli(tmp_path, mid):
    """`--method ID` (and the alias `--algorithm`) reaches the config and the built algorithm."""
    parser = argparse.ArgumentParser(prog="bnfl")
    config.register(parser.add_subparsers(dest="command"))
    for flag in ("--method", "--algorithm"):
        args = parser.parse_args(["train", flag, mid])
        assert args.method == mid
    images = _needs_images(mid)
    cfg = config.RunConfig(method=mid, model={"name": "q_res" if images else "q_mlp1"}, rounds=1,
                           data={"name": "digits", "form": "image" if images else "flat"},
                           method_options={"switch": 1} if mid == "fedtan2" else {})
    sim = config.build(cfg)
    assert type(sim.algorithm) is METHODS[mid].algorithm_class
    assert cfg.to_dict()["method"] == mid


def test_toml_and_dict_build_the_same_simulation(tmp_path):
    """One builder: the same run from a TOML file, its dict and its RunConfig is identical."""
    path = _toml(tmp_path / "run.toml", "fedtan2", "[method_options]\nswitch = 1\n")
    d = {"method": "fedtan2", "method_options": {"switch": 1}, "rounds": 2, "seed": 3, "out": None,
         "model": {"name": "q_mlp1"}, "data": {"name": "digits", "form": "flat"},
         "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 2},
         "train": {"local_steps": 2, "batch_size": 16, "lr": 0.05, "progress": False}}
    a = config.build(path)
    b = config.build(d)
    c = config.build(config.RunConfig.from_dict(d))
    for sim in (b, c):
        assert type(sim.algorithm) is type(a.algorithm) and sim.algorithm.switch == a.algorithm.switch == 1
        assert [len(i) for i in sim.client_indices] == [len(i) for i in a.client_indices]
        assert all((x == y).all() for x, y in zip(sim.client_indices, a.client_indices, strict=True))
        assert all(torch.equal(v, a.global_state[k]) for k, v in sim.global_state.items())
        assert sim.config.schedule == a.config.schedule and sim.config.local_steps == a.config.local_steps
    assert [r["train_loss"] for r in b.run().rows] == [r["train_loss"] for r in c.run().rows]


def test_schedule_fields_in_train_table(tmp_path):
    cfg = config.RunConfig(rounds=10, train={"lr": 0.5, "steps": [[4, 0.01], [8, 0.001]], "decay": 0.998})
    s = cfg.train_config().schedule
    assert s.at(4, 10) == pytest.approx(0.5 * 0.998**3)
    assert s.at(5, 10) == pytest.approx(0.01 * 0.998**4)
    assert s.at(9, 10) == pytest.approx(0.001 * 0.998**8)
    with pytest.raises(ValueError, match="lr step"):
        config.RunConfig(train={"steps": [[-1, 0.1]]})


def test_by_domain_partition_and_local_data_root(tmp_path):
    cfg = config.RunConfig(method="fedbn", model={"name": "q_mlp1"},
                           data={"name": "digit_domains", "form": "flat", "domains": ["clean", "blur"],
                                 "train_per_domain": 20},
                           partition={"kind": "by_domain"})
    sim = config.build(cfg)
    assert sim.num_clients == 2 and sim.data.client_test is not None
    with pytest.raises(ValueError, match="num_clients = 3 but .* 2 domains"):
        config.build(config.RunConfig(**{**cfg.to_dict(), "partition": {"kind": "by_domain", "num_clients": 3}}))
    with pytest.raises(ValueError, match="needs data with domains"):
        config.build(config.RunConfig(partition={"kind": "by_domain"}))


def test_one_schedule_type_for_every_paper():
    from bnfl.fl import Schedule

    # FedTAN-II (Fig. 11): 0.5 -> 0.01 after M = 1000 -> 0.001 after 6000 (factors 1/50, then 1/10)
    s = Schedule(0.5, steps=((6000, 0.001), (1000, 0.01)))
    assert [s.at(r, 10_000) for r in (1, 1000, 1001, 6000, 6001)] == [0.5, 0.5, 0.01, 0.01, 0.001]
    # HBN: x0.998 per round
    h = Schedule(0.1, decay=0.998)
    assert h.at(1, 100) == 0.1 and h.at(101, 200) == pytest.approx(0.1 * 0.998**100)
    # FixBN: x0.1 at 50% and 75% of the rounds
    f = Schedule(0.02, fractions=(0.5, 0.75), gamma=0.1)
    assert [f.at(r, 100) for r in (50, 51, 75, 76)] == pytest.approx([0.02, 0.002, 0.002, 0.0002])
    # FedTAN CIFAR-10 with momentum: milestones 6000, 8000
    c = Schedule(0.5, milestones=(6000, 8000))
    assert [c.at(r, 10_000) for r in (6000, 6001, 8001)] == pytest.approx([0.5, 0.05, 0.005])
    for bad in ({"steps": ((1.5, 0.1),)}, {"steps": ((3, 0.0),)}, {"steps": ((3,),)}, {"decay": 1.5},
                {"fractions": (1.0,)}):
        with pytest.raises(ValueError):
            Schedule(0.1, **bad)


def test_experiment_specs_use_the_config_vocabulary():
    """experiments.training reads RunConfig's vocabulary: a canonical spec is a valid RunConfig."""
    from bnfl.experiments.training import canonical

    new = {"method": "fedavg+gn", "model": {"name": "q_mlp_bn"}, "rounds": 30,
           "data": {"name": "gaussian_mixture", "num_classes": 100},
           "partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5, "seed": 0},
           "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1, "steps": [[10, 0.01]]}}
    spec = canonical(new)
    config.RunConfig.from_dict(spec)  # a canonical spec is a valid RunConfig
    assert spec["train"]["steps"] == [[10, 0.01]] and spec["partition"]["seed"] == 0
    with pytest.raises(ValueError, match="unknown method 'fedsync'"):
        canonical({**new, "method": "fedsync"})
    with pytest.raises(ValueError, match="data.name: unknown 'cifar'"):
        canonical({**new, "data": {"name": "cifar"}})
