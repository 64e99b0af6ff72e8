"""End-to-end checks of the FL algorithms (bnfl.fl): exactness, what crosses the channel, phases."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from bnfl import fedtan, fl
from bnfl.nn import HybridBatchNorm1d, is_frozen


def _data(n_per=(12, 8, 10), dim=6, classes=3, seed=0, dtype=torch.float64):
    """Non-iid: client i holds only class i (plus a shift), sizes may differ."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for i, n in enumerate(n_per):
        xs.append(torch.randn(n, dim, generator=g, dtype=dtype) + 2.0 * i)
        ys.append(torch.full((n,), i % classes, dtype=torch.int64))
    x, y = torch.cat(xs), torch.cat(ys)
    bounds = np.cumsum((0,) + tuple(n_per))
    parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(n_per))]
    return fl.FederatedData(x, y, x, y, parts)


def _mlp(bn: bool = True, dim=6, classes=3, seed=0):
    torch.manual_seed(seed)
    norm = (lambda c: nn.BatchNorm1d(c)) if bn else (lambda c: nn.Identity())
    return nn.Sequential(nn.Linear(dim, 8), norm(8), nn.ReLU(), nn.Linear(8, 8), norm(8), nn.ReLU(),
                         nn.Linear(8, classes)).double()


def _cfg(**kw):
    base = dict(rounds=1, local_steps=1, batch_size=1000, lr=0.3, dtype="float64", progress=False,
                batched="off")  # the sequential reference engine (the default is batched='auto')
    base.update(kw)
    return fl.TrainConfig(**base)


def _central_step(model, data, lr):
    """One full-batch gradient-descent step on the union (PyTorch BN on the union batch)."""
    m = copy.deepcopy(model).double()
    m.train()
    x = torch.cat([data.x_train[c] for c in map(torch.as_tensor, data.clients)])
    y = torch.cat([data.y_train[c] for c in map(torch.as_tensor, data.clients)])
    loss = nn.functional.cross_entropy(m(x), y)
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            p -= lr * p.grad
    return {k: v for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}


def _max_diff(a, b):
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in b)


def test_fedavg_without_bn_one_round_equals_centralized_step():
    data = _data()
    model = _mlp(bn=False)
    sim = fl.Simulation(model, data, fl.FedAvg(), _cfg())
    sim.run()
    assert _max_diff(sim.global_state, _central_step(model, data, 0.3)) < 1e-13


def test_fedtan_round_equals_centralized_step():
    """FedTAN's central claim end to end: with BN, E=1, full batch, non-iid clients of unequal
    sizes, one FedTAN round equals one centralized step (parameters AND running statistics);
    FedAvg+BN and FedAvg+Algorithm 2 do not."""
    data = _data()
    model = _mlp(bn=True)
    ref = _central_step(model, data, 0.3)
    sim = fl.Simulation(model, data, fl.FedTAN(), _cfg())
    sim.run()
    assert _max_diff(sim.global_state, ref) < 1e-12
    for alg in (fl.FedAvg(), fl.FedAvgAlg2()):
        other = fl.Simulation(model, data, alg, _cfg())
        other.run()
        assert _max_diff(other.global_state, ref) > 1e-3, type(alg).__name__


@pytest.mark.parametrize("alg_cls, mode", [(fl.FedTAN, "fedtan"), (fl.FedAvgAlg2, "stats")])
def test_engine_first_step_gradients_equal_bnfl_fedtan_client_gradients(alg_cls, mode):
    """The gradients the engine applies at local step 1 of a round are bnfl.fedtan's (the one
    implementation, called with the channel-backed exchange), recorded before the optimizer step."""

    class Spy(alg_cls):
        def __init__(self):
            self.seen = {}

        def adjust_grads(self, client, model):
            self.seen[client.client] = {n: q.grad.detach().clone() for n, q in model.named_parameters()}

    data = _data()
    model = _mlp()
    alg = Spy()
    sim = fl.Simulation(model, data, alg, _cfg())
    sim.run()
    batches = [(data.x_train[torch.as_tensor(c)], data.y_train[torch.as_tensor(c)]) for c in data.clients]
    n = np.array([len(c) for c in data.clients], dtype=float)
    expected = fedtan.client_gradients(model, batches, nn.functional.cross_entropy, weights=list(n / n.sum()),
                                       aggregate=mode)
    for c, g in enumerate(expected):
        for k in g:
            torch.testing.assert_close(alg.seen[c][k], g[k], rtol=1e-10, atol=1e-12)
    # every statistics exchange went through the channel: 2 per BN layer, plus 1 for FedTAN's eq. 41
    tags = [e.tag for e in sim.channel.exchanges if e.kind == "allreduce"]
    per_layer = ["mean", "var", "stat-grads"] if mode == "fedtan" else ["mean", "var"]
    assert sorted(tags) == sorted(f"{layer}.{kind}" for layer in ("1", "4") for kind in per_layer)


