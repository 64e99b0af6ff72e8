"""Every `bnfl` command and flag says what it does: a walk over the argparse tree."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from bnfl import cli

#: Phrases that belong in notes to the project's developers, not in what a user reads.
INTERNAL = ("main job", "until the reproductions exist", "TODO", "FIXME", "XXX")


def _commands() -> dict[str, tuple[argparse.ArgumentParser, str]]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    return {name: (p, helps.get(name) or "") for name, p in sub.choices.items()}


COMMANDS = _commands()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_and_flag_has_help(name):
    parser, summary = COMMANDS[name]
    assert summary.strip(), f"bnfl {name} has no one-line help in `bnfl --help`"
    assert (parser.description or "").strip(), f"bnfl {name} has no description in `bnfl {name} --help`"
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip() and action.help is not argparse.SUPPRESS, \
            f"bnfl {name} {flag} has no help text"
    text = parser.format_help()
    for phrase in INTERNAL:
        assert phrase not in text, f"bnfl {name} --help shows an internal note: {phrase!r}"
    # argparse %-formats a flag's help, not a description: '95%%' there reaches the reader as is
    assert "%%" not in text, f"bnfl {name} --help shows a doubled percent sign"


def test_demo_help_is_the_whole_description(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["demo", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "prints" in out and "1. for each BN coupling" in out and "same seed prints the same numbers" in out


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="needs Flower (the flower extra)")
def test_flwr_help_is_flowers_help(capsys):
    assert cli.main(["flwr", "--help"]) == 0
    out = capsys.readouterr().out
    assert "bnfl flwr" in out and "run" in out


def test_list_fits_100_columns_with_an_aligned_header(capsys, tmp_path):
    assert cli.main(["list", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100
    header, first = lines[0], lines[2]
    assert first.index(first.split()[1]) == header.index("kind")  # the kind column starts under its header
    assert first.rindex(first.split()[3]) == header.index("last result")


def test_user_errors_name_no_private_functions():
    """Float labels are one clear line (not torch's RuntimeError deep in the loss); the Flower
    engine's batched refusal names no private class or method."""
    import re

    from bnfl import fl
    from bnfl.fl import FederatedData
    from bnfl.fl.batched_choice import batched_obstacle

    sim = fl.build({"method": "fedavg+bn", "rounds": 1, "train": {"progress": False}})
    d = sim.data
    bad = FederatedData(d.x_train, d.y_train.float(), d.x_test, d.y_test, d.clients)
    with pytest.raises(ValueError, match=r"y_train holds float32 labels.*pass y_train\.long\(\)"):
        fl.Simulation(sim.model, bad, sim.algorithm, sim.config)

    from bnfl.fl.clients import Sequential

    class OwnClients(Sequential):  # a backend that trains its clients elsewhere, as Flower's does
        elsewhere = True

        def __init__(self):
            pass

        def attach(self, host):
            self.host = host

    why = batched_obstacle(fl.Simulation(sim.model, sim.data, sim.algorithm, sim.config, clients=OwnClients()))
    assert why and not re.search(r"\b_\w+", why) and "OwnClients" not in why


def test_train_summary_prints_numbers_at_a_readable_precision(capsys, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('method = "fedavg+bn"\nrounds = 2\n[train]\nprogress = false\n')
    assert cli.main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    import re

    assert re.fullmatch(r"fedavg\+bn: 2 rounds, test accuracy \d+\.\d\d%, 2 communication rounds, "
                        r"\d+\.\d (KiB|MiB) communicated; wrote .*history\.json", first), first
