"""Issue 49: a method id is looked up once per ``bnfl train``, by the builder.

The config checks that its method exists (:func:`bnfl.methods.check`, which resolves nothing); the
builder (:func:`bnfl.train.builder.resolve`) is the one place that looks it up, and the resolved
:class:`~bnfl.methods.Method` carries its algorithm class, so making the algorithm looks nothing up.
Before this issue a ``bnfl train --config`` looked the method up four times (the config twice,
through ``load_config`` and ``from_dict``; the builder; the algorithm registry)."""

from __future__ import annotations

from collections import Counter

import pytest

from bnfl.cli import main
from bnfl.fl.algorithms import ALGORITHMS
from bnfl.methods import METHODS
from bnfl.registry import Registry


@pytest.fixture
def lookups(monkeypatch):
    """Counts of :meth:`Registry.lookup` on the method table and the algorithm registry."""
    seen: Counter[str] = Counter()
    real = Registry.lookup

    def counting(self, name):  # noqa: ANN001, ANN202
        if self is METHODS:
            seen["method"] += 1
        elif self is ALGORITHMS:
            seen["algorithm"] += 1
        return real(self, name)

    monkeypatch.setattr(Registry, "lookup", counting)
    return seen


def test_bnfl_train_looks_its_method_up_once(tmp_path, lookups, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "FedTAN"\nrounds = 1\n[train]\nlocal_steps = 1\nprogress = false\n'
                   '[partition]\nkind = "iid"\nnum_clients = 2\n')
    assert main(["train", "--config", str(cfg), "--batched", "off"]) == 0
    assert "fedtan: 1 rounds" in capsys.readouterr().out  # the config keeps the id's one spelling
    assert dict(lookups) == {"method": 1}


def test_a_config_checks_its_method_without_looking_it_up(lookups):
    from bnfl.train import RunConfig

    RunConfig.from_dict(RunConfig(method="fedavg+bn").to_dict())
    assert dict(lookups) == {}
    with pytest.raises(ValueError, match="unknown method 'fedsgd'; valid ids: .*fedtan"):
        RunConfig(method="fedsgd")
    from bnfl.methods import get

    get("fedtan")
    assert dict(lookups) == {"method": 1}  # the counter can fail: it sees what get does
