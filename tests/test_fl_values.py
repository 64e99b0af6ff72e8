"""Issue 49: a round of values.

* :func:`~bnfl.fl.engine.run_round` takes no callback: the plan and the global state the clients
  start from reach them as arguments of ``Clients.exchange`` and ``Clients.train``;
* no backend reads a private member of its host (read with ``ast``): the members a backend uses
  of the run that holds its clients are public (``steps_this_round``, ``samples_of``,
  ``union_count``, ``work_model``, ...).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from bnfl.fl import clients as clients_module
from bnfl.fl.engine import run_round

ROOT = Path(__file__).resolve().parents[1]
FL = ROOT / "bnfl" / "fl"
#: the run that holds the clients (the host of every backend) and the pieces it is made of
HOST_FILES = ("engine.py", "_client_work.py", "_checkpoint.py", "_evaluate.py", "_local.py")
HOST_CLASSES = {"Simulation", "ClientWork", "CheckpointMixin", "EvaluationMixin", "LocalOptimizerMixin"}


def _host_private_names(files: list[Path]) -> set[str]:
    """The host's private members: methods and ``self._x = ...`` attributes of its classes."""
    names = set()
    for f in files:
        for c in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not (isinstance(c, ast.ClassDef) and c.name in HOST_CLASSES):
                continue
            for n in ast.walk(c):
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = n.name
                elif (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                      and n.value.id == "self"):
                    name = n.attr
                else:
                    continue
                if name.startswith("_") and not name.startswith("__"):
                    names.add(name)
    return names


def _private_reads(path: Path, names: set[str]) -> list[str]:
    """``file:line .name`` of every access to one of ``names`` on anything but ``self``."""
    hits = [(n.lineno, n.attr) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Attribute) and n.attr in names
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]
    return [f"{path.name}:{line} .{attr}" for line, attr in sorted(hits)]


def _backends() -> list[Path]:
    return ([f for f in sorted(FL.glob("*.py")) if f.name not in (*HOST_FILES, "__init__.py")]
            + [ROOT / "bnfl" / "train" / "cross_silo.py"])


def test_no_backend_reads_a_private_member_of_its_host(tmp_path):
    # the scan can fail: it sees a private member read on another object, not on self
    host = tmp_path / "host.py"
    host.write_text("class ClientWork:\n    def __init__(self):\n        self._union = 1\n"
                    "    def _samples(self, ids):\n        return ids\n")
    backend = tmp_path / "backend.py"
    backend.write_text("def f(sim, self):\n    sim._samples(0)\n    self._samples(0)\n    return sim.host._union\n")
    assert _host_private_names([host]) == {"_union", "_samples"}
    assert _private_reads(backend, {"_union", "_samples"}) == ["backend.py:2 ._samples", "backend.py:4 ._union"]

    names = _host_private_names([FL / f for f in HOST_FILES])
    assert {"_optimizer", "_stop", "_eval_model"} <= names  # the host's own privates
    backends = _backends()
    assert {"batched.py", "distributed.py", "flower.py", "lockstep.py", "clients.py"} <= {f.name for f in backends}
    assert [hit for f in backends for hit in _private_reads(f, names)] == []


def test_run_round_takes_no_callback_and_clients_train_receives_the_plan():
    params = inspect.signature(run_round).parameters
    assert list(params) == ["state", "r", "algorithm", "clients", "server", "channel", "participation"]
    assert not any("Callable" in str(p.annotation) for p in params.values())
    for impl in (clients_module.Clients, clients_module.Sequential):
        train = list(inspect.signature(impl.train).parameters)
        assert train[:5] == ["self", "r", "plan", "clients", "received"] and "start" in train and "frozen" not in train
        exchange = inspect.signature(impl.exchange).parameters
        assert {"plan", "start"} <= set(exchange) and "frozen" not in exchange


def test_one_name_per_algorithm_the_method_ids_and_older_spellings_still_read():
    from bnfl.fl.algorithms import ALGORITHMS
    from bnfl.methods import METHODS
    from bnfl.train.accounting import _resolve

    for name, cls in ALGORITHMS.items():
        ids = [m.id for m in METHODS.values() if m.algorithm_name == name]
        assert ids, f"algorithm {name!r} is no method's"
        # its method id itself, or (an algorithm of several norms) the stem of its methods' ids
        assert name in ids or any(i.startswith(f"{name}+") for i in ids), (name, ids)
        assert cls.name == name
    old = {"fedavg-alg2": "fedavg+alg2", "centralized-fixbn": "centralized+fixbn", "decoupled": "decoupled-bn"}
    for was, now in old.items():
        assert ALGORITHMS.lookup(was) is ALGORITHMS[was] is ALGORITHMS[now] and ALGORITHMS.knows(was)
        assert was not in ALGORITHMS.available() and was not in list(ALGORITHMS)
        assert _resolve(was).id == now  # an accounting call of older bnfl


def test_aggregate_returns_the_new_server_state_and_writes_none_into_the_server():
    from types import SimpleNamespace

    import torch

    from bnfl import fl
    from bnfl.fl.algorithms import MomentumPolicy

    sim = fl.build({"method": "fedadam+bn", "rounds": 1, "train": {"local_steps": 1, "progress": False}})
    server, state = sim.server, sim.global_state
    server.state = {}
    uploads = [{k: state[k] + i for k in server.upload_keys} for i in (1, 2)]
    new = sim.algorithm.aggregate(server, state, [0, 1], [0.5, 0.5], uploads)
    assert server.state == {}  # the algorithm's state comes back as a value, with the global state
    assert {"fedadam.m", "fedadam.v"} <= set(new.server_state) and set(new) == set(state)
    # the server's momentum: returned, not written
    ctx = SimpleNamespace(config=SimpleNamespace(momentum=0.9, momentum_mode="global"), state={})
    ups = [{"momentum.w": torch.ones(2)}, {"momentum.w": torch.full((2,), 3.0)}]
    out = MomentumPolicy("global").aggregate(ctx, [0.5, 0.5], ups)
    assert ctx.state == {} and torch.equal(out["optimizer.momentum"]["w"], torch.full((2,), 2.0))
