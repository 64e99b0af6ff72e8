"""Issue 26: the coupled first step and the momentum modes are the algorithm's, the backends supply
only the exchange; ``bnfl.fl`` (the engine) never imports the Method table nor the run layer.

* the backends read no trait that names a method family (``first_step``, ``momentum_mode``) and
  compare no mode string (read with ``ast``);
* an ordinary user algorithm that returns FedTAN's :class:`~bnfl.fl.CoupledFirstStep` is FedTAN,
  and the step runs with the exchange the backend hands it;
* momentum kept by an algorithm's own hooks is FixBN-star's, and a :class:`~bnfl.fl.MomentumPolicy`
  equals the run's ``momentum_mode``, bitwise;
* Flower's exchange refuses, naming the way out; a rank without participants joins the step's
  exchanges in the order the step makes them.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import fl

ROOT = Path(__file__).resolve().parents[1]
FL = ROOT / "bnfl" / "fl"
#: the modules that run an algorithm (issue 26's backends)
BACKENDS = ["engine.py", "_local.py", "_evaluate.py", "batched.py", "batched_sgd.py", "batched_together.py",
            "lockstep.py", "distributed.py", "../train/cross_silo.py", "flower.py", "flower_client.py", "flower_setup.py",
            "_flower_records.py", "_checkpoint.py", "clients.py", "_client_work.py"]
#: traits of the coupled-step and momentum families, and the mode strings they were spelled with
TRAITS = {"first_step", "momentum_mode"}
MODES = {"fedtan", "stats", "local", "global", "reset"}


def _trait_reads(path: Path) -> list[str]:
    """``file:line`` of every read of a trait in :data:`TRAITS` and every comparison with a mode string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in TRAITS:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Compare):
            for c in [node.left, *node.comparators]:
                vals = [c] if isinstance(c, ast.Constant) else list(getattr(c, "elts", []))
                if any(isinstance(v, ast.Constant) and v.value in MODES for v in vals):
                    found.append(f"{path.name}:{node.lineno} compares a mode string")
    return found


def test_no_backend_reads_a_coupled_step_or_momentum_trait():
    assert all((FL / f).exists() for f in BACKENDS)
    assert [hit for f in BACKENDS for hit in _trait_reads(FL / f)] == []


def test_the_trait_scan_finds_what_it_looks_for(tmp_path):
    """The scan above can fail: it sees the branches this issue removed."""
    p = tmp_path / "old.py"
    p.write_text("if alg.first_step(r) == 'fedtan':\n    pass\nif sim.momentum_mode in ('local', 'global'):\n    pass\n")
    assert len(_trait_reads(p)) == 4  # two reads, two comparisons


# -- issue 37: algorithms describe their round (RoundPlan), backends obey ------------------------------
#: the traits a round's plan replaces (``communicates``: an empty plan; ``centralized``: a partition
#: transform at build time; ``frozen_stats``: the plan's ``freeze_bn``; HBN's ``alpha_sharing``: the
#: plan's ``outside_messages``); only the algorithms read them
PLAN_TRAITS = {"centralized", "communicates", "frozen_stats", "alpha_sharing"}
#: modules of bnfl/fl that run no round, and why their strings may spell a method id
NOT_BACKENDS = {
    "_volume.py": "the volume formulas, keyed by the Method table's communication schemes",
    "coupled.py": "the coupled step's own aggregate modes ('fedtan', 'stats')",
}


def _method_ids() -> set[str]:
    """Every method id of the Method table and every algorithm name."""
    from bnfl import methods

    return set(methods.METHODS.available()) | set(fl.ALGORITHMS.available())


def _plan_trait_reads(path: Path, ids: set[str]) -> list[str]:
    """``file:line`` of every read of a :data:`PLAN_TRAITS` attribute (also by ``getattr``/``hasattr``)
    and every string constant that is a method id (docstrings aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PLAN_TRAITS:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in PLAN_TRAITS):
            found.append(f"{path.name}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ids
              and id(node) not in docs):
            found.append(f"{path.name}:{node.lineno} names method {node.value!r}")
    return found


def _backend_modules() -> list[Path]:
    """Every module of bnfl/fl that runs a round: all but the algorithms and :data:`NOT_BACKENDS`; and
    the run layer's cross-silo runner (it runs the rounds of its silos)."""
    return [f for f in sorted(FL.glob("*.py")) if f.name not in NOT_BACKENDS] + [FL.parent / "train" / "cross_silo.py"]


def test_no_backend_reads_a_method_trait_or_names_a_method():
    backends = _backend_modules()
    assert {f.name for f in backends} >= {Path(b).name for b in BACKENDS}
    assert all((FL / f).exists() for f in NOT_BACKENDS)
    ids = _method_ids()
    assert {"fedavg+bn", "fedtan", "centralized", "hbn", "fixbn"} <= ids
    assert [hit for f in backends for hit in _plan_trait_reads(f, ids)] == []


