"""Every command and code block on the pages runs as written, or says where it runs and why not here.

The fenced ``bash`` / ``console`` / ``python`` blocks of ``docs/*.md`` and ``README.md`` are read
from the files. Each one is in :data:`BLOCKS`, keyed by its page and first command line:

* ``RUN``: :func:`test_the_page_runs_its_blocks_as_written` runs the page's ``RUN`` blocks in
  order, exactly as written, in a fresh folder that holds the shipped ``examples/`` and
  ``figures/`` (bash with ``set -e`` and this environment's ``bin`` on ``PATH``; python with that
  folder as the current one), lines listed in :data:`NOT_HERE` left out with their reason;
* ``("test", "tests/...::name")``: another test runs the block (named, and checked to exist);
* ``("skip", reason)``: it cannot run here (an install, a GPU, a second machine, an hour), with
  the reason printed as the marker of the skipped case.

A block added to a page without an entry here fails :func:`test_every_block_on_the_pages_is_accounted_for`,
as does an entry whose block left the page. (Before, bnfl at e5220bf: no test read the pages'
commands; four of them failed as written: ``bnfl diagnose --config run.toml`` on two pages,
``--checkpoint runs/my-run``, the ``bnfl.diagnose`` snippet's undefined ``model`` and ``x_0``,
the plugin example's missing ``my_server``.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
LANGS = ("bash", "sh", "console", "python")
RUN = "run"

#: (page, first command line) -> RUN, ("test", "tests/file.py::test"), or ("skip", reason).
BLOCKS: dict[tuple[str, str], object] = {
    ("bn-safe.md", 'pytest_plugins = ["bnfl.testing.pytest_plugin"]'):
        ("test", "tests/test_testing_plugin.py::test_the_page_example_passes_a_bn_safe_server"),
    ("bn-safe.md", "from bnfl import compat"):
        ("test", "tests/test_testing_plugin.py::test_the_page_example_passes_a_bn_safe_server"),
    ("bn-safe.md", "from my_server import aggregate, make_server_step"):
        ("test", "tests/test_testing_plugin.py::test_the_page_example_fails_a_naive_server_with_counterexamples"),
    ("bench.md", "bnfl bench examples/pooled_bn_stats.py --profile smoke --out bench-out"):
        ("test", "tests/test_bench_cli.py::test_the_page_command_runs_the_example_at_smoke_then_reuses_its_baselines"),
    ("bench.md", "bnfl bench examples/pooled_bn_stats.py --out bench-out"):
        ("skip", "the quick bench trains for several minutes; its leaderboard is committed (docs/_data/bench) and "
                 "tests/test_bench_cli.py runs its --dry-run"),
    ("bench.md", "bnfl bench examples/pooled_bn_stats.py --profile paper --data-root ~/data --dry-run"):
        ("test", "tests/test_bench_cli.py::test_the_paper_profile_dry_run_reads_the_data_root_and_prices_the_runs"),
    ("building-the-docs.md", "make docs"): ("test", "tests/test_docs.py::test_docs_build_with_warnings_as_errors"),
    ("calibration.md", "bnfl run bench-calib-proxies --profile quick --out runs"):
        ("skip", "about a minute of training; the calibration table's logic is in tests/test_calibration.py"),
    ("diagnose.md", "bnfl diagnose --config examples/fedtan_digits.toml"): RUN,
    ("diagnose.md", "import torch"): RUN,
    ("distributed.md", "BNFL_DIST_TIMEOUT=120 torchrun --nproc-per-node 3 -m bnfl train"):
        ("test", "tests/test_fl_distributed.py::test_the_timeout_is_30_s_or_bnfl_dist_timeout"),
    ("distributed.md", "torchrun --nproc-per-node 3 -m bnfl train"):
        ("test", "tests/test_fl_distributed.py::test_three_ranks_equal_the_simulator"),
    ("distributed.md", "torchrun --nnodes 2 --nproc-per-node 4 --node-rank 0"): ("skip", "needs two machines"),
    ("distributed.md", "torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d"): ("skip", "needs two machines"),
    ("distributed.md", "torchrun --nproc-per-node 3 -m bnfl.train.cross_silo --config run.toml"):
        ("test", "tests/test_fl_cross_silo.py::test_three_silos_equal_the_simulator_on_their_union"),
    ("distributed.md", "from bnfl.train.cross_silo import build_cross_silo, load_silo"):
        ("test", "tests/test_fl_cross_silo.py::test_three_silos_equal_the_simulator_on_their_union"),
    ("engines.md", "import numpy as np"): ("test", "tests/test_fl_run_state.py"),
    ("engines.md", "PYTHONPATH=. bash scripts/gpu_check.sh"): ("skip", "needs an NVIDIA GPU with a CUDA PyTorch"),
    ("flower.md", 'pip install "torch==2.13.0" -e ".[flower]"'): ("skip", "installs packages"),
    ("flower.md", "bnfl train --config examples/flower_app/bnfl_app/run.toml --engine flower"):
        ("test", "tests/test_fl_flower.py::test_flower_run_equals_the_simulator"),
    ("flower.md", "from bnfl.train.config import setup_from_config"):
        ("test", "tests/test_fl_flower.py::test_flower_run_equals_the_simulator"),
    ("getting-started.md", "make demo"): ("skip", "creates the environment these tests run in (timed by hand)"),
    ("getting-started.md", "make run"): ("skip", "about 90 min and 16 min (make test is this suite)"),
    ("getting-started.md", "bnfl demo"): RUN,
    ("getting-started.md", "python3 -m venv .venv"): ("skip", "needs a CUDA driver and the network"),
    ("getting-started.md", "import torch"):
        ("test", "tests/test_docs.py::test_getting_started_snippets_run_and_fedtan_matches_centralized"),
    ("getting-started.md", "central = nn.functional.cross_entropy(model(torch.cat(xs)),"):
        ("test", "tests/test_docs.py::test_getting_started_snippets_run_and_fedtan_matches_centralized"),
    ("gpu.md", "$ bnfl run hbn-tab1 --profile paper --data-root ~/data --device cuda --dry-run"):
        ("skip", "needs a GPU and the paper data"),
    ("gpu.md", "$ bnfl run hbn-tab1 --profile paper --data-root ~/data --device cuda --out runs/"):
        ("skip", "needs a GPU and the paper data"),
    ("jupyterlab.md", "make lab"): ("skip", "starts a server that waits for a browser"),
    ("own-fix.md", "import torch"): ("test", "tests/test_own_fix.py::test_the_user_pieces_are_what_the_issue_asks_for"),
    ("own-fix.md", "import math"): ("test", "tests/test_own_fix.py::test_the_median_is_what_the_server_computes"),
    ("own-fix.md", "export PYTHONPATH=$PWD"): ("test", "tests/test_own_fix.py::test_three_torchrun_ranks_equal_the_simulator"),
    ("own-fix.md", "from bnfl import fl"): ("test", "tests/test_own_fix.py::test_bnfl_train_simulator_is_the_python_run"),
    ("own-fix.md", "from bnfl import data, models"):
        ("test", "tests/test_own_fix.py::test_the_named_pieces_and_the_round_hook"),
    ("own-fix.md", "from torch import nn"):
        ("test", "tests/test_own_fix.py::test_a_layer_of_your_own_is_batched_and_equals_the_sequential_engine"),
    ("recipes.md", "python examples/recipes/flower_strategy.py --rounds 3"):
        ("test", "tests/test_recipes.py::test_flower_strategy_sends_and_averages_only_non_bn_state"),
    ("runs.md", "cfg=examples/fedtan_digits.toml"): RUN,
    ("runs.md", "import bnfl"): RUN,
    ("runs.md", "bnfl train --config examples/fedbn_domains.toml --out runs/fedbn --quiet"): RUN,
    ("which-fix.md", "bnfl diagnose --config examples/fedtan_digits.toml"): RUN,
    ("README.md", "make demo"): ("skip", "creates the environment these tests run in (timed by hand)"),
    ("README.md", "make run"): ("skip", "about 90 min and 16 min (make test is this suite)"),
    ("README.md", "bnfl demo"): ("same", "getting-started.md"),
    ("README.md", "python3 -m venv .venv"): ("skip", "needs a CUDA driver and the network"),
    ("README.md", "make docs"): ("test", "tests/test_docs.py::test_docs_build_with_warnings_as_errors"),
}

#: Lines of RUN blocks left out, with why.
NOT_HERE = {"make lab": "starts a server that waits for a browser (tests/test_notebooks.py runs the notebooks)"}


def _blocks(page: Path) -> list[tuple[str, str, str]]:
    """``(language, first command line, text)`` of every fenced block of ``page`` in a run language."""
    out = []
    for m in re.finditer(r"^```(\w+)[^\n]*\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M):
        lang, body = m.group(1), m.group(2)
        if lang in LANGS:
            lines = [x for x in body.splitlines() if x.strip() and not x.strip().startswith("#")]
            out.append((lang, lines[0].strip() if lines else "", body))
    return out


def _entry(page: Path, first: str) -> tuple[tuple[str, str], object] | None:
    matches = [(k, v) for k, v in BLOCKS.items() if k[0] == page.name and first.startswith(k[1])]
    return max(matches, key=lambda kv: len(kv[0][1])) if matches else None


def test_every_block_on_the_pages_is_accounted_for() -> None:
    seen, missing = set(), []
    for page in PAGES:
        for _, first, _ in _blocks(page):
            hit = _entry(page, first)
            if hit is None:
                missing.append(f"{page.name}: {first}")
            else:
                seen.add(hit[0])
    assert not missing, f"blocks with no entry in BLOCKS: {missing}"
    assert not set(BLOCKS) - seen, f"entries whose block left the page: {sorted(set(BLOCKS) - seen)}"
    counts = {kind: sum(1 for v in BLOCKS.values() if (v if v == RUN else v[0]) == kind)  # type: ignore[index]
              for kind in (RUN, "test", "same", "skip")}
    print(f"page blocks: {counts[RUN]} run here as written, {counts['test']} by other named tests, "
          f"{counts['same']} the same text as a block run here, {counts['skip']} skipped with a reason")


def test_every_named_test_exists() -> None:
    for v in BLOCKS.values():
        if isinstance(v, tuple) and v[0] == "test":
            path, _, name = v[1].partition("::")
            assert (ROOT / path).is_file(), v
            if name:
                assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), v


def test_a_block_the_same_as_another_is_the_same_text() -> None:
    for (page, first), v in BLOCKS.items():
        if isinstance(v, tuple) and v[0] == "same":
            mine = next(b for _, f, b in _blocks(ROOT / page if page == "README.md" else ROOT / "docs" / page)
                        if f.startswith(first))
            theirs = next(b for _, f, b in _blocks(ROOT / "docs" / v[1]) if f.startswith(first))
            assert mine == theirs, (page, first)


def _run_pages() -> list[str]:
    return sorted({p for (p, _), v in BLOCKS.items() if v == RUN})


@pytest.mark.parametrize("page", _run_pages())
def test_the_page_runs_its_blocks_as_written(page: str, tmp_path: Path) -> None:
    for name in ("examples", "figures"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = 0
    for lang, first, body in _blocks(ROOT / "docs" / page):
        hit = _entry(ROOT / "docs" / page, first)
        if hit is None or hit[1] != RUN:
            continue
        lines = [x for x in body.splitlines() if x.split("#")[0].strip() not in NOT_HERE]
        text = "\n".join(lines) + "\n"
        argv = (["bash", "-e", "-c", text] if lang in ("bash", "sh") else [sys.executable, "-c", text])
        res = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"{page}: the block starting {first!r} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        assert "Traceback" not in res.stderr, res.stderr[-3000:]
        ran += 1
    assert ran == sum(1 for (p, _), v in BLOCKS.items() if p == page and v == RUN)


@pytest.mark.parametrize("key", [k for k, v in BLOCKS.items() if isinstance(v, tuple) and v[0] == "skip"],
                         ids=lambda k: f"{k[0]}:{k[1][:40]}")
def test_blocks_that_cannot_run_here_say_why(key: tuple[str, str]) -> None:
    pytest.skip(f"{key[0]}: `{key[1]}`: {BLOCKS[key][1]}")  # type: ignore[index]
