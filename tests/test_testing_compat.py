"""bnfl.compat.aggregate_state_dicts: BN running statistics by policy, found by layer type; its exact
merge equals the pooling of bnfl's own engine (HBN's server, eq. 8) and its average the engine's
FedAvg aggregation (bnfl.fl.comm.weighted_sum)."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from torch import nn

from bnfl import compat, stats
from bnfl.fl.algorithms._hbn_options import pool
from bnfl.fl.comm import weighted_sum
from bnfl.testing import strategies as bst


class Net(nn.Module):
    """BN layers named without "bn", and a linear layer named with it."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU())
        self.bn_proj = nn.Linear(8, 3)  # "bn" in its name, not a BN layer
        self.norm_a = nn.BatchNorm1d(3)

    def forward(self, x):
        return self.norm_a(self.bn_proj(self.features(x).flatten(1)))


def client_states(k: int = 3, dtype=torch.float32):
    states, sizes = [], [4, 7, 5][:k]
    for c, n in enumerate(sizes):
        torch.manual_seed(c)
        model = Net().to(dtype).train()
        model(torch.randn(n, 1, 4, 4, dtype=dtype) * (c + 1) + 2 * c)
        states.append(model.state_dict())
    return states, sizes


def test_bn_entries_are_found_by_layer_type_not_by_name():
    entries = compat.bn_entries(Net())
    layers = {layer for layer, _ in entries.values()}
    assert layers == {"features.1", "norm_a"}
    assert "bn_proj.weight" not in entries
    assert entries["features.1.num_batches_tracked"] == ("features.1", "num_batches_tracked")


def test_bn_positions_measures_positions_per_example():
    assert compat.bn_positions(Net(), torch.zeros(2, 1, 4, 4)) == {"features.1": 4, "norm_a": 1}


@settings(max_examples=40)
@given(bst.client_state_dicts())
def test_exact_merge_equals_hbn_eq8_pooling_of_bnfls_engine(case):
    """The exact policy equals what HBN's server computes (bnfl.fl.algorithms pool, eq. 8) from
    the clients' moments (count, mean, biased variance)."""
    out = compat.aggregate_state_dicts(case.states, case.weights, model=case.model, counts=case.counts)
    for spec in case.scenario.layers:
        p = f"{spec.name}."
        parts = []
        for s, c in zip(case.states, case.counts, strict=True):
            n = c[spec.name]
            parts.append(stats.Moments(count=n, mean=s[p + "running_mean"].double(),
                                       var=s[p + "running_var"].double() * (n - 1) / n))
        mean, var = pool(parts, "eq8")
        torch.testing.assert_close(out[p + "running_mean"].double(), mean, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out[p + "running_var"].double(), var, rtol=1e-6, atol=1e-6)


def test_average_equals_the_engines_fedavg_and_keeps_counters_integer():
    states, sizes = client_states(dtype=torch.float64)
    out = compat.aggregate_state_dicts(states, sizes, model=Net(), policy="average")
    p = [n / sum(sizes) for n in sizes]
    want = weighted_sum([{k: v for k, v in s.items() if "num_batches" not in k} for s in states], p)
    for k, v in want.items():
        torch.testing.assert_close(out[k], v, rtol=1e-12, atol=1e-12)
    assert out["norm_a.num_batches_tracked"].dtype == torch.int64
    assert int(out["norm_a.num_batches_tracked"]) == 1


def test_local_leaves_the_statistics_out_and_nothing_is_mutated():
    states, sizes = client_states()
    before = copy.deepcopy(states)
    out = compat.aggregate_state_dicts(states, sizes, model=Net(), policy="local")
    assert not any(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in out)
    assert "norm_a.weight" in out and "bn_proj.weight" in out
    for s, b in zip(states, before, strict=True):
        assert all(torch.equal(s[k], b[k]) for k in s)
    # the result loads into a client's model without touching its own statistics
    model = Net()
    model.load_state_dict(states[0])
    model.load_state_dict(out, strict=False)
    assert torch.equal(model.norm_a.running_var, states[0]["norm_a.running_var"])


def test_exact_keeps_dtypes_and_uses_positions_for_2d_layers():
    states, sizes = client_states(dtype=torch.float64)
    pos = compat.bn_positions(Net().double(), torch.zeros(1, 1, 4, 4, dtype=torch.float64))
    out = compat.aggregate_state_dicts(states, sizes, model=Net(), positions=pos)
    assert {k: v.dtype for k, v in out.items()} == {k: v.dtype for k, v in states[0].items()}
    counts = compat.client_counts(sizes, pos)
    assert counts[1] == {"features.1": 28, "norm_a": 7}
    again = compat.aggregate_state_dicts(states, sizes, model=Net(), counts=counts)
    assert all(torch.equal(out[k], again[k]) for k in out)


def test_bad_input_is_one_clear_line():
    states, sizes = client_states()
    with pytest.raises(ValueError, match="unknown policy 'fedbn'; choose one of exact, average, local"):
        compat.aggregate_state_dicts(states, sizes, model=Net(), policy="fedbn")
    with pytest.raises(ValueError, match="3 client states but 2 weights"):
        compat.aggregate_state_dicts(states, sizes[:2], model=Net())
    with pytest.raises(ValueError, match="weights must be positive"):
        compat.aggregate_state_dicts(states, [1, 0, 2], model=Net())
    bad = [dict(states[0]), {k: v for k, v in states[1].items() if k != "bn_proj.bias"}, states[2]]
    with pytest.raises(ValueError, match="client state 1 has different keys"):
        compat.aggregate_state_dicts(bad, sizes, model=Net())
    with pytest.raises(ValueError, match="lack BN entries of model"):
        compat.aggregate_state_dicts(states, sizes, model=nn.Sequential(nn.BatchNorm1d(3)))
    with pytest.raises(ValueError, match="client 0 has count 1 for a BN layer"):
        compat.aggregate_state_dicts(states, [1, 1, 1], model=Net())
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        compat.bn_entries({"a": 1})
