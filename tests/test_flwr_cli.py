"""``bnfl flwr`` (issue 29): Flower's ``flwr`` with this environment's programs first on PATH, so
that ``flwr run`` finds ``flower-superlink`` from a shell that did not activate the environment."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from bnfl import cli  # noqa: E402
from bnfl.train._flwr_cli import env_bin_on_path  # noqa: E402

BARE = os.pathsep.join(["/usr/bin", "/bin"])  # a shell that did not activate the environment


def test_this_environments_programs_come_first_on_path():
    env = {"PATH": BARE}
    bin_dir = env_bin_on_path(env)
    assert bin_dir == Path(sys.executable).parent
    assert env["PATH"].split(os.pathsep) == [str(bin_dir), "/usr/bin", "/bin"]
    assert shutil.which("flower-superlink", path=env["PATH"]) == str(bin_dir / "flower-superlink")
    env_bin_on_path(env)
    assert env["PATH"].split(os.pathsep).count(str(bin_dir)) == 1  # added once


def test_bnfl_flwr_runs_flowers_command_line(capsys, monkeypatch):
    monkeypatch.setenv("PATH", BARE)
    assert cli.main(["flwr", "run", "--help"]) == 0
    assert "Usage: bnfl flwr run" in capsys.readouterr().out
    assert os.environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
