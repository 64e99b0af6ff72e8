"""Tests for HBN Table 5's models (MobileNet-v2, ResNet-50, VGG-11/19), the quick stand-ins
tiny_vgg / tiny_mobilenet, and pretrained weights from a local state_dict file.

Reference parameter counts are those of the published architectures as torchvision builds them
(torchvision does not import here): torchvision's model documentation lists ``mobilenet_v2``
3,504,872; ``resnet50`` 25,557,032; ``vgg11`` 132,863,336; ``vgg11_bn`` 132,868,840; ``vgg19``
143,667,240; ``vgg19_bn`` 143,678,248 (all with 1000 classes). The torchvision state_dict key
names asserted below are those of its ImageNet weight files.
"""

from __future__ import annotations

import hashlib
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bnfl import models
from bnfl.fl import hbn_client_stats
from bnfl.models import MobileNetV2, ResNet18, load_pretrained
from bnfl.nn import HybridBatchNorm2d, bn_modules, is_norm_layer

PAPER = ("mobilenet_v2", "resnet50", "vgg11", "vgg19")
TINY = ("tiny_vgg", "tiny_mobilenet")


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def n_norm_affine(m: nn.Module) -> int:
    return sum(p.numel() for mod in m.modules() if is_norm_layer(mod) for p in mod.parameters(recurse=False))


# ---------------------------------------------------------------------------------------------
# Parameter counts (1000 classes), with the norm swapped
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "bn_count", "none_count", "norm_layers"),
    [
        ("mobilenet_v2", 3_504_872, 3_504_872 - 34_112, 52),
        ("resnet50", 25_557_032, 25_557_032 - 53_120, 53),
        ("vgg11", 132_868_840, 132_863_336, 8),
        ("vgg19", 143_678_248, 143_667_240, 16),
    ],
)
def test_paper_models_match_the_standard_parameter_counts(name, bn_count, none_count, norm_layers):
    """BN counts are torchvision's (module docstring); "none" drops the norm affine parameters
    (VGG: torchvision's plain vgg11 / vgg19); GN has the same affine count as BN; HBN adds one
    alpha per channel (half the BN affine count). Built on the meta device: counting needs no
    memory (VGG's 4096-wide FC layers would take seconds to initialise)."""
    with torch.device("meta"):
        _check_standard_counts(name, bn_count, none_count, norm_layers)


def _check_standard_counts(name, bn_count, none_count, norm_layers):
    bn = models.build(name, num_classes=1000)
    assert n_params(bn) == bn_count
    assert len(bn_modules(bn)) == norm_layers
    affine = n_norm_affine(bn)
    assert bn_count - affine == none_count
    del bn
    assert n_params(models.build(name, num_classes=1000, norm="gn")) == bn_count
    assert n_params(models.build(name, num_classes=1000, norm="none")) == none_count
    hbn = models.build(name, num_classes=1000, norm="hbn")
    assert n_params(hbn) == bn_count + affine // 2
    assert len(bn_modules(hbn)) == norm_layers
    assert all(isinstance(b, HybridBatchNorm2d) for _, b in bn_modules(hbn))