def _sent_keys(channel):
    keys = set()
    for ex in channel.exchanges:
        keys |= set(ex.keys)
    return keys


def test_fedbn_never_sends_bn_state_and_silobn_sends_affine_only():
    data = _data()
    model = _mlp()
    groups = fl.state_groups(model)
    bn_all = groups["bn_affine"] | groups["bn_stats"] | groups["bn_count"]
    sim = fl.Simulation(model, data, fl.FedBN(), _cfg(rounds=2, local_steps=2, batch_size=4))
    sim.run()
    sent = _sent_keys(sim.channel)
    assert sent and not (sent & bn_all)
    assert groups["other"] <= sent
    # BN state differs across clients, everything else is identical after aggregation
    s0, s1 = sim.client_state(0), sim.client_state(1)
    assert all(torch.equal(s0[k], s1[k]) for k in groups["other"])
    assert any(not torch.equal(s0[k], s1[k]) for k in groups["bn_affine"])
    silo = fl.Simulation(model, data, fl.SiloBN(), _cfg(rounds=2, local_steps=2, batch_size=4))
    silo.run()
    sent = _sent_keys(silo.channel)
    assert groups["bn_affine"] <= sent
    assert not (sent & (groups["bn_stats"] | groups["bn_count"]))


def _hbn_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), HybridBatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8), HybridBatchNorm1d(8),
                         nn.ReLU(), nn.Linear(8, 3)).double()


