"""The fast path (:mod:`bnfl.fl.fast_path`, issue 48) is bitwise today's engine: the same runs on
``reference`` and ``fast`` end with equal states, histories and byte counters, float32 as the
quick profile trains (sequential, batched, seeds in lock-step; every method family)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_fl_batched import _tensors  # (tests/ is on sys.path)

from bnfl import fl
from bnfl.fl import fast_path
from bnfl.fl.comm import weighted_sum
from bnfl.fl.lockstep import run_lockstep

SPEC = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": 3, "seed": 0,
        "partition": {"kind": "dirichlet", "phi": 0.3, "num_clients": 6},
        "train": {"local_steps": 2, "lr": 0.05, "batch_size": 16, "momentum": 0.9, "participation": 0.5,
                  "eval_every": 1, "progress": False, "batched": "on"}}
METHODS = ["fedavg+bn", "fedbn", "fedtan", "fixbn", "hbn", "scaffold", "fedadam+bn"]


def _spec(method: str, seed: int, **train) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["method"], spec["seed"] = method, seed
    spec["partition"]["seed"] = seed
    spec["train"].update(train)
    if method == "fixbn":
        spec["method_options"] = {"switch": 2}
    return spec


def _runs(engine: str, method: str, lockstep: bool, **train) -> list[fl.Simulation]:
    with fast_path.use(engine):
        sims = [fl.build(_spec(method, s, **train)) for s in ((0, 1, 2) if lockstep else (0,))]
        if lockstep:
            run_lockstep(sims)
        else:
            for sim in sims:
                sim.run()
    return sims


def _assert_bitwise(a: fl.Simulation, b: fl.Simulation) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]), k
    assert a.history.without_time() == b.history.without_time()
    assert a.channel.counters() == b.channel.counters()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("way", ["sequential", "batched", "lockstep"])
def test_the_fast_path_is_bitwise_the_reference(method, way):
    train = {"batched": "off"} if way == "sequential" else {}
    ref = _runs("reference", method, way == "lockstep", **train)
    fast = _runs("fast", method, way == "lockstep", **train)
    for a, b in zip(ref, fast, strict=True):
        _assert_bitwise(a, b)


def test_flat_weighted_sum_is_bitwise_the_per_key_sum():
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for k in (2, 5, 17):
            states = [{"w": torch.randn(30, 64, generator=g, dtype=dtype), "b": torch.randn(30, generator=g, dtype=dtype),
                       "n": torch.tensor(i + 3), "c": torch.randn(3, 3, 2, 2, generator=g, dtype=dtype)} for i in range(k)]
            w = torch.rand(k, generator=g, dtype=torch.float64)
            weights = (w / w.sum()).tolist()
            with fast_path.use("reference"):
                ref = weighted_sum(states, weights)
            fast = weighted_sum(states, weights)
            assert list(ref) == list(fast)
            for key in ref:
                assert ref[key].dtype == fast[key].dtype and torch.equal(ref[key], fast[key]), key
                assert fast[key].untyped_storage().nbytes() == fast[key].nbytes  # its own storage, as before


def test_an_unknown_engine_is_refused_by_name():
    with pytest.raises(ValueError, match="not one of"), fast_path.use("compiled?"):
        pass
