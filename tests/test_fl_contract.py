"""The algorithm contract every backend relies on: hooks see contexts, never the Simulation, and
aggregation is pure (the state and uploads it is given are left as they were)."""

from __future__ import annotations

import pytest
import torch

from bnfl import fl
from bnfl.fl.context import ClientContext, ServerContext, client_weights
from bnfl.methods import METHODS

SPEC = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": 2, "seed": 1,
        "partition": {"kind": "dirichlet", "phi": 0.5, "num_clients": 4},
        "train": {"local_steps": 2, "lr": 0.05, "batch_size": 8, "momentum": 0.9, "participation": 0.75,
                  "progress": False, "batched": "off"}}  # the sequential reference engine
#: every method that runs on the digits MLP (instance norm needs spatial positions)
RUNNABLE = [m for m in METHODS if m != "fedavg+in"]
SERVER_HOOKS = ("begin_round", "extra_download", "aggregate", "aggregate_statistics", "evaluation_state")
CLIENT_HOOKS = ("client_start", "local_loss", "adjust_grads", "after_step", "extra_upload", "client_statistics")


def _snapshot(tensors):
    return {k: v.detach().clone() for k, v in tensors.items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", RUNNABLE)
def test_hooks_see_contexts_and_aggregation_is_pure(method):
    sim = fl.build({**SPEC, "method": method, **({"method_options": {"eval_stats": "recompute"}} if method == "hbn" else {})})
    alg = sim.algorithm
    calls: dict[str, int] = {}

    def wrap(name):
        orig = getattr(alg, name)

        def hook(ctx, *args, **kwargs):
            want = ServerContext if name in SERVER_HOOKS else ClientContext
            assert isinstance(ctx, want), f"{method}.{name} got {type(ctx).__name__}"
            calls[name] = calls.get(name, 0) + 1
            if name in ("aggregate", "aggregate_statistics"):
                state, uploads = args[0], args[3]
                before, ups = _snapshot(state), [_snapshot(u) for u in uploads]
                out = orig(ctx, *args, **kwargs)
                assert _same(_snapshot(state), before), f"{method}.{name} modified the state it was given"
                assert all(_same(_snapshot(u), b) for u, b in zip(uploads, ups, strict=True)), f"{method}.{name} modified an upload"
                assert out.keys() == state.keys(), f"{method}.{name} returned other keys"
                return out
            return orig(ctx, *args, **kwargs)

        setattr(alg, name, hook)

    for name in SERVER_HOOKS + CLIENT_HOOKS:
        wrap(name)
    sim.run()
    if alg.communicates:
        assert calls.get("aggregate", 0) == 2, method
    assert calls.get("client_start", 0) >= 2, method
    if method == "hbn":  # round T+1 and the recomputed evaluation statistics ran as requests
        assert calls["aggregate_statistics"] == 1 and calls["client_statistics"] > 0


def test_client_context_holds_only_its_own_samples():
    sim = fl.build({**SPEC, "method": "fedavg+bn"})
    for c, idx in enumerate(sim.client_indices):
        ctx = sim.client_context(c)
        x, y = ctx.data()
        assert ctx.size == len(idx) == len(x) and ctx.client == c and ctx.first_participation
        torch.testing.assert_close(x, sim.x_train[torch.as_tensor(idx)], rtol=0, atol=0)
        assert torch.equal(y, sim.y_train[torch.as_tensor(idx)])
        assert ctx.batch_size == min(8, len(idx))


def test_client_weights_by_size_or_equal():
    assert client_weights([10, 30, 60], [1, 2], "size") == pytest.approx([1 / 3, 2 / 3])
    assert client_weights([10, 30, 60], [0, 1, 2], "equal") == pytest.approx([1 / 3] * 3)


def test_a_hook_that_answers_no_request_says_so():
    with pytest.raises(NotImplementedError, match="FedAvg answers no statistics request"):
        fl.FedAvg().client_statistics(None, None, "recalibrate")  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="no statistics-only round"):
        fl.FedAvg().aggregate_statistics(None, {}, [], [], [])  # type: ignore[arg-type]
