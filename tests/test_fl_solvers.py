"""Defining tests of the FL solvers of HBN Table 4 (FedAdam, MOON, FedSAM, FedACG, FedWon) and of
HBN's options (the solver it is plugged into, the Table 6 ablations), in float64 against hand
replays or their reduction to FedAvg / HBN."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import fl, models, stats
from bnfl.fl.algorithms._solvers import adaptive_clip_, moon_contrastive_loss, representation
from bnfl.nn import HybridBatchNorm1d, ScaledWSConv2d

TOL = 1e-12
torch.set_num_threads(1)


def _data(n_per=(12, 8, 10), dim=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for i, n in enumerate(n_per):
        xs.append(torch.randn(n, dim, generator=g, dtype=torch.float64) + 2.0 * i)
        ys.append(torch.randint(0, classes, (n,), generator=g))
    x, y = torch.cat(xs), torch.cat(ys)
    b = np.cumsum((0,) + tuple(n_per))
    return fl.FederatedData(x, y, x, y, [np.arange(b[i], b[i + 1]) for i in range(len(n_per))])


def _mlp(norm="bn", seed=0):
    torch.manual_seed(seed)
    N = {"bn": nn.BatchNorm1d, "hbn": HybridBatchNorm1d}[norm]
    return nn.Sequential(nn.Linear(6, 8), N(8), nn.ReLU(), nn.Linear(8, 8), N(8), nn.ReLU(), nn.Linear(8, 3)).double()


def _cfg(**kw):
    base = dict(rounds=1, local_steps=1, batch_size=1000, lr=0.3, dtype="float64", progress=False,
                batched="off")  # the sequential reference engine (the default is batched='auto')
    base.update(kw)
    return fl.TrainConfig(**base)


def _run(alg, rounds=1, norm="bn", **kw):
    sim = fl.Simulation(_mlp(norm), _data(), alg, _cfg(rounds=rounds, **kw))
    sim.run()
    return sim


def _equal(a, b, tol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        if tol == 0.0:
            assert torch.equal(a[k], b[k]), k
        else:
            assert torch.allclose(a[k], b[k], atol=tol, rtol=0), (k, float((a[k] - b[k]).abs().max()))


def _hand_fedavg_round(state, data, lr, steps=1, prox=None):
    """Each client: ``steps`` full-batch SGD steps from ``state`` (+ ``prox`` = (beta, anchor)),
    then the size-weighted average of every float entry (FedAvg, FedTAN eq. 7)."""
    outs, sizes = [], []
    for idx in data.clients:
        m = _mlp()
        m.load_state_dict(state)
        m.train()
        x, y = data.x_train[torch.as_tensor(idx)], data.y_train[torch.as_tensor(idx)]
        for _ in range(steps):
            m.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            with torch.no_grad():
                for n, p in m.named_parameters():
                    g = p.grad + (prox[0] * (p - prox[1][n]) if prox else 0)
                    p -= lr * g
        outs.append(m.state_dict())
        sizes.append(len(idx))
    p = np.array(sizes, float) / sum(sizes)
    return {k: (sum(w * o[k] for w, o in zip(p, outs, strict=True)) if state[k].is_floating_point() else state[k])
            for k in state}


@pytest.mark.parametrize("scope", ["parameters", "all"])
@pytest.mark.parametrize("rounds", [1, 2])
def test_fedadam_alg2_equals_a_hand_replay_of_two_rounds(rounds, scope):
    alg = fl.FedAdam(server_lr=0.05, beta1=0.8, beta2=0.95, tau=1e-2, scope=scope)
    sim = _run(alg, rounds=rounds)
    state = {k: v.clone() for k, v in _mlp().state_dict().items()}
    params = [n for n, _ in _mlp().named_parameters()]
    if scope == "all":  # BN's running statistics go through Adam too (the integer counter does not)
        params = [k for k, v in state.items() if v.is_floating_point()]
        assert any("running_var" in k for k in params)
    m = {n: torch.zeros_like(state[n]) for n in params}
    v = {n: torch.full_like(state[n], 1e-4) for n in params}
    for _ in range(rounds):
        avg = _hand_fedavg_round(state, sim.data, 0.3)
        new = dict(avg)
        for n in params:
            d = avg[n] - state[n]
            m[n] = 0.8 * m[n] + 0.2 * d
            v[n] = 0.95 * v[n] + 0.05 * d * d
            new[n] = state[n] + 0.05 * m[n] / (v[n].sqrt() + 1e-2)
        state = new
    got = {k: v for k, v in sim.global_state.items() if "num_batches" not in k}
    _equal(got, {k: v for k, v in state.items() if "num_batches" not in k}, TOL)


@pytest.mark.parametrize("scope", ["parameters", "all"])
def test_fedacg_without_momentum_and_regulariser_is_fedavg_and_with_them_equals_a_hand_replay(scope):
    _equal(_run(fl.FedACG(lam=0.0, beta=0.0, scope=scope), rounds=2).global_state,
           _run(fl.FedAvg(), rounds=2).global_state)
    lam, beta = 0.5, 0.2
    sim = _run(fl.FedACG(lam=lam, beta=beta, scope=scope), rounds=2, local_steps=2)
    state = {k: v.clone() for k, v in _mlp().state_dict().items()}
    weights = [n for n, _ in _mlp().named_parameters()]
    # scope "all": the running statistics are looked ahead and carry momentum too (not regularised)
    params = [k for k, v in state.items() if v.is_floating_point()] if scope == "all" else weights
    mom = {n: torch.zeros_like(state[n]) for n in params}
    for _ in range(2):
        look = dict(state)
        look.update({n: state[n] + lam * mom[n] for n in params})
        avg = _hand_fedavg_round(look, sim.data, 0.3, steps=2, prox=(beta, {n: look[n] for n in weights}))
        new = dict(avg)
        for n in params:
            mom[n] = lam * mom[n] + (avg[n] - look[n])
            new[n] = state[n] + mom[n]
        state = new
    _equal({k: v for k, v in sim.global_state.items() if "num_batches" not in k},
           {k: v for k, v in state.items() if "num_batches" not in k}, TOL)


@pytest.mark.parametrize("make", [lambda: fl.FedACG(lam=0.5, beta=0.1), lambda: fl.FedAdam(server_lr=0.05),
                                  lambda: fl.MOON(mu=1.0)], ids=["fedacg", "fedadam", "moon"])
def test_fedacg_resumes_from_a_checkpoint_like_an_uninterrupted_run(tmp_path, make):
    """Server momentum (FedACG), Adam moments (FedAdam), previous local models (MOON) are checkpointed."""
    full = _run(make(), rounds=3, local_steps=2)
    cfg = _cfg(rounds=3, local_steps=2, checkpoint_dir=str(tmp_path))
    first = fl.Simulation(_mlp(), _data(), make(), cfg)
    first.run(stop_after=1)
    again = fl.Simulation(_mlp(), _data(), make(), cfg)
    again.run(resume=True)
    _equal(again.global_state, full.global_state)


def test_moon_contrastive_loss_equals_the_formula_and_mu_zero_is_fedavg():
    g = torch.Generator().manual_seed(1)
    z, zg, zp = (torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    cos = nn.functional.cosine_similarity
    pos, neg = torch.exp(cos(z, zg) / 0.5), torch.exp(cos(z, zp) / 0.5)
    assert torch.allclose(moon_contrastive_loss(z, zg, zp, 0.5), (-torch.log(pos / (pos + neg))).mean(), atol=TOL)
    _equal(_run(fl.MOON(mu=0.0), rounds=2).global_state, _run(fl.FedAvg(), rounds=2).global_state)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_moon_local_loss_equals_a_hand_computation_with_frozen_models_in_their_mode(mode):
    data = _data()
    sim = fl.Simulation(_mlp(), data, fl.MOON(mu=0.7, temperature=0.3, frozen_mode=mode), _cfg())
    alg = sim.algorithm
    glob, prev, local = _mlp(seed=0), _mlp(seed=1), _mlp(seed=2)
    for m in (glob, prev):  # statistics away from (0, 1), so that eval and train forwards differ
        m.train()
        with torch.no_grad():
            m(data.x_train * 2 + 1)
    sim.client_algorithm[0] = {"moon.previous": copy.deepcopy(prev.state_dict())}  # client 0's state
    ctx = sim.client_context(0)
    alg.client_start(ctx, 1, glob)  # the downloaded model, as loaded into the client's model
    before = {k: v.clone() for k, v in glob.state_dict().items()}
    local.load_state_dict(glob.state_dict())
    with torch.no_grad():
        for p in local.parameters():
            p.add_(0.1)
    local.train()
    x, y = data.x_train[:12], data.y_train[:12]
    got = alg.local_loss(ctx, local, x, y)
    ref_local = copy.deepcopy(local)

    def feats(m, train):
        m = copy.deepcopy(m).train(train)
        return m[:-1](x)  # the input of the last nn.Linear of the Sequential

    cos = nn.functional.cosine_similarity
    z = feats(ref_local, True)
    zg, zp = feats(glob, mode == "train"), feats(prev, mode == "train")
    pos, neg = torch.exp(cos(z, zg) / 0.3), torch.exp(cos(z, zp) / 0.3)
    want = nn.functional.cross_entropy(ref_local[-1](z), y) + 0.7 * (-torch.log(pos / (pos + neg))).mean()
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    _equal(glob.state_dict(), before)  # the downloaded model itself is untouched
    frozen_glob, frozen_prev = ctx.scratch["moon.global"], ctx.scratch["moon.previous"]  # the round's scratch
    assert all(not p.requires_grad for p in frozen_glob.parameters())
    assert frozen_glob.training is (mode == "train") and frozen_prev.training is (mode == "train")
    with pytest.raises(ValueError, match="frozen_mode"):
        fl.MOON(frozen_mode="test")


def test_moon_gradient_flows_only_into_the_local_model_and_previous_models_are_kept():
    alg = fl.MOON(mu=1.0)
    sim = _run(alg, rounds=2)
    previous = {c: s["moon.previous"] for c, s in sim.client_algorithm.items()}  # client state, kept by the engine
    assert set(previous) == {0, 1, 2}
    assert previous[0].keys() == sim.client_state(0).keys()  # full state_dicts of the local models
    # with one client the FedAvg average is that client's model: what MOON keeps is the local model
    one = fl.MOON(mu=1.0)
    solo = fl.Simulation(_mlp(), _data(n_per=(12,)), one, _cfg(rounds=1, local_steps=2))
    solo.run()
    floats = [k for k, v in solo.global_state.items() if v.is_floating_point()]  # num_batches_tracked is never sent
    _equal({k: solo.client_algorithm[0]["moon.previous"][k] for k in floats}, {k: solo.global_state[k] for k in floats})
    assert not torch.equal(previous[0]["0.weight"], previous[1]["0.weight"])  # one model per client
    model, data = _mlp(), _data()
    ctx = sim.client_context(0)
    alg.client_start(ctx, 3, model)
    x, y = data.x_train[:6], data.y_train[:6]
    alg.local_loss(ctx, model, x, y).backward()
    assert all(p.grad is not None for p in model.parameters())
    assert all(p.grad is None for p in ctx.scratch["moon.global"].parameters())
    assert all(p.grad is None for p in ctx.scratch["moon.previous"].parameters())
    out, z = representation(model, x)
    assert z.shape == (6, 8) and out.shape == (6, 3)
    with pytest.raises(ValueError, match="no nn.Linear"):
        representation(nn.Sequential(nn.Conv1d(1, 1, 1)), torch.zeros(1, 1, 3))


def test_fedsam_rho_zero_is_fedavg_and_a_step_is_the_sam_step_with_statistics_moved_once():
    _equal(_run(fl.FedSAM(rho=0.0), rounds=2).global_state, _run(fl.FedAvg(), rounds=2).global_state)
    data = _data(n_per=(12,))
    sim = fl.Simulation(_mlp(), data, fl.FedSAM(rho=0.1), _cfg())
    sim.run()
    m = _mlp()
    m.train()
    x, y = data.x_train, data.y_train
    loss = nn.functional.cross_entropy(m(x), y)  # moves the running statistics once
    bufs = {k: v.clone() for k, v in m.state_dict().items() if "running" in k}
    grads = torch.autograd.grad(loss, list(m.parameters()))
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    w0 = [p.detach().clone() for p in m.parameters()]
    with torch.no_grad():
        for p, g in zip(m.parameters(), grads, strict=True):
            p += 0.1 * g / norm
    m2 = copy.deepcopy(m)
    g2 = torch.autograd.grad(nn.functional.cross_entropy(m2(x), y), list(m2.parameters()))
    want = {n: w - 0.3 * g for (n, _), w, g in zip(m.named_parameters(), w0, g2, strict=True)}
    got = sim.global_state
    for n, w in want.items():
        assert torch.allclose(got[n], w, atol=TOL, rtol=0), n
    for k, v in bufs.items():
        assert torch.allclose(got[k], v, atol=TOL, rtol=0), k


def test_adaptive_gradient_clipping_per_unit_and_fedwon_without_clipping_is_fedavg():
    w = nn.Parameter(torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64))
    w.grad = torch.tensor([[6.0, 8.0], [1e-4, 0.0]], dtype=torch.float64)
    adaptive_clip_([w], 0.5)
    # row 0: |W| = 5, |G| = 10 > 0.5 * 5 -> scaled to norm 2.5; row 1: |W| -> eps 1e-3, |G| = 1e-4 <= 5e-4 kept
    assert torch.allclose(w.grad[0], torch.tensor([1.5, 2.0], dtype=torch.float64), atol=TOL)
    assert torch.equal(w.grad[1], torch.tensor([1e-4, 0.0], dtype=torch.float64))
    # a vector (bias, gain) is one unit: its whole norm, as NF-Nets' unitwise_norm
    b = nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.float64))
    b.grad = torch.tensor([0.0, 1.0], dtype=torch.float64)  # |G| = 1 > 0.1 * |W| = 0.5 (elementwise: kept)
    adaptive_clip_([b], 0.1)
    assert torch.allclose(b.grad, torch.tensor([0.0, 0.5], dtype=torch.float64), atol=TOL)
    with pytest.raises(ValueError, match="clip must be > 0"):
        fl.FedWon(clip=0.0)
    _equal(_run(fl.FedWon(clip=math.inf), rounds=2).global_state, _run(fl.FedAvg(), rounds=2).global_state)
    clipped = _run(fl.FedWon(clip=1e-3), rounds=1).global_state
    assert not torch.equal(clipped["0.weight"], _run(fl.FedAvg(), rounds=1).global_state["0.weight"])


def test_fedwon_without_clipping_is_fedavg_on_the_same_scaled_ws_model():
    data = _digits()

    def run(alg):
        torch.manual_seed(0)
        sim = fl.Simulation(models.build("q_scnn", norm="ws"), data, alg,
                            fl.TrainConfig(rounds=2, local_steps=2, batch_size=8, lr=0.05, progress=False,
                                           batched="off"))
        sim.run()
        return sim.global_state

    ref = run(fl.FedAvg())
    _equal(run(fl.FedWon(clip=math.inf)), ref)
    clipped = run(fl.FedWon(clip=0.01))
    assert any(k.endswith("gain") for k in clipped)
    assert not all(torch.equal(clipped[k], ref[k]) for k in ref)


def test_scaled_weight_standardisation_nf_nets_eq3():
    torch.manual_seed(0)
    conv = ScaledWSConv2d(3, 4, 3, padding=1).double()
    w = conv.standardized_weight().detach().flatten(1)  # (4, 27)
    fan_in = 27
    assert torch.allclose(w.mean(1), torch.zeros(4, dtype=torch.float64), atol=1e-12)
    expect = conv.gamma ** 2 / fan_in * conv.weight.flatten(1).var(1, unbiased=False) / (
        conv.weight.flatten(1).var(1, unbiased=False) + conv.ws_eps)
    assert torch.allclose(w.var(1, unbiased=False), expect, rtol=1e-10)
    assert sum(p.numel() for p in conv.parameters()) == 4 * 27 + 4 + 4  # weight, bias, gain
    m = models.build("q_scnn", norm="ws")
    assert any(isinstance(x, ScaledWSConv2d) for x in m.modules())
    assert m(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def _digits():
    from bnfl.data import load, partition

    split = load("digits", form="image")
    parts = partition.dirichlet(split.y_train.numpy()[:300], 4, 0.6, 0)
    return fl.FederatedData(split.x_train[:300], split.y_train[:300], split.x_test[:60], split.y_test[:60], parts)


@pytest.mark.parametrize(("name", "norm"), [(n, k) for n in ("fedadam", "moon", "fedsam", "fedacg", "fedwon")
                                            for k in ("bn", "gn", "none", "hbn")] + [("fedwon", "ws")])
def test_every_solver_runs_with_every_norm_and_is_deterministic(name, norm):
    data = _digits()

    def once():
        torch.manual_seed(0)
        model = models.build("q_scnn", norm=norm)
        alg = fl.HBN(solver=name) if norm == "hbn" else fl.make_algorithm(name)
        sim = fl.Simulation(model, data, alg, fl.TrainConfig(rounds=2, local_steps=2, batch_size=8, lr=0.05,
                                                             progress=False, batched="off"))
        return sim.run(), sim

    (h1, s1), (h2, _) = once(), once()
    assert all(np.isfinite(r["test_acc"]) for r in h1.rows)
    assert [r["test_acc"] for r in h1.rows] == [r["test_acc"] for r in h2.rows]
    if norm == "hbn":
        assert not any("alpha" in k for k in s1.upload_keys)  # alpha never sent


@pytest.mark.parametrize("mid", ["fedadam+gn", "fedadam+bn", "moon", "fedsam", "fedacg+gn", "fedacg+bn", "fedwon"])
def test_every_solver_method_builds_from_a_run_config_and_is_deterministic(mid):
    from bnfl.methods import METHODS

    cfg = {"method": mid, "model": {"name": "q_scnn"}, "data": {"name": "digits", "form": "image"},
           "partition": {"kind": "dirichlet", "num_clients": 4, "phi": 0.6}, "rounds": 2,
           "train": {"local_steps": 2, "batch_size": 8, "lr": 0.05, "progress": False}}
    a, b = fl.build(cfg), fl.build(cfg)
    assert type(a.algorithm) is METHODS[mid].algorithm_class
    ha, hb = a.run(), b.run()
    assert all(np.isfinite(r["train_loss"]) for r in ha.rows)
    assert [r["test_acc"] for r in ha.rows] == [r["test_acc"] for r in hb.rows]
    _equal(a.global_state, b.global_state)
    if mid == "fedwon":
        assert any(isinstance(m, ScaledWSConv2d) for m in a.model.modules())


def test_hbn_on_a_solver_reduces_to_hbn_and_adds_the_solvers_server_step():
    _equal(_run(fl.HBN(solver="fedprox", solver_options={"mu": 0.0}), rounds=2, norm="hbn").global_state,
           _run(fl.HBN(), rounds=2, norm="hbn").global_state)
    plain = _run(fl.HBN(final_round=False), norm="hbn")
    adam = _run(fl.HBN(solver="fedadam", solver_options={"server_lr": 0.05}, final_round=False), norm="hbn")
    init = _mlp("hbn").state_dict()
    for n, _ in _mlp("hbn").named_parameters():
        if n.endswith("alpha"):
            continue
        d = plain.global_state[n] - init[n]  # the same client training, FedAvg's average
        m, v = 0.1 * d, 0.99 * 1e-6 + 0.01 * d * d
        assert torch.allclose(adam.global_state[n], init[n] + 0.05 * m / (v.sqrt() + 1e-3), atol=TOL, rtol=0), n
    for k in plain.global_state:
        if k.endswith(("global_mean", "global_var")):
            assert torch.equal(adam.global_state[k], plain.global_state[k])  # HBN's statistics, untouched
    with pytest.raises(ValueError, match="cannot be plugged into 'fedbn'"):
        fl.HBN(solver="fedbn")


def test_hbn_table6_ablations_do_what_they_say():
    data = _data()
    # (2) the naive weighted average of the clients' variances (no between-client term)
    sim = _run(fl.HBN(pooling="average", final_round=False), norm="hbn")
    model = _mlp("hbn")
    parts = [fl.hbn_client_stats(model, data.x_train[torch.as_tensor(i)]) for i in data.clients]
    for name in parts[0]:
        want = stats.average([p[name] for p in parts])
        assert torch.allclose(sim.global_state[f"{name}.global_var"], want.var, atol=TOL)
        assert not torch.allclose(want.var, stats.hbn_global([p[name] for p in parts])[1], atol=1e-3)
    # (3)-(5) fixed alphas: never trained, global-only / batch-only / 1:1
    for mode, value in (("global", math.inf), ("batch", -math.inf), ("equal", 0.0)):
        s = _run(fl.HBN(alpha=mode), norm="hbn", local_steps=2)
        for c in range(3):
            alphas = [v for k, v in s.client_local[c].items() if k.endswith("alpha")]
            assert alphas and all(torch.all(a == value) for a in alphas), mode
    layer = HybridBatchNorm1d(3).double()
    layer.set_global_stats(torch.tensor([1.0, 2.0, 3.0]).double(), torch.tensor([2.0, 1.0, 0.5]).double())
    with torch.no_grad():
        layer.alpha.fill_(math.inf)
    x = torch.randn(5, 3, dtype=torch.float64)
    assert torch.allclose(layer.train()(x), layer.eval()(x), atol=TOL)
    with torch.no_grad():
        layer.alpha.fill_(-math.inf)
    assert torch.allclose(layer.train()(x), nn.functional.batch_norm(x, None, None, layer.weight, layer.bias, True),
                          atol=1e-10)


def test_hbn_moving_average_ablation_uploads_the_ema_of_the_batch_moments_seen_in_training():
    data = _data(n_per=(12,))
    alg = fl.HBN(client_stats="moving-average", final_round=False)
    sim = fl.Simulation(_mlp("hbn"), data, alg, _cfg(local_steps=3))
    seen: list[stats.Moments] = []
    first = next(m for m in sim.work_model.modules() if isinstance(m, HybridBatchNorm1d))
    hook = first.register_forward_hook(lambda m, a, o: seen.append(stats.moments(a[0].detach())) if m.training else None)
    sim.run()
    hook.remove()
    mean, var = torch.zeros(8, dtype=torch.float64), torch.ones(8, dtype=torch.float64)  # the placeholder (0, 1)
    for mom in seen:
        mean, var = 0.9 * mean + 0.1 * mom.mean, 0.9 * var + 0.1 * mom.var
    assert len(seen) == 3
    assert torch.allclose(sim.global_state["1.global_mean"], mean, atol=TOL)  # first estimate replaces (0, 1)
    # eq. 8 of the one client's 12 samples: the unbiased conversion N / (N - 1)
    assert torch.allclose(sim.global_state["1.global_var"], var * 12 / 11, atol=TOL)
    assert not any(r.get("statistics_only") for r in sim.history.rows)


def test_hbn_moving_average_counts_each_step_once_under_fedsam():
    """FedSAM runs a second (perturbed) forward in every step; the EMA takes the step's first
    forward only, as with every other solver."""
    data = _data(n_per=(12,))
    alg = fl.HBN(client_stats="moving-average", final_round=False, solver="fedsam", solver_options={"rho": 0.05})
    sim = fl.Simulation(_mlp("hbn"), data, alg, _cfg(local_steps=3))
    seen: list[stats.Moments] = []
    first = next(m for m in sim.work_model.modules() if isinstance(m, HybridBatchNorm1d))
    hook = first.register_forward_hook(lambda m, a, o: seen.append(stats.moments(a[0].detach())) if m.training else None)
    sim.run()
    hook.remove()
    assert len(seen) == 6  # two forwards a step
    mean, var = torch.zeros(8, dtype=torch.float64), torch.ones(8, dtype=torch.float64)
    for mom in seen[0::2]:  # the unperturbed forward of each step
        mean, var = 0.9 * mean + 0.1 * mom.mean, 0.9 * var + 0.1 * mom.var
    assert torch.allclose(sim.global_state["1.global_mean"], mean, atol=TOL)
    assert torch.allclose(sim.global_state["1.global_var"], var * 12 / 11, atol=TOL)  # eq. 8, unbiased
