"""Defining tests of the pieces FixBN compares (FixBN Secs. 3.3, 3.4, Tables 4-5, Fig. 2)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bnfl import fl, models
from bnfl.fl.statistics_log import StatisticsLog
from bnfl.models import FixupResNet, LeNet
from bnfl.nn import bn_modules, make_norm
from bnfl.nn.recalibrate import bn_statistics, recalibrate_bn

SPEC = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
        "partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5}, "rounds": 3,
        "train": {"local_steps": 2, "batch_size": 16, "lr": 0.1, "eval_every": 3, "progress": False,
                  "batched": "off"}}


# -- recalibrate_bn (Sec. 3.4) -------------------------------------------------------------------
def test_recalibrate_bn_one_batch_gives_its_batch_statistics_and_keeps_weights():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2), nn.BatchNorm1d(2)).eval()
    before = {k: v.clone() for k, v in net.named_parameters()}
    x = torch.randn(50, 4) * 3 + 1
    recalibrate_bn(net, x, batch_size=50)
    h = net[0](x)
    assert torch.allclose(net[1].running_mean, h.mean(0), atol=1e-5)
    assert torch.allclose(net[1].running_var, h.var(0, unbiased=True), atol=1e-4)
    # the second layer's statistics see the first normalised by its batch statistics (training mode)
    z = net[3](torch.relu(nn.functional.batch_norm(h, None, None, net[1].weight, net[1].bias, True)))
    assert torch.allclose(net[4].running_mean, z.mean(0), atol=1e-5)
    assert all(torch.equal(v, before[k]) for k, v in net.named_parameters())
    assert not net.training and net[1].momentum == 0.1


def test_recalibrate_bn_averages_batches_and_rejects_bad_input():
    torch.manual_seed(1)
    bn = nn.BatchNorm1d(2)
    x = torch.randn(40, 2)
    recalibrate_bn(bn, x, batch_size=10)
    want = torch.stack([x[i:i + 10].mean(0) for i in range(0, 40, 10)]).mean(0)
    assert torch.allclose(bn.running_mean, want, atol=1e-6)
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        recalibrate_bn(bn, x, batch_size=1)
    with pytest.raises(ValueError, match="at least one sample"):
        recalibrate_bn(bn, x[:0])


# -- HeteroFL static BN --------------------------------------------------------------------------
def test_static_bn_normalises_with_the_test_batch_and_keeps_no_statistics():
    bn = make_norm("static_bn", 3, dim=1).eval()
    assert bn.running_mean is None and not dict(bn.named_buffers())
    x = torch.randn(20, 3) * 5 + 2
    assert torch.allclose(bn(x).mean(0), torch.zeros(3), atol=1e-5)  # eval mode: batch statistics
    net = models.build("q_mlp_bn", norm="static_bn")
    assert bn_modules(net) and all(m.running_mean is None for _, m in bn_modules(net))


def test_heterofl_method_trains():
    h = fl.build({**SPEC, "method": "heterofl"}).run()
    assert 0.0 <= h.rows[-1]["test_acc"] <= 1.0


# -- decoupled statistics (Sec. 3.3) -------------------------------------------------------------
def test_decoupled_sets_global_stats_to_the_weighted_client_statistics_and_trains_in_eval_mode():
    sim = fl.build({**SPEC, "method": "decoupled-bn", "rounds": 1})
    w0 = {k: v.clone() for k, v in sim.global_state.items()}
    model = sim.global_model()
    stats = []
    for idx in sim.client_indices:
        model.load_state_dict(w0)
        recalibrate_bn(model, sim.x_train[torch.as_tensor(idx)], batch_size=16)
        stats.append(bn_statistics(model))
    p = sim.weights(list(range(sim.num_clients)))
    before = {k: v.clone() for k, v in sim.global_state.items()}
    update = sim.algorithm.begin_round(sim.server, 1, list(range(sim.num_clients)), sim.global_state)
    assert all(torch.equal(before[k], v) for k, v in sim.global_state.items())  # pure: the state is not touched
    for layer in stats[0]:
        want = sum(pi * s[layer][0] for pi, s in zip(p, stats, strict=True))
        assert torch.allclose(update[f"{layer}.running_mean"], want, atol=1e-5)
    assert sim.algorithm.frozen_stats(1)
    sim2 = fl.build({**SPEC, "method": "decoupled-bn", "rounds": 2})
    sim2.run()
    assert sim2.channel.counters()["rounds"] == 4  # statistics + model, each round


# -- FixUp ResNet and LeNet ------------------------------------------------------------------------
def test_fixup_resnet_has_no_norm_zero_branches_and_is_identity_at_init():
    torch.manual_seed(0)
    net = models.build("resnet20_fixup")
    assert isinstance(net, FixupResNet)
    assert not any(isinstance(m, nn.modules.batchnorm._NormBase | nn.GroupNorm) for m in net.modules())
    assert sum(p.numel() for p in net.parameters()) == 268_346 + 9 * 5 + 2  # ResNet-20 convs+fc + scalars
    for b in net.blocks:
        assert torch.count_nonzero(b.conv2.weight) == 0 and float(b.scale.detach()) == 1.0
        # He std rescaled by L^(-1/2), L = 9 branches
        want = math.sqrt(2.0 / (b.conv1.weight.shape[0] * 9)) / 3.0
        assert abs(float(b.conv1.weight.std()) - want) / want < 0.15
    assert torch.count_nonzero(net.fc.weight) == 0
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(net(x), torch.zeros(2, 10))  # zero classifier at init
    net.fc.weight.data.normal_()
    net(x).sum().backward()
    assert net.blocks[0].conv2.weight.grad.abs().sum() > 0  # zero-init layers still learn


def test_lenet_parameter_counts():
    assert sum(p.numel() for p in models.build("lenet").parameters()) == 62_050  # LeNet-5 + 2 BN layers
    assert sum(p.numel() for p in models.build("q_lenet").parameters()) == 6_106
    assert isinstance(models.build("lenet", norm="gn"), LeNet)
    with pytest.raises(ValueError, match="too small"):
        LeNet(input_size=8)


# -- statistics log (Fig. 2) -------------------------------------------------------------------
def test_statistics_log_global_distance_is_the_change_of_the_averaged_statistics():
    sim = fl.build({**SPEC, "method": "fedavg+bn", "rounds": 3})
    log = StatisticsLog(window=2)
    seen = []
    sim.round_hooks.append(log)
    sim.round_hooks.append(lambda s, r: seen.append({k: v.clone() for k, v in s.global_state.items()}))
    h = sim.run()
    keys = [k for k in seen[0] if k.endswith(("running_mean", "running_var"))]
    d = sum(float((seen[2][k].double() - seen[1][k].double()).abs().sum()) for k in keys)
    assert h.rows[2]["stats_global_l1"] == pytest.approx(d, rel=1e-6)
    assert math.isnan(h.rows[0]["stats_window_var"]) and h.rows[2]["stats_window_var"] >= 0
    assert all(r["stats_local_l1"] > 0 for r in h.rows)
    with pytest.raises(ValueError, match="window"):
        StatisticsLog(window=1)


def test_centralized_fixbn_pools_the_data_and_freezes_after_t_star():
    sim = fl.build({**SPEC, "method": "centralized+fixbn", "rounds": 4})
    assert sim.num_clients == 1 and sim.batch_size == 16 * 5
    h = sim.run()
    assert [r["frozen_stats"] for r in h.rows] == [False, False, True, True]
    assert sim.channel.counters()["rounds"] == 0


def test_fixbn_observers_record_on_the_sequential_engine_and_plan_in_a_dry_run():
    """fixbn-fig1/tab1/fig2's FedAvg+BN runs: the statistics log and the re-accumulated accuracy come
    from observers of the one training loop, trained sequentially even where the context batches."""
    from bnfl.experiments.core import Context
    from bnfl.experiments.dryrun import stand_in
    from bnfl.experiments.observers import observer_keys
    from bnfl.experiments.papers.fixbn.runs import (
        Recalibration,
        Segmentation,
        StatisticsDynamics,
        observed_runs,
    )

    spec = {**SPEC, "method": "fedavg+bn", "train": {k: v for k, v in SPEC["train"].items() if k != "batched"}}
    ctx = Context(profile="smoke", seeds=[0, 1], batched="auto")
    runs = observed_runs(ctx, spec, StatisticsDynamics(2), Recalibration())
    assert [r["method"] for r in runs] == ["fedavg+bn"] * 2 and all("batched" not in r for r in runs)  # sequential
    assert all(len(r["stats_global_l1"]) == 3 and 0 <= r["recalibrated_acc"] <= 100 for r in runs)
    assert runs[0]["test_acc"] != runs[1]["test_acc"] or runs[0]["train_loss"] != runs[1]["train_loss"]  # two seeds
    planned = stand_in({"spec": spec, "observers": observer_keys([StatisticsDynamics(2), Segmentation()])}, None)
    assert len(planned["stats_local_l1"]) == 3 and {"miou", "pixel_acc"} <= set(planned)