# -- issue 37: the backends implement one small interface, none subclasses another ---------------------
#: the interface every backend implements (a base it may name: its default methods), and the
#: pieces of state every engine shares (mixins, never a backend)
INTERFACE = {"Clients", "Protocol"}


def _classes(root: Path) -> dict[str, list[str]]:
    """``{"file:Class": [base names]}`` of every class defined in the modules under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases]
                out[f"{path.relative_to(root)}:{node.name}"] = bases
    return out


def _backend_subclasses(root: Path) -> list[str]:
    """Classes under ``root`` with the Simulation or a backend among their bases. A backend is the
    Simulation, a class that implements the :class:`~bnfl.fl.clients.Clients` interface, or (the
    code before issue 37) any class that subclasses one of them."""
    classes = _classes(root)
    backends = {"Simulation"} | {k.split(":")[1] for k, bases in classes.items() if "Clients" in bases}
    while True:  # a subclass of a backend is a backend (DistributedSimulation -> CrossSiloSimulation)
        more = {k.split(":")[1] for k, bases in classes.items() if backends & set(bases)} - backends
        if not more:
            break
        backends |= more
    return sorted(f"{k}({', '.join(b for b in bases if b in backends)})" for k, bases in classes.items()
                  if (backends - INTERFACE) & set(bases))


def test_no_class_subclasses_the_simulation_or_another_backend():
    """The engine is one round over a :class:`~bnfl.fl.clients.Clients` it is given: sequential,
    batched, torch.distributed ranks and Flower implement it, none subclasses another or the
    Simulation (before issue 37: DistributedSimulation, CrossSiloSimulation, Flower's _ServerSide
    and _ClientSide did)."""
    from bnfl.fl.batched import BatchedClients
    from bnfl.fl.clients import Clients, Sequential
    from bnfl.fl.distributed import RankClients
    from bnfl.fl.flower import FlowerClients

    assert _backend_subclasses(FL) == []
    for backend in (Sequential, BatchedClients, RankClients, FlowerClients):  # the four implementations
        assert [b.__name__ for b in backend.__bases__] == ["Clients"], backend
        assert all(callable(getattr(backend, m)) for m in ("train", "exchange", "request", "accuracies"))
    assert Clients.train is not Sequential.train and Clients.train is not RankClients.train


def _names_simulation(path: Path) -> list[int]:
    """Lines of ``path`` that name the Simulation (an import, a base, a call)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted({n.lineno for n in ast.walk(tree)
                   if (isinstance(n, ast.Name) and n.id == "Simulation")
                   or (isinstance(n, ast.alias) and n.name == "Simulation")
                   or (isinstance(n, ast.Attribute) and n.attr == "Simulation")})


def test_a_flower_node_builds_its_client_runner_not_a_simulation(tmp_path):
    """The ClientApp's module never names the Simulation (ef98f48's built one per message:
    ``_ClientSide(Simulation)``); its ClientRunner shares the one-client code with the Simulation."""
    from bnfl.fl._client_work import ClientWork
    from bnfl.fl.engine import Simulation
    from bnfl.fl.flower_client import ClientRunner

    assert _names_simulation(FL / "flower_client.py") == []
    assert not issubclass(ClientRunner, Simulation) and issubclass(ClientRunner, ClientWork)
    assert Simulation.client_round is ClientRunner.client_round and Simulation.keep_client is ClientRunner.keep_client
    old = tmp_path / "flower_client.py"
    old.write_text("from bnfl.fl.engine import Simulation\nclass _ClientSide(Simulation):\n    pass\n")
    assert _names_simulation(old) == [1, 2]


def test_the_subclass_scan_finds_what_it_looks_for(tmp_path):
    """The scan above fails on the classes bnfl ef98f48 had (four subclasses of the Simulation)."""
    (tmp_path / "engine.py").write_text("class Simulation(CheckpointMixin):\n    pass\n")
    (tmp_path / "distributed.py").write_text("class DistributedSimulation(Simulation):\n    pass\n")
    (tmp_path / "cross_silo.py").write_text("class CrossSiloSimulation(DistributedSimulation):\n    pass\n")
    (tmp_path / "flower.py").write_text("class _ServerSide(engine.Simulation):\n    pass\n"
                                        "class Mine(FlowerClients):\n    pass\n"
                                        "class FlowerClients(Clients):\n    pass\n")
    assert _backend_subclasses(tmp_path) == [
        "cross_silo.py:CrossSiloSimulation(DistributedSimulation)", "distributed.py:DistributedSimulation(Simulation)",
        "flower.py:Mine(FlowerClients)", "flower.py:_ServerSide(Simulation)"]


