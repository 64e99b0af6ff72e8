"""The batched norms equal the layers applied to each client's real rows alone (float64)."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bnfl import functional as BF
from bnfl.nn import GroupNorm, HybridBatchNorm1d, HybridBatchNorm2d, LayerNorm
from bnfl.nn import batched_norms as BN
from bnfl.nn.norms import FederatedBatchNorm1d, FederatedBatchNorm2d

TOL = 1e-12


def _clients(k: int, n: int, counts: list[int] | None, shape: tuple[int, ...], seed: int):
    """K padded blocks of n rows (padding repeats a block's first row) and each client's real rows."""
    g = torch.Generator().manual_seed(seed)
    real = [torch.randn(c if counts else n, *shape, generator=g, dtype=torch.float64) * (1 + j) + j
            for j, c in enumerate(counts or [n] * k)]
    blocks = [torch.cat([r, r[:1].expand(n - len(r), *shape)]) for r in real]
    return torch.cat(blocks), real


def _randomise(layer: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(layer.parameters()) + [b for b in layer.buffers() if b.is_floating_point()]:
            t.copy_(torch.rand(t.shape, generator=g, dtype=t.dtype) + 0.5)
    return layer


def _stack(layers, name):
    return torch.stack([getattr(m, name).detach() for m in layers])


def _leaf(t):
    return t.clone().requires_grad_(True)


def _check_grads(outs_ref, real, layers, y, x, k, n, counts, params):
    """Same loss on real rows: gradients w.r.t. inputs and every stacked parameter equal."""
    sizes = counts or [n] * k
    w = [torch.linspace(-1, 1, r.numel(), dtype=torch.float64).reshape(r.shape) for r in real]
    loss_ref = sum((o * wi).sum() for o, wi in zip(outs_ref, w, strict=True))
    loss_ref.backward()
    yr = y.reshape(k, n, *y.shape[1:])
    loss = sum((yr[j, : sizes[j]] * w[j]).sum() for j in range(k))
    loss.backward()
    for j in range(k):
        assert torch.allclose(x.grad.reshape(k, n, *x.shape[1:])[j, : sizes[j]], real[j].grad, atol=TOL, rtol=0)
    for name, stacked in params.items():
        ref = torch.stack([getattr(m, name).grad for m in layers])
        assert torch.allclose(stacked.grad, ref, atol=TOL, rtol=0), name


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 4), n=st.integers(2, 6), conv=st.booleans(), uneven=st.booleans(), seed=st.integers(0, 999))
def test_client_moments_equal_each_clients_batch_moments(k, n, conv, uneven, seed):
    counts = [max(2, n - (j % 3)) for j in range(k)] if uneven else None
    x, real = _clients(k, n, counts, (3, 2, 2) if conv else (3,), seed)
    mean, var = BN.client_moments(x, k, None if counts is None else torch.tensor(counts))
    for j, r in enumerate(real):
        mu, v = BF.batch_moments(r)
        assert torch.allclose(mean[j], mu, atol=TOL, rtol=0) and torch.allclose(var[j], v, atol=TOL, rtol=0)


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_hybrid_batch_norm_equals_hbn_layers_per_client(conv, uneven, training):
    k, n = 3, 5
    counts = [5, 3, 4] if uneven else None
    x, real = _clients(k, n, counts, (4, 3, 3) if conv else (4,), seed=1)
    cls = HybridBatchNorm2d if conv else HybridBatchNorm1d
    layers = [_randomise(cls(4).double(), seed=j).train(training) for j in range(k)]
    with torch.no_grad():
        for j, m in enumerate(layers):
            m.alpha.copy_(torch.linspace(-2, 2, 4, dtype=torch.float64) * (j - 1))
    real = [_leaf(r) for r in real]
    outs = [m(r) for m, r in zip(layers, real, strict=True)]
    x = _leaf(x)
    params = {name: _leaf(_stack(layers, name)) for name in ("alpha", "weight", "bias")}
    y = BN.hybrid_batch_norm(x, k, params["alpha"], _stack(layers, "global_mean"), _stack(layers, "global_var"),
                             params["weight"], params["bias"], eps=1e-5, training=training,
                             counts=None if counts is None else torch.tensor(counts))
    sizes = counts or [n] * k
    for j in range(k):
        assert torch.allclose(y.reshape(k, n, *y.shape[1:])[j, : sizes[j]], outs[j], atol=TOL, rtol=0)
    if not training:
        params.pop("alpha")  # no gradient reaches alpha in evaluation (global statistics only)
    _check_grads(outs, real, layers, y, x, k, n, counts, params)


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("uneven", [False, True])
def test_federated_batch_norm_equals_fbn_layers_per_client_buffers_included(conv, uneven):
    k, n = 3, 4
    counts = [4, 2, 3] if uneven else None
    cls = FederatedBatchNorm2d if conv else FederatedBatchNorm1d
    layers = [_randomise(cls(2).double(), seed=j).train() for j in range(k)]
    for j, m in enumerate(layers):
        m.num_batches_tracked.fill_(j)  # each client at its own step of the cumulative average
    before = copy.deepcopy(layers)
    rm, rv, nbt = (_stack(layers, b).clone() for b in ("running_mean", "running_var", "num_batches_tracked"))
    for step in range(2):  # two steps: the counters advance per client
        x, real = _clients(k, n, counts, (2, 2, 2) if conv else (2,), seed=10 + step)
        real = [_leaf(r) for r in real]
        outs = [m(r) for m, r in zip(layers, real, strict=True)]
        x = _leaf(x)
        params = {name: _leaf(_stack(layers, name)) for name in ("weight", "bias")}
        y = BN.federated_batch_norm(x, k, _stack(layers, "global_mean"), _stack(layers, "global_var"),
                                    params["weight"], params["bias"], eps=1e-5, training=True, running=(rm, rv, nbt),
                                    counts=None if counts is None else torch.tensor(counts))
        _check_grads(outs, real, layers, y, x, k, n, counts, params)
        for m in layers:
            m.zero_grad()
    assert torch.equal(nbt, _stack(layers, "num_batches_tracked"))
    assert torch.allclose(rm, _stack(layers, "running_mean"), atol=TOL, rtol=0)
    assert torch.allclose(rv, _stack(layers, "running_var"), atol=TOL, rtol=0)
    assert not torch.allclose(rm, _stack(before, "running_mean"))  # the buffers did move


@pytest.mark.parametrize(("make", "conv"), [
    (lambda: GroupNorm(4, groups=2), False), (lambda: GroupNorm(4, groups=2), True), (lambda: LayerNorm(4), False),
    (lambda: LayerNorm(4), True), (lambda: GroupNorm(4, groups=4), True),  # IN: conv features only
], ids=["gn-linear", "gn-conv", "ln-linear", "ln-conv", "in-conv"])
def test_group_norm_equals_gn_ln_layers_per_client(make, conv):
    k, n = 3, 4
    counts = [4, 1, 3]  # per-sample statistics: even one real row is fine
    x, real = _clients(k, n, counts, (4, 2, 2) if conv else (4,), seed=3)
    layers = [_randomise(make().double(), seed=j) for j in range(k)]
    real = [_leaf(r) for r in real]
    outs = [m(r) for m, r in zip(layers, real, strict=True)]
    x = _leaf(x)
    params = {name: _leaf(_stack(layers, name)) for name in ("weight", "bias")}
    y = BN.group_norm(x, k, layers[0].num_groups, params["weight"], params["bias"], eps=layers[0].eps)
    for j in range(k):
        assert torch.allclose(y.reshape(k, n, *y.shape[1:])[j, : counts[j]], outs[j], atol=TOL, rtol=0)
    _check_grads(outs, real, layers, y, x, k, n, counts, params)


def test_rows_that_do_not_split_into_clients_are_an_error():
    with pytest.raises(ValueError, match="7 rows cannot be split into 2 clients"):
        BN.client_moments(torch.zeros(7, 3), 2)
