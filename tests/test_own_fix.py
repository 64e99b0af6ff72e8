"""A user's own algorithm, model and data, by import string, on every engine (docs/own-fix.md).

The page's files (``# file: mypkg/...`` blocks and ``my.toml``) are written into a temporary
folder outside the package and put on ``sys.path`` (and on ``PYTHONPATH`` for the processes the
page's commands start). Then the page runs as a reader would run it. Its ``bnfl train`` command
for the simulator runs in this process; its torchrun command (3 gloo ranks on 127.0.0.1) and its
``--engine flower`` command run as subprocesses, started together, once each. Its Python blocks
run the sequential and batched simulators, register the pieces under names, and add a round hook.
Section 9's layer of its own (cells the docs build runs too) runs on the sequential and the
batched engine (equal to 1e-12 in float64), and without its registration the batched engine
refuses it in the page's one line.

Equality, float64, 2 rounds, 3 clients: the batched engine and the 3 ranks match the simulator's
global state to 1e-12, as test_fl_batched.py and test_fl_distributed.py assert for bnfl's methods
(measured: batched 2.2e-16, the ranks 0.0), and Flower's history rows (losses, accuracies,
counters) equal the simulator's bit for bit, as test_fl_flower.py measured for bnfl's methods.
Each launch has a time limit, and its process group is killed when the limit passes.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "own-fix.md"
LAUNCH_TIMEOUT_S = 240


def _blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block; a ``{code-cell} python`` (run by the docs build too)
    is a Python block."""
    found = re.findall(r"```(\w+|\{code-cell\} python)\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    return [("python" if lang.startswith("{code-cell}") else lang, body) for lang, body in found]


def _files() -> dict[str, str]:
    out = {}
    for _, body in _blocks():
        first, _, rest = body.partition("\n")
        if first.startswith("# file: "):
            out[first[len("# file: "):].strip()] = rest
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _commands() -> list[str]:
    bash = [body for lang, body in _blocks() if lang == "bash"]
    assert len(bash) == 1, "the page has one block of commands"
    return [line.strip() for line in bash[0].splitlines() if line.strip()]


def _argv(line: str, port: int) -> list[str]:
    words = line.split()
    if words[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--master-addr", "127.0.0.1", "--master-port",
                str(port), *words[1:]]
    assert words[0] == "bnfl", line
    return [sys.executable, "-m", "bnfl", *words[1:]]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """Write the page's files, run its commands and Python blocks; return what they left."""
    from bnfl.cli import main

    home = tmp_path_factory.mktemp("user")
    for rel, text in _files().items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    commands = _commands()
    assert commands[0] == "export PYTHONPATH=$PWD"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(home), str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = {}
    for line in commands[1:]:
        if line.startswith("torchrun") or "--engine flower" in line:
            procs[line] = subprocess.Popen(_argv(line, _free_port()), cwd=home, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    old_cwd, old_path = os.getcwd(), list(sys.path)
    saved = _registries()
    os.chdir(home)
    sys.path.insert(0, str(home))
    try:
        for line in commands[1:]:
            if line not in procs:
                assert main(line.split()[1:] + ["--quiet"]) == 0, line
        ns: dict = {}
        for lang, body in _blocks():
            if lang == "python" and not body.startswith("# file: "):
                exec(compile(body, str(PAGE), "exec"), ns)  # noqa: S102
        from bnfl import fl

        fedavg = fl.load_config("my.toml")
        fedavg.method = "fedavg+bn"
        ns["fedavg"] = fl.build(fedavg)
        ns["fedavg"].run()
        bad = home / "bad.toml"
        bad.write_text((home / "my.toml").read_text().replace("mypkg.algos:", "mypkg.algoz:"))
        ns["bad_config"] = str(bad)
        logs = {}
        for line, proc in procs.items():
            try:
                logs[line] = proc.communicate(timeout=LAUNCH_TIMEOUT_S)[0]
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                logs[line] = proc.communicate()[0]
            assert proc.returncode == 0, f"{line} failed ({proc.returncode}):\n{logs[line][-3000:]}"
        yield home, ns
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        os.chdir(old_cwd)
        sys.path[:] = old_path
        _restore(saved)
        for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
            del sys.modules[name]


def _all_registries() -> list:
    from bnfl import data, models
    from bnfl.experiments.registry import EXPERIMENTS
    from bnfl.fl import ALGORITHMS
    from bnfl.methods import METHODS
    from bnfl.nn import NORM_KINDS
    from bnfl.train.config import PARTITIONS

    return [METHODS, ALGORITHMS, models.MODELS, data.DATASETS, NORM_KINDS, PARTITIONS, EXPERIMENTS]


def _registries() -> list[tuple]:
    """The page registers names in bnfl's registries (and a layer in the batched engine's):
    keep them as they were for the other tests."""
    from bnfl.nn import batched_layers

    return [(r, dict(r._entries), dict(r._plugins)) for r in _all_registries()] + [(batched_layers._BATCHED, dict(batched_layers._BATCHED))]


def _restore(saved: list[tuple]) -> None:
    for reg, *kept in saved:
        if isinstance(reg, dict):
            reg.clear()
            reg.update(kept[0])
            continue
        entries, plugins = kept
        reg._entries.clear()
        reg._entries.update(entries)
        reg._plugins.clear()
        reg._plugins.update(plugins)


def _state(folder: Path) -> dict:
    return torch.load(folder / "checkpoint.pt", weights_only=False)["global_state"]


def _max_diff(a: dict, b: dict) -> float:
    assert list(a) == list(b)
    return max(float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a)


def test_the_user_pieces_are_what_the_issue_asks_for(page):
    _, ns = page
    from bnfl.fl import Algorithm
    from bnfl.fl.state import state_groups

    sim = ns["sequential"]
    assert isinstance(sim.algorithm, Algorithm) and type(sim.algorithm).__module__ == "mypkg.algos"
    layers = dict(sim.model.named_modules())
    assert isinstance(layers["norm_a"], nn.BatchNorm1d) and isinstance(layers["norm_b"], nn.BatchNorm1d)
    assert type(layers["bnx"]) is nn.Linear
    groups = state_groups(sim.model)
    assert "bnx.weight" in groups["other"] and "norm_a.running_mean" in groups["bn_stats"]
    assert sim.x_train.dtype == torch.float64 and len(sim.data.clients) == 3
    assert sorted(len(c) for c in sim.data.clients)[0] < sorted(len(c) for c in sim.data.clients)[-1]


def test_the_median_is_what_the_server_computes(page):
    """FedAvg+BN on the same config ends with other BN statistics (and the same keys)."""
    _, ns = page
    med, avg = ns["sequential"].global_state, ns["fedavg"].global_state
    stats = [k for k in med if k.endswith(("running_mean", "running_var"))]
    assert len(stats) == 4
    assert min(float((med[k] - avg[k]).abs().max()) for k in stats) > 1e-4


def test_batched_equals_the_sequential_simulator(page):
    _, ns = page
    assert ns["batched"].history.meta["batched"]["used"] and not ns["sequential"].history.meta["batched"]["used"]
    gap = _max_diff(ns["batched"].global_state, ns["sequential"].global_state)
    print(f"batched vs sequential: {gap:.1e}")
    assert gap < 1e-12


def test_bnfl_train_simulator_is_the_python_run(page):
    home, ns = page
    got = _state(home / "runs" / "simulator")
    for k, v in ns["sequential"].global_state.items():
        assert torch.equal(got[k], v), k


def test_three_torchrun_ranks_equal_the_simulator(page):
    from bnfl.fl.engine import History

    home, _ = page
    gap = _max_diff(_state(home / "runs" / "ranks"), _state(home / "runs" / "simulator"))
    print(f"3 ranks vs simulator: {gap:.1e}")
    assert gap < 1e-12
    ranks, sim = (History.from_json(home / "runs" / d / "history.json") for d in ("ranks", "simulator"))
    assert ranks.meta["engine"] == "torch.distributed" and ranks.meta["world_size"] == 3
    assert ranks.without_time() == sim.without_time()


def test_flower_equals_the_simulator(page):
    from bnfl.fl.engine import History

    home, _ = page
    fl, sim = (History.from_json(home / "runs" / d / "history.json") for d in ("flower", "simulator"))
    assert fl.meta["engine"] == "flower"
    got, want = fl.without_time(), sim.without_time()
    assert len(got) == len(want) == 2 and {"test_loss", "test_acc", "train_loss"} <= set(want[-1])
    assert got == want  # bit for bit


def test_the_named_pieces_and_the_round_hook(page):
    _, ns = page
    assert all("spread_a" in row for row in ns["rows"])
    assert ns["norm_a"] == "norm_a"


def test_a_failing_import_string_is_one_error_line_naming_the_module(page, capsys):
    from bnfl.cli import main

    home, ns = page
    want = re.search(r"`(bnfl train: error: [^`]+)`", PAGE.read_text(encoding="utf-8")).group(1)
    sys.path.insert(0, str(home))
    try:
        assert main(["train", "--config", ns["bad_config"], "--quiet"]) == 2
    finally:
        sys.path.remove(str(home))
        for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
            del sys.modules[name]
    err = capsys.readouterr().err.strip()
    assert err == want


def test_each_python_block_imports_what_it_uses():
    """A reader copies one section's block: every name it reads is a builtin, or imported or
    assigned in that same block (section 6 once used `fl` imported in section 4)."""
    import ast
    import builtins

    for lang, body in _blocks():
        if lang != "python" or body.startswith("# file: "):
            continue
        tree = ast.parse(body)
        defined = set(dir(builtins))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined.add(node.name)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert used <= defined, f"a block of docs/own-fix.md uses {sorted(used - defined)} without importing it:\n{body}"


def test_a_layer_of_your_own_is_batched_and_equals_the_sequential_engine(page):
    from bnfl.fl.state import state_groups
    from bnfl.methods import METHODS
    from bnfl.nn import BATCHED_LAYERS, NORM_KINDS, PER_CLIENT

    _, ns = page
    seq, bat = ns["runs"]["off"], ns["runs"]["on"]
    layer = ns["MixedBatchNorm1d"]
    assert BATCHED_LAYERS.get(layer) == PER_CLIENT and NORM_KINDS.knows("mixed_bn")
    assert METHODS["fedavg+mixed"].norm == "mixed_bn"
    norms = [n for n, m in seq.model.named_modules() if type(m) is layer]
    assert len(norms) == 2 and all(isinstance(m, nn.BatchNorm1d) for m in seq.model.modules() if type(m) is layer)
    assert bat.history.meta["batched"]["used"] and not seq.history.meta["batched"]["used"]
    assert {f"{n}.mix" for n in norms} <= state_groups(seq.model)["local"]
    assert _max_diff(bat.global_state, seq.global_state) == ns["layer_gap"] < 1e-12
    # the layer is really trained: each client's mix moved, differently
    mixes = {c: float(state[f"{norms[0]}.mix"]) for c, state in seq.client_local.items()}
    assert len(mixes) == 3 and len(set(mixes.values())) == 3 and 0.0 not in mixes.values()


def test_an_unregistered_layer_is_refused_by_the_batched_engine_in_the_pages_line(page, monkeypatch):
    from bnfl import fl
    from bnfl.nn import batched_layers

    _, ns = page
    monkeypatch.delitem(batched_layers._BATCHED, ns["MixedBatchNorm1d"])
    want = re.search(r"`ValueError: (batched='on' but this run cannot be batched: [^`]+)`",
                     PAGE.read_text(encoding="utf-8")).group(1)
    cfg = fl.RunConfig.from_dict(ns["cfg"].to_dict())
    cfg.train["batched"] = "on"
    with pytest.raises(ValueError) as err:
        fl.build(cfg).run()
    assert str(err.value) == want
    cfg.train["batched"] = "auto"
    auto = fl.build(cfg)
    auto.run()
    meta = auto.history.meta["batched"]
    assert not meta["used"] and "register_batched" in meta["why"] and "(MixedBatchNorm1d)" in meta["why"]
