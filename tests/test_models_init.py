"""The ``init`` option of bnfl.models.build: default bitwise unchanged, He-normal's std, errors, config/CLI."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bnfl import models
from bnfl.models.inits import AUTHORS_INIT, INITS

torch.set_num_threads(1)

# Small instances of every kind of builder (conv nets, MLPs, the ResNet-20 family, FixUp).
SMALL = ("q_mlp_bn", "q_mlp1", "q_res", "q_scnn", "q_alex", "q_lenet", "q_fcn", "tiny_vgg", "tiny_mobilenet",
         "q_res_fixup", "resnet20", "digit_cnn", "simple_cnn")


def _state(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in net.state_dict().items()}


@pytest.mark.parametrize("name", SMALL)
def test_default_init_is_bitwise_the_class_init(name):
    # "pytorch" (the default) draws nothing: the same weights as a build without the option, and as
    # the model class itself, bit for bit.
    torch.manual_seed(3)
    before = _state(models.build(name))
    torch.manual_seed(3)
    after = _state(models.build(name, init="pytorch"))
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_default_init_equals_the_unwrapped_class():
    torch.manual_seed(0)
    direct = models.MLP(64, (32, 32), num_classes=10, norm="bn")
    torch.manual_seed(0)
    built = models.build("q_mlp_bn")
    assert all(torch.equal(a, b) for a, b in zip(direct.state_dict().values(), built.state_dict().values(),
                                                  strict=True))


def test_he_normal_std_matches_sqrt_two_over_fan():
    torch.manual_seed(0)
    net = models.build("resnet20", init="he_normal")
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    # Pool the conv weights of each width: fan_out = C_out * 9.
    for width in (16, 32, 64):
        w = torch.cat([m.weight.flatten() for m in convs if m.out_channels == width])
        expected = math.sqrt(2.0 / (width * 9))
        assert abs(w.std().item() / expected - 1) < 0.03, (width, w.std().item(), expected)
        assert abs(w.mean().item()) < 0.1 * expected
    torch.manual_seed(0)
    mlp = models.build("mlp", hidden=(512,), in_features=256, init="he_normal")
    lin = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
    w = lin[0].weight
    assert abs(w.std().item() / math.sqrt(2.0 / 256) - 1) < 0.03
    # PyTorch's default is uniform +-1/sqrt(fan_in): std 1/sqrt(3 fan_in), a factor sqrt(6) smaller.
    torch.manual_seed(0)
    default = models.build("mlp", hidden=(512,), in_features=256)
    w0 = next(m for m in default.modules() if isinstance(m, nn.Linear)).weight
    assert abs(w0.std().item() / math.sqrt(1.0 / (3 * 256)) - 1) < 0.03


def test_he_normal_leaves_biases_and_norms_and_is_seeded():
    torch.manual_seed(1)
    base = _state(models.build("q_mlp_bn"))
    torch.manual_seed(1)
    he = models.build("q_mlp_bn", init="he_normal")
    st = he.state_dict()
    for k, v in base.items():
        if k.endswith("weight") and st[k].dim() >= 2:
            assert not torch.equal(v, st[k]), k  # redrawn
        else:
            assert torch.equal(v, st[k]), k  # biases, BN affine and running stats untouched
    torch.manual_seed(1)
    again = models.build("q_mlp_bn", init="he_normal")
    assert all(torch.equal(a, b) for a, b in zip(st.values(), again.state_dict().values(), strict=True))


def test_authors_init():
    assert "resnet20" in AUTHORS_INIT
    torch.manual_seed(2)
    a = models.build("resnet20", init="authors")
    torch.manual_seed(2)
    b = models.build("resnet20")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    # The FedTAN authors' scheme: kaiming_normal_ with PyTorch's defaults, std sqrt(2 / fan_in).
    w = torch.cat([m.weight.flatten() for m in a.modules() if isinstance(m, nn.Conv2d) and m.in_channels == 64])
    assert abs(w.std().item() / math.sqrt(2.0 / (64 * 9)) - 1) < 0.03
    with pytest.raises(ValueError, match="no paper's code states.*q_mlp_bn.*'pytorch' or 'he_normal'"):
        models.build("q_mlp_bn", init="authors")


def test_bad_init_names_the_choices():
    with pytest.raises(ValueError, match="unknown init 'xavier'; choices: " + ", ".join(INITS)):
        models.build("q_mlp_bn", init="xavier")
    with pytest.raises(ValueError, match="FixUp"):
        models.build("q_res_fixup", init="he_normal")


def test_init_reaches_run_configs_and_the_train_cli(tmp_path, monkeypatch):
    from bnfl.train.config import RunConfig, build

    common = {"data": {"name": "digits", "form": "flat"}, "rounds": 1,
              "train": {"local_steps": 1, "batch_size": 8, "progress": False}}
    he = build(RunConfig.from_dict({**common, "model": {"name": "q_mlp_bn", "init": "he_normal"}}))
    default = build(RunConfig.from_dict({**common, "model": {"name": "q_mlp_bn"}}))
    w_he = next(m for m in he.model.modules() if isinstance(m, nn.Linear)).weight
    w_0 = next(m for m in default.model.modules() if isinstance(m, nn.Linear)).weight
    assert w_he.abs().max() > 1 / math.sqrt(64)  # outside PyTorch's uniform bound: He-normal
    assert w_0.abs().max() <= 1 / math.sqrt(64)
    with pytest.raises((ValueError, TypeError), match="init"):
        build(RunConfig.from_dict({**common, "model": {"name": "q_mlp_bn", "init": "bogus"}}))
    # TOML and `bnfl train --init`
    toml = tmp_path / "run.toml"
    toml.write_text('method = "fedavg+bn"\nrounds = 1\n[model]\nname = "q_mlp_bn"\ninit = "he_normal"\n'
                    '[data]\nname = "digits"\nform = "flat"\n[train]\nlocal_steps = 1\nbatch_size = 8\n')
    from bnfl.train.config import load_config

    assert load_config(toml).model["init"] == "he_normal"
    import bnfl.train.config as config_module
    from bnfl.cli import main

    seen = {}
    real_run = config_module._run  # the CLI resolves the engine once and calls _run

    def spy(cfg, **kw):
        seen["model"] = dict(cfg.model)
        return real_run(cfg, **kw)

    monkeypatch.setattr(config_module, "_run", spy)
    assert main(["train", "--config", str(toml), "--init", "pytorch", "--quiet", "--batched", "off",
                 "--out", str(tmp_path / "out")]) == 0
    assert seen["model"] == {"name": "q_mlp_bn", "init": "pytorch"}


def test_torchvision_init_draws_torchvision_scheme_by_layer_type():
    # The one initialisation of the torchvision layouts (MobileNet-v2, VGG, ResNet-50): He-normal
    # fan-out convs with zero bias, norm affine 1/0, linear N(0, 0.01) with zero bias, or linear
    # layers left alone with linear=False; HBN's alpha is not a norm weight and keeps its value.
    from bnfl.models._torchvision import torchvision_init_
    from bnfl.nn import HybridBatchNorm2d

    def net() -> nn.Sequential:
        hbn = HybridBatchNorm2d(64, alpha_init=0.5)
        return nn.Sequential(nn.Conv2d(16, 64, 3, bias=True), nn.BatchNorm2d(64), nn.GroupNorm(2, 64), hbn,
                             nn.Linear(512, 128))

    torch.manual_seed(0)
    built = net()
    for m in built.modules():  # move every affine away from 1/0 so that the init is seen
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm)):
            nn.init.normal_(m.weight)
            nn.init.normal_(m.bias)
    linear_before = _state(built[4])
    assert torchvision_init_(built, linear=False) is built
    conv, bn, gn, hbn, lin = built
    assert abs(conv.weight.std().item() / math.sqrt(2.0 / (64 * 9)) - 1) < 0.03
    assert torch.equal(conv.bias, torch.zeros(64))
    for norm in (bn, gn, hbn):
        assert torch.equal(norm.weight, torch.ones(64)) and torch.equal(norm.bias, torch.zeros(64))
    assert torch.equal(hbn.alpha, torch.full((64,), 0.5))
    assert all(torch.equal(v, lin.state_dict()[k]) for k, v in linear_before.items())
    torchvision_init_(built)
    assert abs(lin.weight.std().item() / 0.01 - 1) < 0.03 and torch.equal(lin.bias, torch.zeros(128))