def test_hbn_never_sends_alpha_and_eq8_equals_union_statistics():
    data = _data()
    model = _hbn_model()
    sim = fl.Simulation(model, data, fl.HBN(lam=1.0, final_round=False), _cfg(local_steps=2, batch_size=4))
    downloaded = copy.deepcopy(sim.global_state)
    sim.run()
    alpha = fl.state_groups(model)["local"]
    assert alpha and not (_sent_keys(sim.channel) & alpha)
    # alpha trained locally (it differs from its initial 0 on the clients)
    assert any(float(sim.client_local[c][k].abs().max()) > 0 for c in sim.client_local for k in alpha)
    # Independent eq. 7 + eq. 8: under the downloaded global model, each client's layer inputs
    # normalised with their own full-data statistics; the pooled unbiased variance of layer l
    # is the ddof=1 variance of the union of the clients' layer-l inputs.
    m = _hbn_model()
    m.load_state_dict(downloaded)
    h1, h2 = [], []
    with torch.no_grad():
        for c in data.clients:
            x = data.x_train[torch.as_tensor(c)]
            a = m[0](x)
            h1.append(a)
            a = nn.functional.batch_norm(a, None, None, m[1].weight, m[1].bias, training=True, eps=m[1].eps)
            h2.append(m[3](torch.relu(a)))
    for key, hs in (("1", h1), ("4", h2)):
        u = torch.cat(hs)
        torch.testing.assert_close(sim.global_state[f"{key}.global_mean"], u.mean(0), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(sim.global_state[f"{key}.global_var"], u.var(0, unbiased=True), rtol=1e-12,
                                   atol=1e-12)


def test_hbn_stat_subset_and_final_statistics_round():
    data = _data()
    sim = fl.Simulation(_hbn_model(), data, fl.HBN(lam=1.0, stat_samples=4),
                        _cfg(rounds=2, local_steps=1, batch_size=4))
    hist = sim.run()
    assert len(hist) == 3 and hist[-1]["statistics_only"] and hist[-1]["comm_rounds"] == 3
    # T+1 leaves the weights as they were after round T
    assert hist[-1]["clients"] == hist[-2]["clients"]


def test_fixbn_freezes_statistics_after_t_star():
    data = _data()
    model = _mlp()
    sim = fl.Simulation(model, data, fl.FixBN(switch=2), _cfg(rounds=4, local_steps=2, batch_size=4))
    sim.run(stop_after=2)
    stats_t_star = {k: v.clone() for k, v in sim.global_state.items() if "running" in k}
    weights_t_star = {k: v.clone() for k, v in sim.global_state.items() if k.endswith("weight")}
    sim.run()
    assert [r["frozen_stats"] for r in sim.history.rows] == [False, False, True, True]
    for k, v in stats_t_star.items():
        assert torch.equal(sim.global_state[k], v), k
    assert any(not torch.equal(sim.global_state[k], v) for k, v in weights_t_star.items())
    # during stage II the client models normalise with the frozen statistics: train == eval
    work = sim.work_model
    assert all(is_frozen(m) for m in work.modules() if isinstance(m, nn.BatchNorm1d))
    x = data.x_test[:7]
    work.train()
    y_train = work(x)
    work.eval()
    torch.testing.assert_close(y_train, work(x))


def test_fedtan2_switches_at_m():
    data = _data()
    sim = fl.Simulation(_mlp(), data, fl.FedTAN2(switch=2), _cfg(rounds=4, local_steps=2, batch_size=4))
    hist = sim.run()
    assert hist.column("coupled_first_step") == ["fedtan", "fedtan", "", ""]
    assert hist.column("frozen_stats") == [False, False, True, True]
    per_round = np.diff([0] + hist.column("comm_rounds"))
    assert list(per_round) == [3 * 2 + 1, 7, 1, 1]  # L = 2 BN layers


def test_fedprox_with_mu_zero_is_fedavg_and_scaffold_runs():
    data = _data()
    cfg = _cfg(rounds=2, local_steps=3, batch_size=4, momentum=0.9)
    a = fl.Simulation(_mlp(), data, fl.FedAvg(), cfg).run()
    b = fl.Simulation(_mlp(), data, fl.FedProx(mu=0.0), cfg).run()
    assert a.without_time() == b.without_time()
    c = fl.Simulation(_mlp(), data, fl.FedProx(mu=1.0), cfg).run()
    assert c.without_time() != a.without_time()
    s = fl.Simulation(_mlp(), data, fl.Scaffold(), cfg)
    s.run()
    # SCAFFOLD sends control variates: twice the parameter volume down and up
    assert s.channel.bytes_up > fl.Simulation(_mlp(), data, fl.FedAvg(), cfg).channel.bytes_up
    assert any(float(t.abs().max()) > 0 for t in s.server.state["scaffold.c"].values())


@pytest.mark.parametrize("name", sorted(fl.ALGORITHMS))
def test_every_algorithm_runs_two_rounds(name):
    from bnfl import models

    data = _data(n_per=(10, 10, 10, 10), dim=64, classes=4)
    norm = {"hbn": "hbn", "fbn": "fbn"}.get(name, "bn")
    torch.manual_seed(0)
    model = models.build("q_mlp_bn", num_classes=4, in_channels=1, input_size=8, norm=norm)
    opts = {"fedtan2": {"switch": 1}}.get(name, {})
    sim = fl.Simulation(model, data, fl.make_algorithm(name, **opts),
                        fl.TrainConfig(rounds=2, local_steps=2, batch_size=4, lr=0.05, progress=False,
                                       batched="off"))
    hist = sim.run()
    assert len(hist) >= 2 and all(np.isfinite(r["test_acc"]) for r in hist.rows)
    if fl.ALGORITHMS[name].communicates:
        assert hist[-1]["comm_rounds"] >= 2 and hist[-1]["bytes_total"] > 0
    else:
        assert hist[-1]["bytes_total"] == 0
    if fl.ALGORITHMS[name].personalized:
        assert len(hist[-1]["client_test_acc"]) == 4 and len(hist[-1]["client_own_acc"]) == 4


def test_wrong_norm_for_algorithm_is_a_clear_error():
    data = _data()
    with pytest.raises(ValueError, match="norm='hbn'"):
        fl.Simulation(_mlp(), data, fl.HBN(), _cfg()).run()
    with pytest.raises(ValueError, match="norm='fbn'"):
        fl.Simulation(_mlp(), data, fl.make_algorithm("fbn"), _cfg()).run()
    with pytest.raises(ValueError, match="valid names"):
        fl.make_algorithm("fedsgd")
    with pytest.raises(ValueError, match="mu"):
        fl.FedProx(mu=-1)


def test_fedtan_round_equals_centralized_step_conv_resnet_equal_batches():
    """The batched (grouped-conv / bmm) path: a residual CNN, equal client batches."""
    from bnfl import models

    torch.manual_seed(0)
    model = models.build("q_res").double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    x = x + y[:, None, None, None].double()
    data = fl.FederatedData(x, y, x, y, [np.arange(0, 4), np.arange(4, 8), np.arange(8, 12)])
    sim = fl.Simulation(model, data, fl.FedTAN(), _cfg(lr=0.1))
    sim.run()
    assert _max_diff(sim.global_state, _central_step(model, data, 0.1)) < 1e-12


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4), seed=st.integers(0, 2**16),
       shift=st.floats(-3, 3))
