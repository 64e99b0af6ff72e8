"""Tests for bnfl.models: pinned parameter counts, shapes for every norm kind, replace_norm round trips."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bnfl import models
from bnfl.nn import (
    NORM_KINDS,
    FeatureNorm,
    HybridBatchNorm1d,
    HybridBatchNorm2d,
    bn_modules,
    is_norm_layer,
    replace_norm,
    state_groups,
)

# name -> (input shape (C, H, W) for a small test, output shape suffix after N)
SMALL = {
    "fedtan_mlp": ((1, 28, 28), (10,)),
    "mlp": ((1, 28, 28), (10,)),
    "simple_cnn": ((3, 32, 32), (10,)),
    "simple_cnn_fedfn": ((3, 32, 32), (10,)),
    "resnet20": ((3, 16, 16), (10,)),
    "resnet18": ((3, 8, 8), (10,)),
    "digit_cnn": ((3, 28, 28), (10,)),
    "alexnet_bn": ((3, 64, 64), (10,)),
    "q_mlp1": ((1, 8, 8), (10,)),
    "q_mlp_bn": ((1, 8, 8), (10,)),
    "q_res": ((1, 8, 8), (10,)),
    "q_plain": ((1, 8, 8), (10,)),
    "q_scnn": ((1, 8, 8), (10,)),
    "q_alex": ((1, 8, 8), (10,)),
    "q_fcn": ((1, 8, 8), (10, 8, 8)),
    "resnet20_fixup": ((3, 16, 16), (10,)),
    "q_res_fixup": ((1, 8, 8), (10,)),
    "lenet": ((3, 32, 32), (10,)),
    "q_lenet": ((1, 8, 8), (10,)),
    "deeplabv3plus": ((3, 32, 32), (10, 32, 32)),
    "mobilenet_v2": ((3, 32, 32), (10,)),
    "resnet50": ((3, 32, 32), (10,)),
    "vgg11": ((3, 32, 32), (10,)),
    "vgg19": ((3, 32, 32), (10,)),
    "tiny_vgg": ((1, 8, 8), (10,)),
    "tiny_mobilenet": ((1, 8, 8), (10,)),
}
QUICK = [n for n in SMALL if n.startswith(("q_", "tiny_")) or n in ("fedtan_mlp", "mlp", "simple_cnn", "resnet20")]
LARGE = ("alexnet_bn", "resnet18", "digit_cnn", "deeplabv3plus", "mobilenet_v2", "resnet50", "vgg11", "vgg19")


def n_trainable(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


def n_running_stats(m: nn.Module) -> int:
    return sum(mod.running_mean.numel() + mod.running_var.numel() for _, mod in bn_modules(m))


def test_registry_lists_every_model():
    assert sorted(SMALL) == models.available()


# ---------------------------------------------------------------------------------------------
# Pinned counts
# ---------------------------------------------------------------------------------------------
def test_resnet20_bn_counts_fedtan():
    """FedTAN Sec. 6.1: 269,722 trainable + 1,376 BN statistics = 271,098; L = 19 BN layers."""
    m = models.build("resnet20")
    assert n_trainable(m) == 269_722
    assert n_running_stats(m) == 1_376
    assert len(bn_modules(m)) == 19
    assert n_trainable(models.build("resnet20", norm="gn")) == 269_722  # GN has the same gamma, beta


def test_fedtan_mnist_mlp_counts():
    """FedTAN MNIST 784x30x10 with one BN: 23,920 trainable incl. BN gamma, beta (CATALOG §5.3)."""
    m = models.build("fedtan_mlp")
    assert n_trainable(m) == 23_920
    assert len(bn_modules(m)) == 1 and n_running_stats(m) == 60


def test_q_mlp1_counts_match_catalog():
    """CATALOG §0.4 says 2,320: 64*30+30 + 2*30 + 30*10+10 = 2,320 (the catalog is right)."""
    assert n_trainable(models.build("q_mlp1")) == 64 * 30 + 30 + 2 * 30 + 30 * 10 + 10 == 2_320


def test_simple_cnn_counts():
    """Computed from HBN Table 7 (the paper states none; CATALOG hbn-tab7 check agrees):
    156,298 (n=10) / 167,908 (n=100); 224 BN affine, 224 BN statistics, 112 HBN alphas."""
    m = models.build("simple_cnn")
    assert n_trainable(m) == 156_298
    assert n_trainable(models.build("simple_cnn", num_classes=100)) == 167_908
    g = state_groups(m)
    sd = m.state_dict()
    assert sum(sd[k].numel() for k in g["bn_affine"]) == 224
    assert n_running_stats(m) == 224
    h = models.build("simple_cnn", norm="hbn")
    assert sum(h.state_dict()[k].numel() for k in state_groups(h)["local"]) == 112
    # FC(1024, 128) as printed in Table 7
    assert m.classifier[0].in_features == 1024


def test_fedbn_models_counts():
    """Computed from FedBN Tables 3 and 9 as in the reference code (the paper states no counts;
    CATALOG fedbn-tab3/tab9 checks agree): digits CNN 14,219,210 trainable with 5,632 BN affine
    and 5,632 BN statistics; AlexNet-BN 57,063,498 trainable."""
    d = models.build("digit_cnn")
    assert n_trainable(d) == 14_219_210
    assert n_running_stats(d) == 5_632
    assert d.classifier[0].in_features == 6272  # 128 * 7 * 7
    a = models.build("alexnet_bn")
    assert n_trainable(a) == 57_063_498
    assert a.classifier[0].in_features == 9216  # 256 * 6 * 6
    assert len(bn_modules(a)) == 7


def test_resnet18_and_quick_counts():
    """Computed from the architectures (no paper states them): CIFAR ResNet-18 11,173,962;
    Q-RES has L = 7 norm layers (CATALOG §0.4); Q-PLAIN has 10 linear layers."""
    assert n_trainable(models.build("resnet18")) == 11_173_962
    # torchvision's resnet18 layout (HBN code, Tiny-ImageNet): its well-known 11,689,512 at 1000 classes
    assert n_trainable(models.build("resnet18", stem="imagenet", num_classes=1000)) == 11_689_512
    m = models.build("resnet18", stem="imagenet", num_classes=200)
    assert m(torch.randn(2, 3, 64, 64)).shape == (2, 200)
    with pytest.raises(ValueError, match="stem"):
        models.build("resnet18", stem="vgg")
    q = models.build("q_res")
    assert len(bn_modules(q)) == 7
    assert sum(isinstance(m, nn.Linear) for m in models.build("q_plain").modules()) == 10
    assert len(bn_modules(models.build("q_mlp_bn"))) == 2
    assert len(bn_modules(models.build("q_plain", norm="none"))) == 0


# ---------------------------------------------------------------------------------------------
# Shapes with every norm kind, replace_norm round trips
# ---------------------------------------------------------------------------------------------
def _has_linear_norm(name: str) -> bool:
    return any(isinstance(m, nn.BatchNorm1d) for m in models.build(name).modules())


@pytest.mark.parametrize("name", QUICK)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_every_quick_model_every_norm_forward_backward(name, kind):
    shape, out = SMALL[name]
    if kind == "in" and _has_linear_norm(name):
        with pytest.raises(ValueError, match="instance norm"):
            models.build(name, norm=kind, input_size=shape[1])
        return
    torch.manual_seed(0)
    m = models.build(name, norm=kind, input_size=shape[1])
    y = m.train()(torch.randn(4, *shape))
    assert y.shape == (4, *out)
    y.square().mean().backward()
    assert all(p.grad is not None for p in m.parameters())
    assert m.eval()(torch.randn(2, *shape)).shape == (2, *out)


@pytest.mark.parametrize("name", list(SMALL))
def test_replace_norm_roundtrip_preserves_structure_and_shapes(name):
    shape, out = SMALL[name]
    torch.manual_seed(0)
    m = models.build(name, input_size=shape[1])
    want_mods = [(k, type(v).__name__) for k, v in m.named_modules()]
    want_state = {k: v.shape for k, v in m.state_dict().items()}
    home = "fedfn" if name == "simple_cnn_fedfn" else "bn"
    for kind in ("gn", "hbn", "none", "gn_ws", home):
        replace_norm(m, kind)
    assert [(k, type(v).__name__) for k, v in m.named_modules()] == want_mods
    assert {k: v.shape for k, v in m.state_dict().items()} == want_state
    if name not in LARGE:
        replace_norm(m, "gn")
        assert m(torch.randn(2, *shape)).shape == (2, *out)


def test_large_models_forward_small_inputs():
    """Shapes only, so on the ``meta`` device (no memory, no initialisation: VGG-19 is 144M parameters)."""
    for name in LARGE:
        shape, out = SMALL[name]
        with torch.device("meta"):
            m = models.build(name, input_size=shape[1]).eval()
            with torch.no_grad():
                assert m(torch.randn(2, *shape)).shape == (2, *out)


def test_hbn_models_have_only_hybrid_bn():
    m = models.build("resnet20", norm="hbn")
    assert len(bn_modules(m)) == 19
    assert all(isinstance(b, (HybridBatchNorm1d, HybridBatchNorm2d)) for _, b in bn_modules(m))


def test_simple_cnn_fedfn_layout():
    """HBN App. B.1: FedFN variant has no norm in the blocks, FN before the head."""
    m = models.build("simple_cnn_fedfn")
    norms = [mod for mod in m.modules() if is_norm_layer(mod)]
    assert len(norms) == 1 and isinstance(norms[0], FeatureNorm) and norms[0] is m.head_norm
    assert norms[0].num_features == 1024


# ---------------------------------------------------------------------------------------------
# Determinism, options, errors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", QUICK)
def test_same_seed_same_weights(name):
    torch.manual_seed(3)
    a = models.build(name).state_dict()
    torch.manual_seed(3)
    b = models.build(name).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_build_options_pass_through():
    m = models.build("q_scnn", norm="gn", groups=4)
    assert all(mod.num_groups == 4 for mod in m.modules() if isinstance(mod, nn.GroupNorm))
    m = models.build("q_mlp_bn", momentum=0.3, eps=1e-3)
    assert all(b.momentum == 0.3 and b.eps == 1e-3 for _, b in bn_modules(m))
    m = models.build("mlp", hidden=(7, 5), input_size=4, in_channels=2, num_classes=3)
    assert m(torch.randn(6, 2, 4, 4)).shape == (6, 3)
    m = models.build("simple_cnn", in_channels=1, input_size=28, num_classes=100)
    assert m(torch.randn(2, 1, 28, 28)).shape == (2, 100)


def test_build_bad_input():
    with pytest.raises(ValueError, match="available: alexnet_bn"):
        models.build("resnet101")
    with pytest.raises(ValueError, match="valid kinds"):
        models.build("resnet20", norm="batchnorm")
    with pytest.raises(ValueError, match="divid"):
        models.build("resnet20", norm="gn", groups=3)
    with pytest.raises(ValueError, match="eps"):
        models.build("q_mlp1", eps=-1e-5)
    with pytest.raises(ValueError, match="num_classes"):
        models.build("q_mlp1", num_classes=0)
    with pytest.raises(ValueError, match="too small"):
        models.build("simple_cnn", input_size=4)


def test_quick_model_trains_on_a_fixed_batch():
    """Sanity: a few SGD steps lower the loss of Q-RES with BN and with GN."""
    for kind in ("bn", "gn"):
        torch.manual_seed(0)
        m = models.build("q_res", norm=kind)
        x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        first = F.cross_entropy(m(x), y).item()
        for _ in range(30):
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
        assert F.cross_entropy(m(x), y).item() < 0.7 * first


def test_build_for_derives_input_from_shape():
    torch.manual_seed(0)
    cnn = models.build_for("q_scnn", (3, 8, 8), num_classes=4)
    assert cnn(torch.randn(2, 3, 8, 8)).shape == (2, 4)
    mlp = models.build_for("q_mlp1", (64,), num_classes=5)  # flat 64 = 1 x 8 x 8
    assert mlp(torch.randn(2, 64)).shape == (2, 5)
    # options given explicitly win over the derived ones
    wide = models.build_for("mlp", (10,), num_classes=3, in_features=10)
    assert wide(torch.randn(2, 10)).shape == (2, 3)


def test_build_for_matches_build():
    torch.manual_seed(0)
    a = models.build_for("q_res", (1, 8, 8), num_classes=10, norm="gn")
    torch.manual_seed(0)
    b = models.build("q_res", num_classes=10, in_channels=1, input_size=8, norm="gn")
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)


@pytest.mark.parametrize(
    ("name", "shape", "match"),
    [
        ("q_mlp1", (10,), "not a square image"),
        ("q_scnn", (64,), r"takes \(C, H, W\) inputs"),
        ("q_mlp1", (8, 8), "input_shape must be"),
        ("no_such_model", (1, 8, 8), "unknown model"),
    ],
)
def test_build_for_rejects_bad_shapes(name, shape, match):
    with pytest.raises(ValueError, match=match):
        models.build_for(name, shape, num_classes=10)
