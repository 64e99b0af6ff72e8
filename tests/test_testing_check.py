"""bnfl.testing: check_aggregation and check_server_step classify the patterns of docs/bn-safe.md,
catch each problem with a minimal counterexample, and pass bnfl's own exact merge.

The patterns are read from the page itself (its code cells' function definitions), so the page
and these tests cannot drift apart. Measured on the 2-core machine (60 examples each, derandomised):
0.4-4 s per function, the key-substring pattern the slowest (two problems to shrink).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from torch import nn

from bnfl import compat
from bnfl.testing import BNSafetyError, check_aggregation, check_server_step
from bnfl.testing import strategies as bst

PAGE = Path(__file__).resolve().parents[1] / "docs" / "bn-safe.md"


def page_functions() -> dict:
    """The imports and function definitions of the page's code cells (its print calls left out)."""
    ns: dict = {}
    for cell in re.findall(r"```\{code-cell\} python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S):
        tree = ast.parse(cell)
        tree.body = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
        exec(compile(tree, str(PAGE), "exec"), ns)
    return ns


P = page_functions()


def kinds(report) -> set[str]:
    return {p.kind for p in report.problems}


# -- the page's patterns ------------------------------------------------------------------------------
def test_naive_state_dict_averaging_is_fedavg_with_its_variance_bias():
    r = check_aggregation(P["naive_average"])
    assert r.policy == "average" and kinds(r) == set()
    assert r.roles["running_var"] == "average" and r.roles["num_batches_tracked"] == "average"
    assert 0.5 < r.variance_bias < 1  # the between-client term: most of the variance on offset clients


def test_parameters_only_averaging_keeps_the_statistics_local():
    r = check_aggregation(P["parameters_only"])
    assert r.policy == "local" and kinds(r) == set()
    assert r.roles["running_var"] == "local" and r.roles["weight"] == "average"


def test_first_client_buffers_are_recognised():
    r = check_aggregation(P["first_client_buffers"])
    assert r.policy == "first" and kinds(r) == set()
    with pytest.raises(BNSafetyError, match=r"(?s)policy 'average' holds\n1 problem.*counter_float"):
        check_aggregation(P["counters_as_floats"], policy="average", examples=10)
    assert r.roles["num_batches_tracked"] == "first" and r.roles["bias"] == "average"


def test_counters_averaged_as_floats_are_caught_with_a_counterexample():
    r = check_aggregation(P["counters_as_floats"])
    assert r.policy == "average" and kinds(r) == {"counter_float"}
    (p,) = r.problems
    assert "num_batches_tracked" in p.message and "torch.float32" in p.message
    assert p.counterexample.startswith("1 client(s): [0] N=2")  # shrunk to the smallest split


def test_key_substring_selection_misses_bn_layers_named_otherwise():
    r = check_aggregation(P["key_substring"])
    assert r.policy == "mixed" and "name_selection" in kinds(r)
    p = next(p for p in r.problems if p.kind == "name_selection")
    assert "bn1: local" in p.message  # "bn" in its name: left out; the other layer averaged
    names = re.search(r"BN layers: (.*)", p.counterexample).group(1)
    assert "bn1" in names and len(names.split(";")) == 2  # minimal: one layer of each kind


def test_bnfl_exact_merge_passes_and_asserting_exact_on_averaging_fails_minimally():
    r = check_aggregation(compat.aggregate_state_dicts, policy="exact")
    assert r.ok and r.roles["running_var"] == "exact" and r.roles["num_batches_tracked"] == "max"
    with pytest.raises(BNSafetyError, match="expected BN statistics aggregated with policy 'exact', found 'average'") as err:
        check_aggregation(P["naive_average"], policy="exact")
    text = str(err.value)
    assert "2 client(s): [0] N=2" in text and "BN layers: bn1 (BatchNorm1d, C=1" in text  # 2 clients, 1 channel
    assert err.value.report.policy == "average"


def test_fedadam_on_the_buffers_breaks_and_the_bn_safe_step_does_not():
    r = check_server_step(P["make_fedadam"](), rounds=12, examples=6)
    assert r.broken_round is not None and 1 < r.broken_round <= r.rounds
    assert kinds(r) == {"negative_variance"}
    assert f"round {r.broken_round}:" in r.problems[0].message
    assert r.problems[0].counterexample.startswith("1 client(s)")
    with pytest.raises(BNSafetyError, match="BN variance breaks"):
        check_server_step(P["make_fedadam"](), rounds=12, examples=6, require_safe=True)
    safe = check_server_step(P["make_fedadam"](bn_safe=True), rounds=12, examples=6, require_safe=True)
    assert safe.ok and safe.broken_round is None


# -- each problem kind, caught with a counterexample --------------------------------------------------
def _average(states, weights):
    total = sum(weights)
    return {k: (sum(w / total * s[k].double() for s, w in zip(states, weights, strict=True))).to(s0.dtype)
            for k, s0 in states[0].items()}


def minus_between(states, weights):
    """A sign error: the between-client term subtracted instead of added."""
    out, total = _average(states, weights), sum(weights)
    for k in states[0]:
        if k.endswith("running_var"):
            mk = k[: -len("var")] + "mean"
            between = sum(w / total * (s[mk] - out[mk]) ** 2 for s, w in zip(states, weights, strict=True))
            out[k] = out[k] - 4 * between
    return out


def bessel_over_clients(states, weights):
    """Bessel's correction over the number of clients: infinite with one client."""
    out, k = _average(states, weights), len(states)
    return {key: v * k / torch.tensor(k - 1, dtype=v.dtype) if key.endswith("running_var") else v
            for key, v in out.items()}


def numpy_float64(states, weights):
    """Averaged through numpy in float64 and never cast back."""
    import numpy as np

    total = sum(weights)
    return {k: torch.from_numpy(np.asarray(sum(w / total * s[k].numpy().astype(np.float64)
                                               for s, w in zip(states, weights, strict=True)))) for k in states[0]}


def data_parallel_prefix(states, weights):
    """Keys renamed with DataParallel's "module." prefix."""
    return {f"module.{k}": v for k, v in _average(states, weights).items()}


def second_client_reference(states, weights):
    """Compares with client 1, which a one-client round does not have."""
    return {k: v if torch.equal(v, states[1][k]) else v for k, v in _average(states, weights).items()}


@pytest.mark.parametrize("fn, kind", [
    (minus_between, "negative_variance"),
    (bessel_over_clients, "nonfinite"),
    (numpy_float64, "dtype_change"),
    (data_parallel_prefix, "key_change"),
    (P["counters_as_floats"], "counter_float"),
    (P["key_substring"], "name_selection"),
    (second_client_reference, "error"),
])
def test_each_problem_is_caught_with_a_minimal_counterexample(fn, kind):
    r = check_aggregation(fn, examples=30)
    assert kind in kinds(r)
    p = next(p for p in r.problems if p.kind == kind)
    clients = int(re.match(r"(\d+) client", p.counterexample).group(1))
    assert clients <= 2, p.counterexample  # shrunk


def test_a_check_is_deterministic():
    a, b = (check_aggregation(P["first_client_buffers"], examples=10) for _ in range(2))
    assert (a.policy, a.roles, a.problems, a.examples) == (b.policy, b.roles, b.problems, b.examples)
    c, d = (check_aggregation(P["counters_as_floats"], examples=10) for _ in range(2))
    assert [p.counterexample for p in c.problems] == [p.counterexample for p in d.problems]


def test_a_users_model_is_checked_with_its_own_bn_layers():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3), nn.BatchNorm1d(3))
    r = check_aggregation(compat.aggregate_state_dicts, model=model, policy="exact", examples=20)
    assert r.ok
    r = check_aggregation(P["naive_average"], model=model, examples=20)
    assert r.policy == "average"