def test_torchvision_key_layout():
    """Names and shapes of torchvision's state_dict entries (its weight files), entry counts
    computed from the architecture: convs + 5 entries per BN + 2 per linear layer."""
    sd = models.build("mobilenet_v2", num_classes=1000).state_dict()
    assert len(sd) == 52 + 5 * 52 + 2
    shapes = {
        "features.0.0.weight": (32, 3, 3, 3), "features.0.1.running_var": (32,),
        "features.1.conv.0.0.weight": (32, 1, 3, 3), "features.1.conv.1.weight": (16, 32, 1, 1),
        "features.1.conv.2.running_mean": (16,), "features.2.conv.0.0.weight": (96, 16, 1, 1),
        "features.2.conv.1.0.weight": (96, 1, 3, 3), "features.2.conv.2.weight": (24, 96, 1, 1),
        "features.2.conv.3.weight": (24,), "features.17.conv.2.weight": (320, 960, 1, 1),
        "features.18.0.weight": (1280, 320, 1, 1), "classifier.1.weight": (1000, 1280),
    }
    assert {k: tuple(sd[k].shape) for k in shapes} == shapes
    r = models.build("resnet50", num_classes=1000)
    sd = r.state_dict()
    assert len(sd) == 53 + 5 * 53 + 2
    shapes = {
        "conv1.weight": (64, 3, 7, 7), "bn1.running_var": (64,), "layer1.0.conv1.weight": (64, 64, 1, 1),
        "layer1.0.downsample.0.weight": (256, 64, 1, 1), "layer1.0.downsample.1.num_batches_tracked": (),
        "layer2.0.conv2.weight": (128, 128, 3, 3), "layer3.5.bn3.weight": (1024,),
        "layer4.2.conv3.weight": (2048, 512, 1, 1), "fc.weight": (1000, 2048),
    }
    assert {k: tuple(sd[k].shape) for k in shapes} == shapes
    assert "layer1.1.downsample.0.weight" not in sd
    # v1.5: the stride sits on the 3x3 conv, not on the first 1x1
    assert r.layer2[0].conv1.stride == (1, 1) and r.layer2[0].conv2.stride == (2, 2)
    for name, convs, last in (("vgg11", 8, 25), ("vgg19", 16, 49)):
        sd = models.build(name, num_classes=1000).state_dict()
        assert len(sd) == 2 * convs + 5 * convs + 6
        assert tuple(sd[f"features.{last}.weight"].shape) == (512, 512, 3, 3)
        assert f"features.{last + 1}.running_mean" in sd
        shapes = {"features.0.weight": (64, 3, 3, 3), "features.1.weight": (64,), "classifier.0.weight": (4096, 25088),
                  "classifier.3.weight": (4096, 4096), "classifier.6.weight": (1000, 4096)}
        assert {k: tuple(sd[k].shape) for k in shapes} == shapes


def test_resnet18_and_cifar_resnets_unchanged_by_the_resnet50_addition():
    """Pinned before ResNet-50 was added to resnet.py: same weights (sha256 of the state_dict)
    and the same RNG draws after building, for a fixed seed."""
    pinned = {
        ("resnet18", ()): ("ced9cc387ff1756d", 0.398586630821228),
        ("resnet18", (("stem", "imagenet"),)): ("1843bdf953a15c14", 0.4944571852684021),
        ("resnet20", ()): ("00929a4fb0408f93", 0.27564483880996704),
        ("q_res", (("norm", "gn"),)): ("2687d13b9820a028", 0.792134702205658),
    }
    for (name, kw), (digest, draw) in pinned.items():
        torch.manual_seed(0)
        m = models.build(name, **dict(kw))
        h = hashlib.sha256()
        for k, v in m.state_dict().items():
            h.update(k.encode())
            h.update(v.detach().double().numpy().tobytes())
        assert (h.hexdigest()[:16], torch.rand(1).item()) == (digest, draw), name


# ---------------------------------------------------------------------------------------------
# Inputs, options, errors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet50"])
def test_global_pooling_models_take_cifar_and_tiny_imagenet_sizes(name):
    torch.manual_seed(0)
    m = models.build(name, num_classes=100)
    for side in (32, 64):
        y = m.train()(torch.randn(2, 3, side, side))
        assert y.shape == (2, 100)
    y.sum().backward()
    assert all(p.grad is not None for p in m.parameters())


