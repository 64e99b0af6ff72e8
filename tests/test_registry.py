"""bnfl.registry.Registry and the registries built on it: names kept, import strings, entry points."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from bnfl.registry import Registry, import_object

PLUGIN = '''
import torch
from torch import nn
from bnfl.data import Split
from bnfl.fl import Algorithm
from bnfl.registry import plugin


class Mine(Algorithm):
    name = "mine"


@plugin("model")
def net(*, input_shape, num_classes, norm="bn"):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(input_shape).prod()), num_classes))


@plugin("data set")
def blobs(*, n=12):
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(n) % 2
    return Split(x, y, x.clone(), y.clone(), classes=("a", "b"), name="blobs")


def unmarked(*, n=12):
    return blobs(n=n)


@plugin("partition kind")
def halves(labels, num_clients, seed, *, shift=0):
    import numpy as np
    return [a + shift * 0 for a in np.array_split(np.arange(len(labels)), num_clients)]
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package ``regplug`` outside bnfl, with an installed-package record declaring entry points
    of the groups bnfl.methods, bnfl.models and bnfl.datasets (what ``pip install`` writes)."""
    (tmp_path / "regplug").mkdir()
    (tmp_path / "regplug" / "__init__.py").write_text(PLUGIN)
    (tmp_path / "regplug" / "broken.py").write_text("import no_such_module_anywhere\n")
    info = tmp_path / "regplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: regplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[bnfl.methods]\nmine-ep = regplug:Mine\n\n[bnfl.models]\nnet_ep = regplug:net\n\n"
        "[bnfl.datasets]\nblobs_ep = regplug:blobs\nbroken_ep = regplug.broken:x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = _registries()
    yield tmp_path
    for reg, entries, plugins in saved:  # what the tests registered or resolved is forgotten
        reg._entries.clear()
        reg._entries.update(entries)
        reg._plugins.clear()
        reg._plugins.update(plugins)
    for name in [m for m in sys.modules if m == "regplug" or m.startswith("regplug.")]:
        del sys.modules[name]


def _registries() -> list[tuple]:
    from bnfl import data, models
    from bnfl.experiments.registry import EXPERIMENTS
    from bnfl.fl import ALGORITHMS
    from bnfl.methods import METHODS
    from bnfl.nn import NORM_KINDS
    from bnfl.train.config import PARTITIONS

    regs = [METHODS, ALGORITHMS, models.MODELS, data.DATASETS, NORM_KINDS, PARTITIONS, EXPERIMENTS]
    return [(r, dict(r._entries), dict(r._plugins)) for r in regs]


def test_register_by_decorator_or_call_and_unknown_names_are_listed():
    reg: Registry = Registry("widget", sort=True)

    @reg.register("b")
    def b() -> int:
        return 2

    @reg.register
    def a() -> int:
        return 1

    assert reg.register("c", 3) == 3
    assert reg.available() == ["a", "b", "c"] and list(reg) == ["b", "a", "c"]
    assert reg.lookup("a")() == 1 and reg["c"] == 3 and "b" in reg and len(reg) == 3
    with pytest.raises(ValueError, match="unknown widget 'd'; valid names: a, b, c"):
        reg.lookup("d")
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        reg.register("a", 0)
    reg.register("a", 0, replace=True)
    assert reg["a"] == 0
    with pytest.raises(ValueError, match="without ':'"):
        reg.register("x:y", 1)
    lower: Registry = Registry("thing", lower=True)
    lower.register("ab", 1)
    assert lower.lookup("AB") == 1
    with pytest.raises(ValueError, match="lower case"):
        lower.register("Ab", 2)


def test_import_strings_and_their_errors_name_the_module(plugin):
    assert import_object("regplug:Mine").name == "mine"
    with pytest.raises(ValueError, match=r"^method 'nope\.mod:X': cannot import module 'nope\.mod' "
                                         r"\(ModuleNotFoundError: No module named 'nope'\)$"):
        import_object("nope.mod:X", what="method")
    with pytest.raises(ValueError, match=r"cannot import module 'regplug\.broken' \(ModuleNotFoundError: "
                                         r"No module named 'no_such_module_anywhere'\)"):
        import_object("regplug.broken:x")
    with pytest.raises(ValueError, match="module 'regplug' has no attribute 'Nope'"):
        import_object("regplug:Nope")
    with pytest.raises(ValueError, match="package.module:Name"):
        import_object("regplug:")


