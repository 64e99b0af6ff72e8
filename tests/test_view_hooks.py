"""The batched engine calls on per-client views only the hooks an algorithm's options use
(:meth:`bnfl.fl.Algorithm.view_hooks`): HBN forwards every hook to its solver, and FedAvg-HBN
uses two of four; results are what calling all four gives (bitwise: the skipped calls do nothing)."""

from __future__ import annotations

import pytest

from bnfl import fl
from bnfl.fl.algorithms import make_algorithm


@pytest.mark.parametrize(("options", "hooks"), [
    ({}, {"client_start", "extra_upload"}),
    ({"clip_grad_norm": 1.0}, {"client_start", "extra_upload", "adjust_grads"}),
    ({"alpha": "equal"}, {"client_start", "extra_upload", "adjust_grads", "after_step"}),
    ({"solver": "fedprox", "solver_options": {"mu": 0.01}}, {"client_start", "extra_upload", "adjust_grads"}),
])
def test_hbn_names_the_view_hooks_its_options_use(options, hooks):
    assert make_algorithm("hbn", **options).view_hooks() == hooks


def test_an_algorithms_view_hooks_default_to_what_its_class_overrides():
    assert make_algorithm("fedavg").view_hooks() == frozenset()
    assert "adjust_grads" in make_algorithm("fedprox", mu=0.01).view_hooks()


def test_skipping_unused_view_hooks_changes_nothing(monkeypatch):
    spec = {"data": {"name": "digits", "form": "image"}, "model": {"name": "q_scnn"}, "rounds": 2, "seed": 0,
            "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 4}, "method": "hbn",
            "train": {"local_steps": 2, "lr": 0.05, "batch_size": 8, "momentum": 0.9, "batched": "on",
                      "progress": False}}
    fast = fl.build(spec)
    fast.run()
    from bnfl.fl.algorithms._hbn import HBN

    monkeypatch.setattr(HBN, "view_hooks", lambda self: frozenset({"client_start", "adjust_grads", "after_step",
                                                                   "extra_upload"}))
    every = fl.build(spec)
    every.run()
    a, b = fast.global_state, every.global_state
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
    assert fast.history.column("test_acc") == every.history.column("test_acc")