def test_vgg_heads_and_sizes():
    """HBN feeds 32x32 CIFAR-100 to torchvision's head (7x7 pool of a 1x1 map: 25088 inputs);
    head="cifar" is global pool + one FC; fewer than 32 pixels cannot pass 5 max-pools."""
    torch.manual_seed(0)
    m = models.build("vgg11", num_classes=100, hidden=64)  # narrow hidden FC keeps the test light
    assert m.classifier[0].in_features == 512 * 7 * 7
    assert not any(isinstance(x, nn.Dropout) for x in m.modules())  # HBN removes the dropout
    assert m.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 100)
    c = models.build("vgg11", num_classes=100, head="cifar")
    assert [type(x) for x in c.classifier] == [nn.Linear] and c.classifier[0].in_features == 512
    assert c.train()(torch.randn(2, 3, 32, 32)).shape == (2, 100)
    assert n_params(c) == n_params(models.build("vgg11", num_classes=100, norm="bn", head="cifar"))
    d = models.build("vgg11", num_classes=10, hidden=64, dropout=0.5)
    assert sum(isinstance(x, nn.Dropout) for x in d.modules()) == 2
    assert sum(isinstance(x, nn.Dropout) for x in models.build("mobilenet_v2", dropout=0.2).modules()) == 1
    with pytest.raises(ValueError, match="too small"):
        models.build("vgg11", input_size=16)
    with pytest.raises(ValueError, match="at least 32x32"):
        c(torch.randn(2, 3, 16, 16))
    with pytest.raises(ValueError, match="head must be"):
        models.build("vgg19", head="tiny")
    with pytest.raises(ValueError, match="dropout"):
        models.build("mobilenet_v2", dropout=1.0)
    with pytest.raises(ValueError, match="stem"):
        models.build("resnet50", stem="vgg")


def test_resnet50_cifar_stem_and_in_channels():
    m = models.build("resnet50", stem="cifar", in_channels=1, num_classes=10)
    assert m.conv1.weight.shape == (64, 1, 3, 3) and isinstance(m.maxpool, nn.Identity)
    assert m.eval()(torch.randn(2, 1, 32, 32)).shape == (2, 10)