def test_every_registry_takes_import_strings(plugin):
    from bnfl import data, models
    from bnfl.fl import make_algorithm
    from bnfl.methods import get
    from bnfl.train.config import PARTITIONS

    m = get("regplug:Mine")
    assert m.id == "regplug:Mine" and m.norm == "bn" and m.algorithm().name == "mine"
    assert type(make_algorithm("regplug:Mine")).__name__ == "Mine"
    assert get("regplug:Mine") is m  # resolved once
    assert isinstance(models.build_for("regplug:net", (4,), num_classes=2)[1], nn.Linear)
    assert data.load("regplug:blobs", n=6).x_train.shape == (6, 4)
    kind = PARTITIONS.lookup("regplug:halves")
    assert kind.options == ("shift",) and [len(p) for p in kind.split([0] * 5, 2, 0)] == [3, 2]
    with pytest.raises(ValueError, match="not a subclass of bnfl.fl.Algorithm"):
        make_algorithm("regplug:net")
    with pytest.raises(ValueError, match=r"data set 'regplug:net' is function regplug.net \(marked for model\), not a "
                                         r"function marked @plugin\('data set'\)"):
        data.load("regplug:net", input_shape=(1,), num_classes=1)
    with pytest.raises(ValueError, match=r"data set 'regplug:unmarked' is function regplug.unmarked, not a function "
                                         r"marked @plugin\('data set'\) .*; refused, nothing was called"):
        data.load("regplug:unmarked")


def test_entry_points_of_installed_packages_are_found_by_name(plugin):
    from bnfl import data, models
    from bnfl.methods import METHODS, get

    assert "mine-ep" in METHODS.available() and "net_ep" in models.available()
    assert "blobs_ep" in data.DATASETS.available() and "blobs_ep" not in data.DATASETS  # listed, not registered
    assert get("mine-ep").algorithm_class.__name__ == "Mine"
    assert isinstance(models.build_for("net_ep", (4,), num_classes=3)[1], nn.Linear)
    assert data.load("blobs_ep").num_classes == 2
    with pytest.raises(ValueError, match=r"unknown method 'mine-ex'; valid ids: centralized, .*mine-ep"):
        get("mine-ex")
    with pytest.raises(ValueError, match=r"data set 'broken_ep' \(entry point 'regplug.broken:x' of group "
                                         r"'bnfl.datasets'\): cannot load it \(ModuleNotFoundError"):
        data.load("broken_ep")


def test_run_config_and_cli_take_import_strings(plugin, capsys):
    from bnfl.cli import main
    from bnfl.train.config import RunConfig, build

    cfg = RunConfig(method="regplug:Mine", model={"name": "regplug:net"}, data={"name": "regplug:blobs", "n": 16},
                    partition={"kind": "regplug:halves", "num_clients": 2}, rounds=1,
                    train={"local_steps": 1, "batch_size": 4, "progress": False})
    sim = build(cfg)
    assert type(sim.algorithm).__name__ == "Mine" and [len(c) for c in sim.data.clients] == [8, 8]
    assert len(sim.run().rows) == 1
    assert main(["train", "--method", "regplug:Nope", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bnfl train: error: method 'regplug:Nope': module 'regplug' has no attribute 'Nope'"]
    assert main(["train", "--data", "nope.data:load", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bnfl train: error: data.name: data set 'nope.data:load': cannot import module 'nope.data' "
                   "(ModuleNotFoundError: No module named 'nope')"]
    with pytest.raises(ValueError, match="partition.kind: unknown 'halvez'; valid: iid, classes_per_client"):
        RunConfig(partition={"kind": "halvez"})


def test_the_builtin_registries_keep_their_names_and_order():
    from bnfl import data, models
    from bnfl.fl import ALGORITHMS
    from bnfl.methods import METHODS
    from bnfl.nn import NORM_KINDS, make_norm
    from bnfl.train.config import PARTITIONS

    assert list(NORM_KINDS) == ["bn", "fixbn", "frozen_bn", "static_bn", "hbn", "fbn", "gn", "gn_ws", "ln", "in",
                                "fedfn", "ws", "none", "identity"]
    assert {k: v.options for k, v in PARTITIONS.items()} == {
        "iid": (), "classes_per_client": ("k", "balance"), "dirichlet": ("phi", "min_size", "max_tries"),
        "shards": ("shards_per_client",), "by_domain": ("shards", "clients_per_domain")}
    assert list(METHODS)[:3] == ["centralized", "fedtan", "fedtan2"] and len(METHODS) == 32
    assert ALGORITHMS.available() == sorted(ALGORITHMS) and len(ALGORITHMS) == 20
    assert models.available() == sorted(models.MODELS) and list(data.DATASETS)[0] == "digits"
    assert type(make_norm("BN", 4, dim=1)) is nn.BatchNorm1d and type(make_norm("fixbn", 4, dim=2)) is nn.BatchNorm2d
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\]"):
        make_norm("frozen_bn", 4, momentum=2.0)
    assert make_norm("static_bn", 3).track_running_stats is False
    torch.manual_seed(0)
    assert make_norm("gn_ws", 4, dim=2, groups=2).num_groups == 2