def test_fedtan_weighted_gradients_sum_to_centralized_gradient(sizes, seed, shift):
    """Hypothesis over random client splits, sizes and offsets: sum_i p_i g_i^FedTAN equals the
    centralized gradient on the union batch (p_i = n_i / N), through the engine's channel."""
    g = torch.Generator().manual_seed(seed)
    model = _mlp(seed=seed % 7)
    batches = [(torch.randn(n, 6, generator=g, dtype=torch.float64) + shift * i,
                torch.randint(0, 3, (n,), generator=g)) for i, n in enumerate(sizes)]
    p = [n / sum(sizes) for n in sizes]
    step = fl.coupled_first_step(model, batches, nn.functional.cross_entropy, p, channel=fl.Channel())
    m = copy.deepcopy(model)
    nn.functional.cross_entropy(m(torch.cat([b[0] for b in batches])), torch.cat([b[1] for b in batches])).backward()
    for name, par in m.named_parameters():
        agg = sum(pi * gi[name] for pi, gi in zip(p, step.grads, strict=True))
        torch.testing.assert_close(agg, par.grad, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("norm", ["gn", "ln", "none"])
def test_fedavg_with_other_norms_chosen_via_the_model(norm):
    from bnfl import models

    data = _data(n_per=(10, 10), dim=64, classes=2)
    torch.manual_seed(0)
    model = models.build("q_mlp_bn", num_classes=2, in_channels=1, input_size=8, norm=norm)
    sim = fl.Simulation(model, data, fl.FedAvg(), fl.TrainConfig(rounds=2, local_steps=2, batch_size=4,
                                                                  progress=False, batched="off"))
    hist = sim.run()
    groups = fl.state_groups(model)
    assert not groups["bn_stats"] and not groups["bn_affine"]
    # every parameter is sent, in one round per iteration
    payload = sum(p.numel() * p.element_size() for p in model.parameters())
    assert hist[-1]["comm_rounds"] == 2 and hist[-1]["bytes_total"] == 2 * payload * (2 + 1)


def test_hbn_state_machine_statistics_come_from_previous_global_model():
    """Alg. 1: the statistics set after round t are eq. 8 of eq. 7 under omega_g^{t-1} (the model
    downloaded in round t); after the statistics-only round T+1 they describe omega_g^T."""
    from bnfl import stats

    data = _data()
    sim = fl.Simulation(_hbn_model(), data, fl.HBN(lam=1.0), _cfg(rounds=3, local_steps=2, batch_size=4))

    def expected(model):
        per_client = [fl.hbn_client_stats(model, data.x_train[torch.as_tensor(c)]) for c in data.clients]
        return {name: stats.hbn_global([pc[name] for pc in per_client]) for name in per_client[0]}

    def check(exp):
        for name, (mean, var) in exp.items():
            torch.testing.assert_close(sim.global_state[f"{name}.global_mean"], mean)
            torch.testing.assert_close(sim.global_state[f"{name}.global_var"], var)

    sim.run(stop_after=1)
    exp_2 = expected(sim.global_model())  # omega_g^1
    sim.run(stop_after=2)
    check(exp_2)
    sim.run()  # round 3, then T+1
    assert len(sim.history) == 4 and sim.history[-1]["statistics_only"]
    exp_final = expected(sim.global_model())  # omega_g^3 = omega_g^4
    check(exp_final)
    assert not torch.allclose(next(iter(exp_2.values()))[0], next(iter(exp_final.values()))[0])


# --- FBN -----------------------------------------------------------------------------------------


def _fbn_mlp(dim=6, classes=3, seed=0):
    from bnfl.nn import FederatedBatchNorm1d

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 8), FederatedBatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8),
                         FederatedBatchNorm1d(8), nn.ReLU(), nn.Linear(8, classes)).double()