# ---------------------------------------------------------------------------------------------
# Quick stand-ins
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("kind", ["bn", "gn", "hbn", "none", "gn_ws", "fbn", "ln"])
def test_tiny_models_every_norm_forward_backward(name, kind):
    torch.manual_seed(0)
    m = models.build(name, norm=kind)
    y = m.train()(torch.randn(4, 1, 8, 8))
    assert y.shape == (4, 10)
    y.square().mean().backward()
    assert all(p.grad is not None for p in m.parameters())
    assert m.eval()(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    norms = [x for x in m.modules() if is_norm_layer(x)]
    assert len(norms) == (6 if name == "tiny_vgg" else 1 + 2 + 4 * 3 + 1)  # stem, t=1 block, 4 t=4 blocks, last conv


def test_tiny_model_layouts():
    """tiny-VGG: 6 3x3 convs (CATALOG hbn-tab5); tiny-MobileNet: inverted residual blocks with
    depthwise 3x3 convs (groups = channels) and identity shortcuts where shapes allow."""
    v = models.build("tiny_vgg")
    convs = [x for x in v.modules() if isinstance(x, nn.Conv2d)]
    assert len(convs) == 6 and all(c.kernel_size == (3, 3) for c in convs)
    assert sum(isinstance(x, nn.MaxPool2d) for x in v.modules()) == 3
    t = models.build("tiny_mobilenet", in_channels=3, num_classes=4)
    dw = [x for x in t.modules() if isinstance(x, nn.Conv2d) and x.groups > 1]
    assert len(dw) == 5 and all(c.groups == c.in_channels == c.out_channels for c in dw)
    assert [b.use_res_connect for b in t.features[1:-1]] == [False, False, True, False, True]
    assert t(torch.randn(2, 3, 8, 8)).shape == (2, 4)
    assert models.build("tiny_vgg", input_size=16)(torch.randn(2, 1, 16, 16)).shape == (2, 10)
    with pytest.raises(ValueError, match="too small"):
        models.build("tiny_vgg", input_size=4)


def test_tiny_model_counts():
    """Computed by hand from the layouts (10 classes, BN): tiny-VGG convs 3x3 with bias
    1-16-16-32-32-64-64, BN affine 2 x 224, FC 64-10; tiny-MobileNet: stem 3x3 to 16, blocks
    (t, c) = (1, 8), (4, 16) x2, (4, 32) x2, 1x1 conv to 64, FC 64-10 (convs without bias)."""
    convs = sum(a * b * 9 + b for a, b in ((1, 16), (16, 16), (16, 32), (32, 32), (32, 64), (64, 64)))
    assert n_params(models.build("tiny_vgg")) == convs + 2 * 224 + 650 == 72_890

    def block(cin: int, cout: int, t: int) -> int:  # [expand 1x1 + BN], depthwise 3x3 + BN, project 1x1 + BN
        h = cin * t
        return (cin * h + 2 * h if t != 1 else 0) + 9 * h + 2 * h + h * cout + 2 * cout

    total = (9 * 16 + 32) + block(16, 8, 1) + block(8, 16, 4) + block(16, 16, 4) + block(16, 32, 4) \
        + block(32, 32, 4) + (32 * 64 + 128) + 650
    assert n_params(models.build("tiny_mobilenet")) == total == 21_338


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("kind", ["bn", "gn", "hbn"])
def test_tiny_models_train_on_a_fixed_batch(name, kind):
    """A few SGD steps lower the loss (the models can learn, with any norm). HBN gets its global
    statistics as in its first round: eq. 7 on the data, eq. 8 with one client (unbiased)."""
    torch.manual_seed(0)
    m = models.build(name, norm=kind)
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    if kind == "hbn":
        with torch.no_grad():
            moments = hbn_client_stats(m, x)
        for layer_name, layer in bn_modules(m):
            mom = moments[layer_name]
            layer.set_global_stats(mom.mean, mom.var * mom.count / (mom.count - 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    first = F.cross_entropy(m(x), y).item()
    for _ in range(30):
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    assert F.cross_entropy(m(x), y).item() < 0.7 * first


@pytest.mark.parametrize("name", [*TINY, "mobilenet_v2"])
def test_same_seed_same_weights(name):
    torch.manual_seed(5)
    a = models.build(name).state_dict()
    torch.manual_seed(5)
    b = models.build(name).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", [*TINY, "mobilenet_v2", "resnet50", "vgg11"])
def test_forward_has_no_cpu_only_step(name):
    """``--device cuda`` stays possible: the forward runs on the meta device (no tensor made
    on the CPU, no .numpy()/.item() inside)."""
    kw = {"hidden": 64} if name == "vgg11" else {}
    shape = (1, 8, 8) if name in TINY else (3, 32, 32)
    for kind in ("bn", "hbn"):
        m = models.build(name, norm=kind, **kw).to("meta")
        assert m.train()(torch.randn(2, *shape, device="meta")).shape == (2, 10)


# ---------------------------------------------------------------------------------------------
# Pretrained weights from a local file
# ---------------------------------------------------------------------------------------------
def _fit(m: nn.Module, shape: tuple[int, ...], steps: int = 2) -> nn.Module:
    """Move weights and BN statistics away from their initial values."""
    x = torch.randn(8, *shape)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        m.train()(x).square().mean().backward()
        opt.step()
    return m


@pytest.fixture(scope="module")
def mbv2_file(tmp_path_factory):
    torch.manual_seed(1)
    m = _fit(models.build("mobilenet_v2", num_classes=1000), (3, 32, 32))
    path = tmp_path_factory.mktemp("weights") / "mobilenet_v2.pth"
    torch.save(m.state_dict(), path)
    return path, m.eval()


def test_pretrained_roundtrip_gives_equal_outputs(mbv2_file):
    path, ref = mbv2_file
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a full fit warns about nothing
        m = models.build("mobilenet_v2", num_classes=1000, weights=str(path)).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(m(x), ref(x))
    report = load_pretrained(models.build("mobilenet_v2", num_classes=1000), path)
    assert len(report.loaded) == len(ref.state_dict()) and not report.kept
    assert not report.skipped_head and not report.skipped_norm


def test_pretrained_other_class_count_skips_the_head(mbv2_file):
    path, ref = mbv2_file
    torch.manual_seed(3)
    fresh = models.build("mobilenet_v2", num_classes=100)
    head0 = fresh.classifier[1].weight.detach().clone()
    with pytest.warns(UserWarning, match=r"head 'classifier.1' left at its initialisation"):
        report = load_pretrained(fresh, path)
    assert report.skipped_head == ("classifier.1.bias", "classifier.1.weight")
    assert set(report.kept) == {"classifier.1.weight", "classifier.1.bias"}
    assert torch.equal(fresh.classifier[1].weight, head0)
    with torch.no_grad():  # the features are the file's
        x = torch.randn(2, 3, 32, 32)
        assert torch.equal(fresh.eval().features(x), ref.features(x))


@pytest.mark.parametrize("kind", ["gn", "hbn", "none"])
def test_pretrained_into_other_norm_kinds_loads_convs_only(mbv2_file, kind):
    path, ref = mbv2_file
    m = models.build("mobilenet_v2", num_classes=1000, norm=kind)
    with pytest.warns(UserWarning, match="norm-layer entries skipped"):
        report = load_pretrained(m, path)
    assert len(report.skipped_norm) == 5 * 52  # every BN entry of the file
    assert all(".running_" in k or k.endswith((".weight", ".bias", ".num_batches_tracked"))
               for k in report.skipped_norm)
    convs = [k for k, v in ref.state_dict().items() if v.dim() == 4] + ["classifier.1.weight", "classifier.1.bias"]
    got = m.state_dict()
    assert all(torch.equal(got[k], ref.state_dict()[k]) for k in convs)
    assert set(report.loaded) == set(convs)
    if kind == "hbn":  # alpha and the global statistics stay at their initialisation
        assert {k.rsplit(".", 1)[1] for k in report.kept} == {"weight", "bias", "alpha", "global_mean", "global_var"}
        assert all(torch.all(b.alpha == 0) for _, b in bn_modules(m))


def test_pretrained_norm_state_false_keeps_fresh_bn(mbv2_file):
    """HBN's reference code: torchvision's pretrained model, every BatchNorm2d then replaced."""
    path, ref = mbv2_file
    m = models.build("mobilenet_v2", num_classes=1000)
    with pytest.warns(UserWarning, match="norm_state=False"):
        load_pretrained(m, path, norm_state=False)
    assert all(torch.all(b.running_var == 1) and torch.all(b.weight == 1) for _, b in bn_modules(m))
    assert torch.equal(m.features[0][0].weight, ref.features[0][0].weight)


def test_pretrained_errors(mbv2_file, tmp_path):
    path, _ = mbv2_file
    missing = tmp_path / "nowhere" / "resnet50.pth"
    with pytest.raises(FileNotFoundError, match=r"nowhere/resnet50.pth.*downloads nothing"):
        models.build("resnet50", weights=missing)
    with pytest.raises(ValueError, match="does not fit ResNet50"):
        load_pretrained(models.build("resnet50", num_classes=1000), path)
    with pytest.raises(ValueError, match=r"features.0.0.weight.*\(32, 3, 3, 3\).*\(32, 1, 3, 3\)"):
        load_pretrained(models.build("mobilenet_v2", num_classes=1000, in_channels=1), path)
    junk = tmp_path / "junk.pth"
    torch.save([1, 2, 3], junk)
    with pytest.raises(ValueError, match="does not hold a state_dict"):
        load_pretrained(models.build("tiny_vgg"), junk)


def test_pretrained_resnet50_checkpoint_wrapper_and_head(tmp_path):
    """A {"state_dict": ...} checkpoint with DataParallel's "module." prefix; 1000 -> 200 classes."""
    torch.manual_seed(4)
    src = models.build("resnet50", num_classes=1000, stem="cifar")
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in src.state_dict().items()}, "epoch": 3}, path)
    with pytest.warns(UserWarning, match="head 'fc'"):
        m = models.build("resnet50", num_classes=200, stem="cifar", weights=path)
    assert torch.equal(m.layer4[2].conv3.weight, src.layer4[2].conv3.weight)
    assert m.fc.weight.shape == (200, 2048)


