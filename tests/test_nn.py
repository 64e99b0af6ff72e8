"""Tests for bnfl.nn: HBN (eqs. 9-10), FixBN freezing, FBN/FedFN/GN/LN/IN, replace_norm, state groups."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from bnfl.nn import (
    NORM_KINDS,
    FeatureNorm,
    FederatedBatchNorm1d,
    FederatedBatchNorm2d,
    FrozenStatsBatchNorm2d,
    GroupNorm,
    HybridBatchNorm1d,
    HybridBatchNorm2d,
    InstanceNorm,
    LayerNorm,
    NormIdentity,
    WSConv2d,
    bn_modules,
    freeze_bn_stats,
    frozen_bn_stats,
    hybrid_batch_norm,
    is_frozen,
    is_norm_layer,
    local_state_keys,
    make_norm,
    norm_signature,
    replace_norm,
    state_groups,
    unfreeze_bn_stats,
)

D64 = torch.float64


def _hbn(c: int, dim: int, seed: int, alpha_scale: float = 2.0) -> nn.Module:
    """A float64 HBN layer with random alpha, gamma, beta and global statistics."""
    g = torch.Generator().manual_seed(seed)
    layer = (HybridBatchNorm1d if dim == 1 else HybridBatchNorm2d)(c, dtype=D64)
    with torch.no_grad():
        layer.alpha.copy_(alpha_scale * torch.randn(c, generator=g, dtype=D64))
        layer.weight.copy_(1 + 0.5 * torch.randn(c, generator=g, dtype=D64))
        layer.bias.copy_(torch.randn(c, generator=g, dtype=D64))
    layer.set_global_stats(torch.randn(c, generator=g, dtype=D64), 0.1 + torch.rand(c, generator=g, dtype=D64) * 3)
    return layer


def _input(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(shape, generator=g, dtype=D64) + torch.randn(shape[1], generator=g, dtype=D64).view(
        (1, -1) + (1,) * (len(shape) - 2)
    )


shapes = st.one_of(
    st.tuples(st.integers(2, 9), st.integers(1, 5)),
    st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
).filter(lambda s: int(np.prod(s)) // s[1] >= 2)


# ---------------------------------------------------------------------------------------------
# HBN eqs. 9-10
# ---------------------------------------------------------------------------------------------
@given(shapes, st.integers(0, 10_000))
def test_hbn_eq9_eq10_forward_equals_hand_computation(shape, seed):
    c, dim = shape[1], 1 if len(shape) == 2 else 2
    layer = _hbn(c, dim, seed).train()
    x = _input(shape, seed + 1)
    y = layer(x).detach().numpy()
    # Hand computation in numpy, float64: eq. 1 (biased), eq. 9 with e^-a/(1+e^-a), eq. 10.
    xn = np.moveaxis(x.numpy(), 1, 0).reshape(c, -1)  # (N, C, *) -> (C, N*)
    mu_b, var_b = xn.mean(axis=1), xn.var(axis=1)
    a = layer.alpha.detach().numpy()
    w_b, w_g = np.exp(-a) / (1 + np.exp(-a)), 1 / (1 + np.exp(-a))
    mu = w_b * mu_b + w_g * layer.global_mean.numpy()
    var = w_b * var_b + w_g * layer.global_var.numpy()
    shp = (1, c) + (1,) * (x.dim() - 2)
    gam, bet = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    want = gam.reshape(shp) * (x.numpy() - mu.reshape(shp)) / np.sqrt(var.reshape(shp) + layer.eps) + bet.reshape(shp)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(5, 3), (4, 2, 3), (3, 2, 2, 3)])
def test_hbn_gradcheck_input_alpha_gamma_beta(shape):
    c = shape[1]
    layer = _hbn(c, 1 if len(shape) <= 3 else 2, 7)
    x = _input(shape, 8).requires_grad_(True)
    alpha = layer.alpha.detach().clone().requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)

    def f(x, alpha, w, b):
        return hybrid_batch_norm(x, alpha, layer.global_mean, layer.global_var, w, b, eps=1e-5, training=True)

    assert torch.autograd.gradcheck(f, (x, alpha, w, b))
    assert torch.autograd.gradgradcheck(f, (x, alpha, w, b))


@given(shapes, st.integers(0, 10_000))
def test_hbn_input_gradient_through_batch_stats_weighted_by_one_minus_s(shape, seed):
    """Closed form: dx = g*gamma/sqrt(v+eps) + (1-s)[dL/dmu_hat/n + dL/dvar_hat*2(x-mu_b)/n]."""
    c, dim = shape[1], 1 if len(shape) == 2 else 2
    layer = _hbn(c, dim, seed).train()
    x = _input(shape, seed + 1).requires_grad_(True)
    gout = _input(shape, seed + 2)
    (layer(x) * gout).sum().backward()
    dims = [d for d in range(x.dim()) if d != 1]
    shp = (1, c) + (1,) * (x.dim() - 2)
    with torch.no_grad():
        n = x.numel() // c
        s = torch.sigmoid(layer.alpha)
        mu_b, var_b = x.mean(dims), x.var(dims, unbiased=False)
        mu = (1 - s) * mu_b + s * layer.global_mean
        var = (1 - s) * var_b + s * layer.global_var
        inv = torch.rsqrt(var + layer.eps).view(shp)
        gx_hat = gout * layer.weight.view(shp)  # dL/d(normalised x) * gamma
        d_mu = -(gx_hat * inv).sum(dims)  # dL/dmu_hat
        d_var = (gx_hat * (x - mu.view(shp))).sum(dims) * (-0.5) * inv.view(-1) ** 3  # dL/dvar_hat
        dx = gx_hat * inv + (1 - s).view(shp) * (d_mu.view(shp) / n + d_var.view(shp) * 2 * (x - mu_b.view(shp)) / n)
        d_alpha = s * (1 - s) * (d_mu * (layer.global_mean - mu_b) + d_var * (layer.global_var - var_b))
    torch.testing.assert_close(x.grad, dx, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(layer.alpha.grad, d_alpha, rtol=1e-9, atol=1e-9)
    assert layer.weight.grad is not None and layer.bias.grad is not None


def test_hbn_limits_alpha_to_plus_and_minus_infinity():
    layer = _hbn(4, 2, 3)
    x = _input((6, 4, 3, 3), 4)
    with torch.no_grad():
        layer.alpha.fill_(60.0)  # s = 1: global statistics only (HBN ablation 3) = eval mode
    layer.train()
    torch.testing.assert_close(layer(x), layer.eval()(x), rtol=1e-12, atol=1e-12)
    # gradient w.r.t. the input no longer passes through the batch statistics
    xt = x.clone().requires_grad_(True)
    layer.train()(xt).sum().backward()
    torch.testing.assert_close(xt.grad, (layer.weight * torch.rsqrt(layer.global_var + layer.eps)).view(1, -1, 1, 1).expand_as(x))
    with torch.no_grad():
        layer.alpha.fill_(-60.0)  # s = 0: batch statistics only (ablation 4) = standard BN
    want = F.batch_norm(x, None, None, layer.weight, layer.bias, training=True, eps=layer.eps)
    torch.testing.assert_close(layer.train()(x), want, rtol=1e-10, atol=1e-10)


def test_hbn_alpha_zero_is_equal_mix_and_default():
    layer = HybridBatchNorm2d(3)
    assert torch.equal(layer.alpha, torch.zeros(3))
    torch.testing.assert_close(layer.global_weight, torch.full((3,), 0.5))
    assert HybridBatchNorm2d.local_parameters == ("alpha",)


@given(st.integers(0, 10_000))
def test_hbn_eval_uses_global_stats_and_ignores_alpha(seed):
    layer = _hbn(3, 2, seed)
    x = _input((4, 3, 2, 2), seed + 1)
    y1 = layer.eval()(x)
    with torch.no_grad():
        layer.alpha.normal_()
    y2 = layer(x)
    shp = (1, 3, 1, 1)
    want = (x - layer.global_mean.view(shp)) / torch.sqrt(layer.global_var.view(shp) + layer.eps)
    want = want * layer.weight.view(shp) + layer.bias.view(shp)
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)
    torch.testing.assert_close(y1, want)


def test_hbn_sgd_never_changes_global_buffers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), HybridBatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 16, 6), HybridBatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    for m in model.modules():
        if isinstance(m, (HybridBatchNorm1d, HybridBatchNorm2d)):
            m.set_global_stats(torch.randn(m.num_features), torch.rand(m.num_features) + 0.5)
    before = {k: v.clone() for k, v in model.state_dict().items() if "global" in k}
    alpha0 = model[1].alpha.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    for _ in range(5):
        x, y = torch.randn(8, 1, 4, 4), torch.randint(0, 3, (8,))
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    after = model.state_dict()
    assert before and all(torch.equal(before[k], after[k]) for k in before)
    assert not torch.equal(alpha0, model[1].alpha.detach())  # alpha did train
    assert all(not b.requires_grad for b in model.buffers())


def test_hbn_bad_input_errors():
    layer = HybridBatchNorm2d(3)
    with pytest.raises(ValueError, match="shape"):
        layer.set_global_stats(torch.zeros(4), torch.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        layer.set_global_stats(torch.tensor([0.0, float("nan"), 0.0]), torch.ones(3))
    with pytest.raises(ValueError, match=">= 0"):
        layer.set_global_stats(torch.zeros(3), torch.tensor([1.0, -1.0, 1.0]))
    assert torch.equal(layer.global_mean, torch.zeros(3)) and torch.equal(layer.global_var, torch.ones(3))
    with pytest.raises(ValueError, match="eps"):
        HybridBatchNorm2d(3, eps=-1e-5)
    with pytest.raises(ValueError, match="num_features"):
        HybridBatchNorm1d(0)
    with pytest.raises(ValueError, match="channels"):
        layer(torch.randn(2, 4, 2, 2))
    with pytest.raises(ValueError, match="expects"):
        layer(torch.randn(2, 3))


def test_hbn_state_dict_has_global_buffers_and_alpha_only():
    layer = HybridBatchNorm2d(5)
    assert set(layer.state_dict()) == {"weight", "bias", "alpha", "global_mean", "global_var"}
    layer.set_global_stats(torch.arange(5.0), torch.full((5,), 2.0))
    other = HybridBatchNorm2d(5)
    other.load_state_dict(layer.state_dict())
    assert torch.equal(other.global_mean, torch.arange(5.0))


# ---------------------------------------------------------------------------------------------
# FixBN freezing
# ---------------------------------------------------------------------------------------------
def _bn_net() -> nn.Module:
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * 9, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 2))
    net.train()
    for _ in range(3):  # give the running statistics non-default values
        net(torch.randn(6, 2, 3, 3) * 2 + 1)
    return net


def test_fixbn_freeze_train_forward_equals_eval_forward_and_stats_fixed():
    net = _bn_net()
    x = torch.randn(7, 2, 3, 3)
    want = net.eval()(x)
    stats = {k: v.clone() for k, v in net.state_dict().items() if "running" in k or "num_batches" in k}
    params = [id(p) for p in net.parameters()]
    freeze_bn_stats(net)
    net.train()
    out = net(x)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    out.square().sum().backward()
    assert all(torch.equal(net.state_dict()[k], v) for k, v in stats.items())
    for _, m in bn_modules(net):
        assert is_frozen(m)
        assert m.weight.grad is not None and m.weight.grad.abs().sum() > 0
        assert m.bias.grad is not None and m.bias.grad.abs().sum() > 0
    assert [id(p) for p in net.parameters()] == params  # same objects: an optimizer keeps working
    assert isinstance(net[1], nn.BatchNorm2d) and isinstance(net[1], FrozenStatsBatchNorm2d)


def test_fixbn_freeze_survives_train_deepcopy_and_state_dict_roundtrip():
    net = _bn_net()
    keys = list(net.state_dict())
    freeze_bn_stats(net)
    assert list(net.state_dict()) == keys
    clone = copy.deepcopy(net).train()
    x = torch.randn(5, 2, 3, 3)
    torch.testing.assert_close(clone(x), clone.eval()(x))
    unfreeze_bn_stats(net)
    assert not any(is_frozen(m) for m in net.modules())
    assert type(net[1]) is nn.BatchNorm2d and type(net[5]) is nn.BatchNorm1d
    rm = net[1].running_mean.clone()
    net.train()(x)
    assert not torch.equal(rm, net[1].running_mean)  # unfrozen: statistics update again


def test_fixbn_context_manager_restores_only_what_it_froze():
    net = _bn_net()
    freeze_bn_stats(net[5:6])  # only the BN1d layer
    with frozen_bn_stats(net):
        assert is_frozen(net[1]) and is_frozen(net[5])
    assert not is_frozen(net[1]) and is_frozen(net[5])


def test_fixbn_freeze_refuses_hbn_and_changes_nothing():
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2), nn.Conv2d(2, 2, 1), HybridBatchNorm2d(2))
    with pytest.raises(ValueError, match="standard BN"):
        freeze_bn_stats(net)
    assert type(net[1]) is nn.BatchNorm2d
    with pytest.raises(ValueError, match="running statistics"):
        freeze_bn_stats(nn.Sequential(nn.BatchNorm2d(2, track_running_stats=False)))


# ---------------------------------------------------------------------------------------------
# FBN, GN, LN, IN, FedFN, WS
# ---------------------------------------------------------------------------------------------
@given(st.integers(0, 10_000), st.sampled_from([1, 2]), st.integers(1, 4))
def test_fbn_normalises_with_global_stats_and_averages_batch_stats(seed, dim, steps):
    torch.manual_seed(seed)
    shape = (6, 3) if dim == 1 else (4, 3, 2, 2)
    layer = (FederatedBatchNorm1d if dim == 1 else FederatedBatchNorm2d)(3, dtype=D64)
    layer.set_global_stats(torch.randn(3, dtype=D64), torch.rand(3, dtype=D64) + 0.5)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    xs = [torch.randn(shape, dtype=D64) * 2 + 1 for _ in range(steps)]
    dims = [d for d in range(len(shape)) if d != 1]
    for x in xs:
        xr = x.clone().requires_grad_(True)
        y = layer.train()(xr)
        want = F.batch_norm(x, layer.global_mean, layer.global_var, layer.weight, layer.bias, eps=layer.eps)
        torch.testing.assert_close(y, want)  # normalised with the global statistics
        y.sum().backward()
        w = (layer.weight / torch.sqrt(layer.global_var + layer.eps)).view((1, 3) + (1,) * (len(shape) - 2))
        torch.testing.assert_close(xr.grad, w.expand_as(x))  # no path through batch statistics
    torch.testing.assert_close(layer.running_mean, torch.stack([x.mean(dims) for x in xs]).mean(0))
    torch.testing.assert_close(layer.running_var, torch.stack([x.var(dims, unbiased=False) for x in xs]).mean(0))
    assert int(layer.num_batches_tracked) == steps
    g = layer.global_mean.clone()
    torch.testing.assert_close(layer.eval()(xs[0]), F.batch_norm(xs[0], g, layer.global_var, layer.weight, layer.bias))
    layer.reset_running_stats()
    assert int(layer.num_batches_tracked) == 0 and torch.equal(layer.global_mean, g)


@pytest.mark.parametrize("cls", [HybridBatchNorm1d, HybridBatchNorm2d, FederatedBatchNorm1d, FederatedBatchNorm2d])
def test_hbn_fbn_input_dims_checked_once_naming_the_layer(cls):
    """HBN and FBN share one input check: BatchNorm1d's (N, C) / (N, C, L) or BatchNorm2d's
    (N, C, H, W); the error names the layer's own class, a user's subclass included."""
    sub = type(f"My{cls.__name__}", (cls,), {})
    ok = [(4, 3), (4, 3, 5)] if cls.__name__.endswith("1d") else [(4, 3, 2, 2)]
    for layer in (cls(3), sub(3)):
        for shape in ok:
            assert layer(torch.randn(shape)).shape == shape
        for shape in [(3,), (4, 3), (4, 3, 5), (4, 3, 2, 2), (4, 3, 2, 2, 2)]:
            if shape not in ok:
                with pytest.raises(ValueError, match=rf"^{type(layer).__name__} expects \(N, C"):
                    layer(torch.randn(shape))


def test_sample_norms_equal_torch_references():
    torch.manual_seed(0)
    x4, x2 = torch.randn(3, 6, 4, 5, dtype=D64), torch.randn(5, 6, dtype=D64)
    gn = GroupNorm(6, groups=3, dtype=D64)
    torch.testing.assert_close(gn(x4), F.group_norm(x4, 3, eps=1e-5))
    ln = LayerNorm(6, dim=1, dtype=D64)
    torch.testing.assert_close(ln(x2), F.layer_norm(x2, (6,), eps=1e-5))
    inn = InstanceNorm(6, dtype=D64)
    torch.testing.assert_close(inn(x4), F.instance_norm(x4, eps=1e-5))
    norms = FeatureNorm(6, dim=2)(x4).flatten(1).norm(dim=1)
    torch.testing.assert_close(norms, torch.full((3,), (6 * 4 * 5) ** 0.5, dtype=D64))  # sqrt(D)
    torch.testing.assert_close(FeatureNorm(6, dim=1)(x2), F.normalize(x2, dim=1) * 6**0.5)
    torch.testing.assert_close(FeatureNorm(6, scale=1.0)(x4).flatten(1).norm(dim=1), torch.ones(3, dtype=D64))
    ws = WSConv2d(6, 2, 3, dtype=D64)
    w = ws.weight.flatten(1)
    w_hat = ((w - w.mean(1, keepdim=True)) / torch.sqrt(w.var(1, unbiased=False, keepdim=True) + 1e-5)).view_as(ws.weight)
    torch.testing.assert_close(ws(x4), F.conv2d(x4, w_hat, ws.bias))


def test_make_norm_every_kind_and_bad_input():
    for kind in NORM_KINDS:
        for dim, x in ((1, torch.randn(4, 6)), (2, torch.randn(4, 6, 3, 3))):
            if kind == "in" and dim == 1:
                with pytest.raises(ValueError, match="instance norm"):
                    make_norm(kind, 6, dim=dim)
                continue
            layer = make_norm(kind, 6, dim=dim)
            assert layer(x).shape == x.shape
    with pytest.raises(ValueError, match="valid kinds: bn"):
        make_norm("batchnorm", 4)
    with pytest.raises(ValueError, match="divid"):
        make_norm("gn", 6, groups=4)
    with pytest.raises(ValueError, match="eps"):
        make_norm("bn", 6, eps=-1.0)
    with pytest.raises(ValueError, match="dim"):
        make_norm("bn", 6, dim=3)
    with pytest.raises(ValueError, match="num_features"):
        make_norm("gn", 0)
    assert type(make_norm("bn", 3, dim=1)) is nn.BatchNorm1d
    assert type(make_norm("frozen_bn", 3)) is FrozenStatsBatchNorm2d


# ---------------------------------------------------------------------------------------------
# replace_norm
# ---------------------------------------------------------------------------------------------
def _mixed_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 16, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _structure(net: nn.Module) -> list[tuple[str, str]]:
    """Module names and types, then state_dict keys and shapes."""
    mods = [(k, type(m).__name__) for k, m in net.named_modules()]
    return mods + [(k, str(tuple(v.shape))) for k, v in net.state_dict().items()]


def test_replace_norm_roundtrip_bn_gn_bn_restores_structure():
    net = _mixed_net()
    want = _structure(net)
    replace_norm(net, "gn", groups=2)
    assert isinstance(net[1], GroupNorm) and isinstance(net[5], GroupNorm)
    assert net[1].dim == 2 and net[5].dim == 1
    assert replace_norm(net, "bn") is net
    assert _structure(net) == want
    assert net(torch.randn(2, 3, 4, 4)).shape == (2, 2)


@pytest.mark.parametrize("kind", [k for k in NORM_KINDS if k != "in"])
def test_replace_norm_every_kind_keeps_shapes(kind):
    net = _mixed_net()
    replace_norm(net, kind)
    assert net.train()(torch.randn(3, 3, 4, 4)).shape == (3, 2)
    replace_norm(net, "bn")
    assert _structure(net) == _structure(_mixed_net())


def test_replace_norm_gn_ws_retypes_convs_and_back():
    net = _mixed_net()
    w = net[0].weight
    replace_norm(net, "gn_ws")
    assert type(net[0]) is WSConv2d and net[0].weight is w
    replace_norm(net, "none")
    assert type(net[0]) is nn.Conv2d and isinstance(net[1], NormIdentity)
    replace_norm(net, "hbn")
    assert isinstance(net[1], HybridBatchNorm2d) and isinstance(net[5], HybridBatchNorm1d)


def test_replace_norm_bad_input_changes_nothing():
    net = _mixed_net()
    want = _structure(net)
    with pytest.raises(ValueError, match="valid kinds"):
        replace_norm(net, "batch")
    with pytest.raises(ValueError, match="divid"):
        replace_norm(net, "gn", groups=3)  # 4 and 8 channels
    with pytest.raises(ValueError, match="instance norm"):
        replace_norm(net, "in")  # the BatchNorm1d sits on linear features
    with pytest.raises(ValueError, match="eps"):
        replace_norm(net, "ln", eps=-1e-3)
    assert _structure(net) == want


def test_replace_norm_selects_by_type_not_name():
    net = nn.Sequential()
    net.add_module("bn_head", nn.Linear(4, 4))  # named like BN, is not BN
    net.add_module("fc", nn.BatchNorm1d(4))  # named like a linear layer, is BN
    replace_norm(net, "ln")
    assert type(net.bn_head) is nn.Linear and isinstance(net.fc, LayerNorm)


# ---------------------------------------------------------------------------------------------
# bn_modules / state_groups
# ---------------------------------------------------------------------------------------------
def _group_net() -> nn.Module:
    net = nn.Sequential()
    net.add_module("bn_proj", nn.Linear(5, 6))  # a "bn" name that is not BN
    net.add_module("layer", nn.BatchNorm1d(6))
    net.add_module("hybrid", HybridBatchNorm1d(6))
    net.add_module("frozen", nn.BatchNorm1d(6))
    net.add_module("gn", GroupNorm(6, dim=1))
    net.add_module("fbn", FederatedBatchNorm1d(6))
    net.add_module("out", nn.Linear(6, 2))
    freeze_bn_stats(net.frozen)
    return net


def test_bn_modules_select_by_type():
    names = [n for n, _ in bn_modules(_group_net())]
    assert names == ["layer", "hybrid", "frozen", "fbn"]


def test_state_groups_partition_state_dict_exactly():
    net = _group_net()
    groups = state_groups(net)
    keys = set(net.state_dict())
    union = set().union(*groups.values())
    assert union == keys
    assert sum(len(v) for v in groups.values()) == len(keys)  # disjoint
    assert groups["local"] == {"hybrid.alpha"} == local_state_keys(net)
    assert groups["bn_stats"] == {
        "layer.running_mean", "layer.running_var", "layer.num_batches_tracked",
        "hybrid.global_mean", "hybrid.global_var",
        "frozen.running_mean", "frozen.running_var", "frozen.num_batches_tracked",
        "fbn.running_mean", "fbn.running_var", "fbn.num_batches_tracked", "fbn.global_mean", "fbn.global_var",
    }
    assert groups["bn_affine"] == {f"{m}.{p}" for m in ("layer", "hybrid", "frozen", "fbn") for p in ("weight", "bias")}
    assert groups["other"] == {"bn_proj.weight", "bn_proj.bias", "gn.weight", "gn.bias", "out.weight", "out.bias"}


def test_state_groups_shared_module_keys_are_all_grouped():
    bn = nn.BatchNorm1d(3)
    net = nn.Sequential(bn, nn.Linear(3, 3), bn)  # the same layer under two names
    groups = state_groups(net)
    assert set().union(*groups.values()) == set(net.state_dict())
    assert {"0.running_mean", "2.running_mean"} <= groups["bn_stats"]


@st.composite
def random_nets(draw):
    """A random conv + linear stack with a random norm kind at every norm slot."""
    kinds = [k for k in NORM_KINDS if k != "in"]
    widths = draw(st.lists(st.sampled_from([2, 4, 6]), min_size=1, max_size=3))
    lin = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=0, max_size=2))
    layers: list[nn.Module] = []
    cin = 2
    for w in widths:
        layers += [nn.Conv2d(cin, w, 3, padding=1), make_norm(draw(st.sampled_from(kinds + ["in"])), w, dim=2),
                   nn.ReLU()]
        cin = w
    layers += [nn.Flatten()]
    width = cin * 9
    for h in lin:
        layers += [nn.Linear(width, h), make_norm(draw(st.sampled_from(kinds)), h, dim=1), nn.ReLU()]
        width = h
    layers += [nn.Linear(width, 3)]
    return nn.Sequential(*layers)


@given(random_nets(), st.sampled_from([k for k in NORM_KINDS if k != "in"]))
def test_state_groups_partition_and_replace_roundtrip_on_random_nets(net, kind):
    keys = set(net.state_dict())
    groups = state_groups(net)
    assert set().union(*groups.values()) == keys and sum(map(len, groups.values())) == len(keys)
    bns = {n for n, _ in bn_modules(net)}
    for g, ks in groups.items():
        for k in ks:
            owner = k.rsplit(".", 1)[0]
            assert (owner in bns) == (g in ("bn_stats", "bn_affine") or k.endswith(".alpha")), (g, k)
    shapes = [norm_signature(m) for m in net.modules() if is_norm_layer(m)]
    x = torch.randn(3, 2, 3, 3)
    replace_norm(net, kind)
    assert [norm_signature(m) for m in net.modules() if is_norm_layer(m)] == shapes
    assert net.train()(x).shape == (3, 3)
    replace_norm(net, "bn")
    assert all(type(m) in (nn.BatchNorm1d, nn.BatchNorm2d) for m in net.modules() if is_norm_layer(m))
    assert {n for n, _ in bn_modules(net)} >= bns


def test_replace_norm_keeps_dtype_and_mode():
    net = _mixed_net().double().eval()
    replace_norm(net, "hbn")
    assert net[1].alpha.dtype == D64 and net[1].global_var.dtype == D64 and not net[1].training
    assert net(torch.randn(2, 3, 4, 4, dtype=D64)).dtype == D64