def _expected_fbn_globals(model, data, old, lam, first):
    """Independent recomputation: each client's one local step (batch = all its data) sees its
    FBN layers' inputs under the downloaded model; pool them with HBN eq. 8 (weights = data
    sizes, between-client term over N - 1) and blend with the previous global statistics."""
    from bnfl.nn import FederatedBatchNorm1d

    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, FederatedBatchNorm1d)]
    seen = {n: [] for n, _ in layers}
    hooks = [m.register_forward_hook(lambda mod, inp, out, n=n: seen[n].append(inp[0].detach()))
             for n, m in layers]
    model.train()
    with torch.no_grad():
        for c in data.clients:
            model(data.x_train[torch.as_tensor(c)])
    for h in hooks:
        h.remove()
    out = {}
    for n, _ in layers:
        sizes = torch.tensor([float(len(c)) for c in data.clients], dtype=torch.float64)
        means = torch.stack([h.mean(0) for h in seen[n]])  # (K, C)
        vars_ = torch.stack([((h - h.mean(0)) ** 2).mean(0) for h in seen[n]])  # biased, (K, C)
        total = sizes.sum()
        mean = (sizes[:, None] * means).sum(0) / total
        var = (sizes[:, None] * (vars_ + (means - mean) ** 2)).sum(0) / (total - 1)
        if first:
            out[n] = (mean, var)
        else:
            out[n] = ((1 - lam) * old[f"{n}.global_mean"] + lam * mean, (1 - lam) * old[f"{n}.global_var"] + lam * var)
    return out


def test_fbn_global_statistics_are_the_ema_of_pooled_client_statistics():
    data = _data(n_per=(12, 8, 10))
    lam = 0.1
    sim = fl.Simulation(_fbn_mlp(), data, fl.FBN(lam=lam), _cfg(rounds=3, lr=0.1))
    for r in (1, 2, 3):
        before = sim.global_model()
        old = dict(sim.global_state)
        sim.run(stop_after=r)
        expected = _expected_fbn_globals(before, data, old, lam, first=r == 1)
        for n, (mean, var) in expected.items():
            torch.testing.assert_close(sim.global_state[f"{n}.global_mean"], mean, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(sim.global_state[f"{n}.global_var"], var, rtol=1e-10, atol=1e-12)
            # the global model normalises with them (training and evaluation)
            torch.testing.assert_close(sim.global_model().get_submodule(n).global_mean, mean)
    # statistics are server state: uploaded as the fbn.* moments, never averaged from model keys
    assert not any(k.endswith(("running_mean", "running_var", "global_mean", "global_var"))
                   for k in sim.upload_keys)
    assert "global_mean" not in " ".join(sim.local_keys)


def test_fbn_global_statistics_leave_the_placeholder_and_training_reduces_the_loss():
    data = _data(n_per=(12, 8, 10))
    sim = fl.Simulation(_fbn_mlp(), data, fl.FBN(), _cfg(rounds=8, lr=0.2, batch_size=4, local_steps=2))
    hist = sim.run()
    losses = hist.column("train_loss")
    assert losses[-1] < 0.7 * losses[0]
    for m in sim.global_model().modules():
        if hasattr(m, "global_mean"):
            assert float((m.global_var - 1).abs().max()) > 1e-3  # no longer the (0, 1) placeholder


def test_fbn_resume_is_bitwise(tmp_path):
    data = _data(n_per=(12, 8, 10))
    cfg = dict(rounds=4, lr=0.1, batch_size=4, local_steps=2)
    full = fl.Simulation(_fbn_mlp(), data, fl.FBN(), _cfg(**cfg)).run()
    fl.Simulation(_fbn_mlp(), data, fl.FBN(), _cfg(checkpoint_dir=str(tmp_path), **cfg)).run(stop_after=2)
    resumed = fl.Simulation(_fbn_mlp(), data, fl.FBN(), _cfg(checkpoint_dir=str(tmp_path), **cfg)).run(resume=True)
    assert resumed.without_time() == full.without_time()


def test_fbn_rejects_bad_lam():
    with pytest.raises(ValueError, match="lam"):
        fl.FBN(lam=0)