def test_pretrained_plain_vgg_file_fills_the_convs_in_order(tmp_path):
    """torchvision's vgg11/vgg19 files have no BN: conv, ReLU per conv, so the features indices
    differ from the vgg*_bn layout; the convs are matched in order and BN keeps its init."""
    torch.manual_seed(5)
    src = models.build("tiny_vgg", norm="none")
    cfg = (16, 16, "M", 32, 32, "M", 64, 64, "M")
    plain, i = [], 0  # torchvision's plain layout: conv index advances by 2 per conv, 1 per pool
    for v in cfg:
        if v != "M":
            plain.append(i)
        i += 1 if v == "M" else 2
    ours = [j for j, x in enumerate(src.features) if isinstance(x, nn.Conv2d)]
    sd = {k: v for k, v in src.state_dict().items() if not k.startswith("features.")}
    for p, o in zip(plain, ours, strict=True):
        sd[f"features.{p}.weight"] = src.features[o].weight.detach()
        sd[f"features.{p}.bias"] = src.features[o].bias.detach()
    path = tmp_path / "plain.pth"
    torch.save(sd, path)
    m = models.build("tiny_vgg")  # BN in the norm slots
    report = load_pretrained(m, path)
    assert all(torch.equal(m.features[o].weight, src.features[o].weight) for o in ours)
    assert len(report.kept) == 5 * 6 and not report.skipped_norm
    n = models.build("tiny_vgg", norm="none", weights=path).eval()
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(n(x), src.eval()(x))