def test_the_plan_trait_scan_finds_what_it_looks_for(tmp_path):
    """The scan above fails on the branches bnfl 4f21679 had (13 sites: engine.py, batched.py,
    distributed.py, cross_silo.py, flower_setup.py)."""
    p = tmp_path / "old.py"
    p.write_text("if alg.centralized or not alg.communicates:\n    frozen = alg.frozen_stats(r)\n"
                 "if getattr(alg, 'alpha_sharing', 'local') != 'local' or alg.name == 'hbn':\n    pass\n"
                 "def f():\n    '''A docstring naming fedtan is no read.'''\n")
    assert len(_plan_trait_reads(p, _method_ids())) == 5


def test_a_backend_refuses_from_the_plan_never_from_the_class():
    """A user's algorithm that keeps the default traits but plans what Flower cannot carry is
    refused from its plan; the paper's HBN travels, its averaged-alpha ablation does not."""
    from bnfl.fl.flower_setup import FlowerSetup

    class Outside(fl.FedAvg):
        def round_plan(self, r):
            return dataclasses.replace(super().round_plan(r), outside_messages="my clients read the server's state")

    class Silent(fl.FedAvg):
        def round_plan(self, r):
            return fl.RoundPlan(download=False, upload=False) if r == 2 else super().round_plan(r)

    cfg = _cfg(checkpoint_dir=None)
    with pytest.raises(ValueError, match="my clients read the server's state"):
        FlowerSetup(model=_model(), data=_data(), algorithm=Outside(), config=cfg)
    with pytest.raises(ValueError, match="round 2 sends no model"):
        FlowerSetup(model=_model(), data=_data(), algorithm=Silent(), config=cfg)
    with pytest.raises(ValueError, match="alpha_sharing='local'"):
        FlowerSetup(model=_model(), data=_data(), algorithm=fl.HBN(alpha_sharing="averaged"), config=cfg)
    FlowerSetup(model=_model(), data=_data(), algorithm=fl.HBN(), config=cfg)  # the paper's HBN travels


def test_an_empty_plan_sends_nothing_and_pooling_is_a_partition():
    silent = _run(fl.SingleNet())
    assert fl.SingleNet().round_plan(1).empty and silent.channel.bytes_up == silent.channel.bytes_down == 0
    pooled = fl.Simulation(_model(), _data(), fl.Centralized(), _cfg())
    assert pooled.num_clients == 1 and pooled.batch_size == 5 * 4
    assert np.array_equal(pooled.client_indices[0], np.concatenate(_data().clients))


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (function level and TYPE_CHECKING included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add(node.module or "")
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_the_engine_never_imports_the_method_table_nor_the_run_layer():
    """``bnfl.fl`` is the engine: no module of it imports the Method table (:mod:`bnfl.methods`: a
    method id is looked up once, by the builder in :mod:`bnfl.train`) nor the run layer above it;
    ``bnfl.fl``'s lazy names (``fl.run``, ``fl.build``, ...) are handed on by name, not imported."""
    files = sorted(FL.rglob("*.py"))
    assert len(files) > 30
    bad = {str(f.relative_to(ROOT)): sorted(m for m in _imported(f) if m in ("bnfl.methods", "bnfl.train") or
                                            m.startswith(("bnfl.methods.", "bnfl.train.")))
           for f in files}
    assert {f: m for f, m in bad.items() if m} == {}


# -- the coupled first step: the algorithm's, with the backend's exchange ---------------------------
def _data(k=4, n=12, dim=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(k * n, dim, generator=g, dtype=torch.float64)
    y = torch.arange(k * n) % classes
    x = x + y[:, None].double()
    return fl.FederatedData(x, y, x[:20], y[:20], [np.arange(i * n, (i + 1) * n) for i in range(k)])


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 6), nn.BatchNorm1d(6), nn.ReLU(),
                         nn.Linear(6, 3))


def _cfg(**kw):
    base = dict(rounds=3, local_steps=2, batch_size=5, lr=0.1, momentum=0.9, participation=0.75, progress=False,
                dtype="float64", batched="off")
    return fl.TrainConfig(**{**base, **kw})


def _run(alg, **kw):
    sim = fl.Simulation(_model(), _data(), alg, _cfg(**kw))
    sim.run()
    return sim


def _same(a: fl.Simulation, b: fl.Simulation) -> None:
    assert a.global_state.keys() == b.global_state.keys()
    assert all(torch.equal(a.global_state[k], b.global_state[k]) for k in a.global_state)
    assert a.history.without_time() == b.history.without_time()