def test_bad_input_is_one_clear_line():
    with pytest.raises(TypeError, match="fn must be callable"):
        check_aggregation(42)
    with pytest.raises(ValueError, match="unknown policy 'fedavg'; choose one of exact, average"):
        check_aggregation(P["naive_average"], policy="fedavg")
    with pytest.raises(ValueError, match="examples must be a positive int"):
        check_aggregation(P["naive_average"], examples=0)
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        check_aggregation(P["naive_average"], model={"a": 1})
    with pytest.raises(TypeError, match="make_step must be a callable"):
        check_server_step(None)


# -- the ground truth ---------------------------------------------------------------------------------
@pytest.mark.parametrize("momentum", [None, 0.1])
@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 2), (3, 3, 2, 2)])
def test_run_statistics_is_what_nn_batchnorm_stores(shape, momentum):
    """strategies.run_statistics is bitwise the running statistics of an nn.BatchNorm*d forward."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 2 + 1
    layer = (nn.BatchNorm1d if len(shape) < 4 else nn.BatchNorm2d)(3, momentum=momentum).train()
    for _ in range(3):
        layer(x)
    mean, var, seen = bst.run_statistics(x, batches=3, momentum=momentum)
    assert torch.equal(mean, layer.running_mean) and torch.equal(var, layer.running_var)
    assert torch.equal(seen, layer.num_batches_tracked)


@settings(max_examples=40)
@given(bst.scenarios())
def test_exact_merge_is_the_running_statistics_of_the_union(scenario):
    """The check's ground truth: compat's exact merge of the clients' states equals the running
    statistics of one BN layer run on the union of the clients' data (unbiased, N-1)."""
    clients = bst.client_states(scenario)
    merged = compat.aggregate_state_dicts(clients.states, clients.weights, model=clients.model,
                                          counts=clients.counts)
    gen = torch.Generator().manual_seed(scenario.seed)
    template = clients.model.state_dict()
    batches = {spec.name: [] for spec in scenario.layers}
    for client in scenario.clients:  # the same draws, in the same order, as client_states makes
        for k, v in template.items():
            if v.is_floating_point() and not k.split(".")[-1].startswith(("running_", "num_batches")):
                torch.randn(v.shape, generator=gen, dtype=v.dtype)
        for spec in scenario.layers:
            batches[spec.name].append(bst.client_batch(client, spec, gen, torch.float32))
    for spec in scenario.layers:
        union = torch.cat(batches[spec.name]).double()  # (sum N_i, C, *spatial)
        mean, var, _ = bst.run_statistics(union)
        torch.testing.assert_close(merged[f"{spec.name}.running_mean"].double(), mean, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(merged[f"{spec.name}.running_var"].double(), var, rtol=1e-4, atol=1e-5)


@settings(max_examples=20)
@given(bst.client_state_dicts(min_clients=2))
def test_the_strategies_serve_a_users_own_property(case):
    """How a user writes their own property with bnfl.testing.strategies."""
    out = compat.aggregate_state_dicts(case.states, case.weights, model=case.model, counts=case.counts)
    for key, (_, role) in compat.bn_entries(case.model).items():
        if role == "running_var":
            assert bool((out[key] > 0).all())
        assert out[key].dtype == case.states[0][key].dtype


def reset_statistics(states, weights):
    """Parameters averaged into a fresh model's state: running statistics at their initial values."""
    out = _average(states, weights)
    for k, v in out.items():
        if k.endswith("running_mean") or k.endswith("num_batches_tracked"):
            out[k] = torch.zeros_like(v)
        elif k.endswith("running_var"):
            out[k] = torch.ones_like(v)
    return out


def equal_weights(states, weights):
    """FedBN's reference code: every client weighs the same, whatever its size."""
    return _average(states, [1] * len(states))


@pytest.mark.parametrize("fn, policy", [(reset_statistics, "dropped"), (equal_weights, "equal-average")])
def test_dropped_and_equal_weight_policies_are_recognised(fn, policy):
    r = check_aggregation(fn, examples=30)
    assert r.policy == policy and kinds(r) == set()


def test_each_key_of_a_users_model_gets_its_policy():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    model.add_module("bn_head", nn.BatchNorm1d(3))
    r = check_aggregation(P["key_substring"], model=model, examples=20)
    assert r.entries["1.running_var"] == "average" and r.entries["bn_head.running_var"] == "local"
    assert r.policy == "mixed" and "name_selection" in kinds(r)