def test_pretrained_torchvision_resnet18_names(tmp_path):
    """torchvision's resnet18 keys (bn1, layerI.B, downsample) load into bnfl's ResNet18."""
    torch.manual_seed(6)
    src = _fit_resnet18()
    sd = {"conv1.weight": src.conv1.weight, "fc.weight": src.fc.weight, "fc.bias": src.fc.bias}
    bn_keys = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    sd.update({f"bn1.{k}": getattr(src.norm1, k) for k in bn_keys})
    for i, stage in enumerate(src.stages, start=1):
        for b, block in enumerate(stage):
            for j in (1, 2):
                sd[f"layer{i}.{b}.conv{j}.weight"] = getattr(block, f"conv{j}").weight
                sd.update({f"layer{i}.{b}.bn{j}.{k}": getattr(getattr(block, f"norm{j}"), k) for k in bn_keys})
            if isinstance(block.shortcut, nn.Sequential):
                sd[f"layer{i}.{b}.downsample.0.weight"] = block.shortcut[0].weight
                sd.update({f"layer{i}.{b}.downsample.1.{k}": getattr(block.shortcut[1], k) for k in bn_keys})
    assert len(sd) == len(src.state_dict())
    path = tmp_path / "resnet18.pth"
    torch.save({k: v.detach().clone() for k, v in sd.items()}, path)
    m = models.build("resnet18", stem="imagenet", num_classes=10, weights=path).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(m(x), src.eval()(x))


def _fit_resnet18() -> ResNet18:
    m = ResNet18(stem="imagenet", num_classes=10)
    x = torch.randn(4, 3, 32, 32)
    m.train()(x)  # running statistics move off their init
    return m


def test_mobilenet_class_rejects_bad_settings():
    with pytest.raises(ValueError, match="settings"):
        MobileNetV2(settings=((6, 24, 0, 2),))
    with pytest.raises(ValueError, match="stride"):
        MobileNetV2(settings=((6, 24, 1, 3),))
