"""The pytest fixtures of bnfl.testing.pytest_plugin, run exactly as docs/bn-safe.md shows them.

The page's ``conftest.py``, ``my_server.py`` and ``test_my_server.py`` blocks are copied into a fresh
folder and run by pytest in a subprocess (``--bnfl-examples 10``): against a BN-safe
server (bnfl.compat's exact merge) both tests pass; against a naive one (state_dict averaging, a
server learning rate that overshoots) both fail, with a counterexample in the output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bnfl.testing import pytest_plugin

PAGE = Path(__file__).resolve().parents[1] / "docs" / "bn-safe.md"

SAFE = '''
from bnfl import compat


def aggregate(states, weights, *, model, counts):
    return compat.aggregate_state_dicts(states, weights, model=model, counts=counts)


def make_server_step():
    def step(global_state, states, weights, *, model, counts):
        return compat.aggregate_state_dicts(states, weights, model=model, counts=counts)
    return step
'''

NAIVE = '''
def aggregate(states, weights):
    total = sum(weights)
    return {k: sum(w / total * s[k] for s, w in zip(states, weights)) for k in states[0]}


def make_server_step(lr=15.0):  # FedOpt with a large server learning rate, on every entry
    def step(global_state, states, weights):
        avg = aggregate(states, weights)
        return {k: (g + lr * (avg[k] - g)).to(g.dtype) if g.is_floating_point() else avg[k].round().to(g.dtype)
                for k, g in global_state.items()}
    return step
'''


def page_block(first_line: str) -> str:
    """The page's fenced python block that starts with ``first_line``."""
    for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"docs/bn-safe.md has no python block starting with {first_line!r}")


def run_example(folder: Path, server: str) -> subprocess.CompletedProcess:
    folder.mkdir()
    (folder / "conftest.py").write_text(page_block("# conftest.py"), encoding="utf-8")
    (folder / "test_my_server.py").write_text(page_block("# test_my_server.py"), encoding="utf-8")
    (folder / "my_server.py").write_text(server, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--bnfl-examples", "10", str(folder)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_page_example_is_about_ten_lines():
    code = page_block("# conftest.py") + page_block("# test_my_server.py")
    assert len([line for line in code.splitlines() if line.strip()]) <= 10


def test_the_page_example_passes_a_bn_safe_server(tmp_path):
    assert page_block("# my_server.py").split("\n", 1)[1].strip() == SAFE.strip()  # the page gives the module
    res = run_example(tmp_path / "safe", page_block("# my_server.py"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 passed" in res.stdout


def test_the_page_example_fails_a_naive_server_with_counterexamples(tmp_path):
    res = run_example(tmp_path / "naive", NAIVE)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "2 failed" in res.stdout
    assert "expected BN statistics aggregated with policy 'exact', found 'average'" in res.stdout
    assert "BN variance breaks under this server step" in res.stdout
    assert res.stdout.count("counterexample") >= 2


def test_bad_examples_option_is_one_clear_line():
    class Config:
        def getoption(self, name):
            return {"--bnfl-examples": 0}[name]

    with pytest.raises(pytest.UsageError, match="--bnfl-examples must be a positive int, got 0"):
        pytest_plugin._examples(Config())


pytestmark = pytest.mark.filterwarnings("ignore")