class Counted(fl.CoupledFirstStep):
    """FedTAN's step that records the exchanges the backend hands it."""

    calls: list[tuple[str, str]]

    def run(self, model, batches, loss_fn, weights, *, exchange):
        def counted(layer, kind, parts, w):
            self.calls.append((layer, kind))
            return exchange(layer, kind, parts, w)

        return super().run(model, batches, loss_fn, weights, exchange=counted)


class MyCoupled(fl.FedAvg):
    """A user's FedTAN: FedAvg whose rounds start with a coupled step it owns (no engine flag)."""

    name = "my-coupled"

    def __init__(self):
        self.step = Counted("fedtan")
        object.__setattr__(self.step, "calls", [])

    def coupled_step(self, r):
        return self.step


@pytest.mark.parametrize("batched", ["off", "on"])
def test_a_user_algorithm_with_fedtans_coupled_step_is_fedtan(batched):
    mine, ref = _run(MyCoupled(), batched=batched), _run(fl.FedTAN(), batched=batched)
    if batched == "off":
        _same(mine, ref)  # bitwise: the same step, the same channel
        calls = mine.algorithm.step.calls
        assert calls and calls[: len(fl.CoupledFirstStep("fedtan").exchanges(mine.model))] == [
            (layer, kind) for layer, kind, _ in fl.CoupledFirstStep("fedtan").exchanges(mine.model)]
    else:  # the batched engine runs it stacked (its run() is not called): equal to rounding
        assert mine.algorithm.step.calls == []
        for k, v in ref.global_state.items():
            torch.testing.assert_close(mine.global_state[k], v, rtol=0, atol=1e-12)
    assert mine.channel.exchanges == ref.channel.exchanges


def test_a_steps_exchanges_are_the_order_the_step_makes_them():
    """A torch.distributed rank without participants joins ``step.exchanges(model)`` with zeros:
    the same layers, kinds and widths, in the order the simulator's channel sees them."""
    for aggregate in ("fedtan", "stats"):
        sim = _run(fl.FedTAN() if aggregate == "fedtan" else fl.FedAvgAlg2(), rounds=1)
        step = fl.CoupledFirstStep(aggregate)
        seen = [e.tag for e in sim.channel.exchanges if e.kind == "allreduce"]
        assert seen == [f"{layer}.{kind}" for layer, kind, _ in step.exchanges(sim.model)]
        widths = {n: m.num_features for n, m in sim.model.named_modules() if isinstance(m, nn.BatchNorm1d)}
        assert [w for _, _, w in step.exchanges(sim.model)] == [
            widths[layer] * (2 if kind == "stat-grads" else 1) for layer, kind, _ in step.exchanges(sim.model)]
    with pytest.raises(ValueError, match="'fedtan'.*'stats'"):
        fl.CoupledFirstStep("none")


def test_flowers_exchange_refuses_naming_the_round_and_the_way_out():
    from bnfl.fl.flower_setup import flower_exchange

    with pytest.raises(ValueError, match=r"round 3 .*3L\+1 = 7 .*torch\.distributed"):
        flower_exchange(_model(), "my-coupled", 3)


# -- momentum: the algorithm's policy --------------------------------------------------------------
class OwnMomentum(fl.FedAvg):
    """A user's FixBN-star momentum written with the two client hooks only."""

    def initial_momentum(self, client):
        return client.state.get("mine.momentum")

    def final_momentum(self, client, momentum):
        client.state["mine.momentum"] = momentum()
        return {}


@pytest.mark.parametrize("batched", ["off", "on"])
def test_momentum_kept_by_a_users_hooks_equals_the_local_mode(batched):
    _same(_run(OwnMomentum(), batched=batched), _run(fl.FedAvg(), momentum_mode="local", batched=batched))


@pytest.mark.parametrize("mode", ["local", "global"])
def test_a_momentum_policy_equals_the_runs_momentum_mode(mode):
    alg = fl.FedAvg()
    alg.momentum_policy = fl.MomentumPolicy(mode)
    mine, ref = _run(alg), _run(fl.FedAvg(), momentum_mode=mode)
    _same(mine, ref)
    assert _run(fl.FedAvg()).history.without_time() != ref.history.without_time()  # the mode matters here
    if mode == "global":  # the average lives in the server's state, the buffers travel in the messages
        assert set(mine.server.state["optimizer.momentum"]) == {n for n, _ in mine.model.named_parameters()}
        assert mine.channel.bytes_up > _run(fl.FedAvg()).channel.bytes_up
    else:
        assert all("optimizer.momentum" in s for s in mine.client_algorithm.values())
    with pytest.raises(ValueError, match="momentum mode"):
        fl.MomentumPolicy("nesterov")
