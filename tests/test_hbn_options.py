"""Defining tests of HBN's options: the solver composition (hand-composed SCAFFOLD + HBN, the
generic forwarding of the Algorithm hooks, alpha never uploaded) and the reference-code
variants (count, stat_source, first_estimate, alpha_sharing, clip_grad_norm, eval_stats, the
preset), each against a hand computation in float64 that fails without the option."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import fl, stats
from bnfl.fl.algorithms import Algorithm
from bnfl.fl.algorithms._fedavg import Scaffold
from bnfl.fl.algorithms._hbn_options import REFERENCE_CODE, alpha_parameters, hbn_reference_stats
from bnfl.nn import HybridBatchNorm1d, HybridBatchNorm2d

TOL = 1e-12
torch.set_num_threads(1)


def _data(n_per=(12, 8, 10), shape=(6,), classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for i, n in enumerate(n_per):
        xs.append(torch.randn(n, *shape, generator=g, dtype=torch.float64) + 2.0 * i)
        ys.append(torch.randint(0, classes, (n,), generator=g))
    x, y = torch.cat(xs), torch.cat(ys)
    b = np.cumsum((0,) + tuple(n_per))
    return fl.FederatedData(x, y, x, y, [np.arange(b[i], b[i + 1]) for i in range(len(n_per))])


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), HybridBatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8), HybridBatchNorm1d(8),
                         nn.ReLU(), nn.Linear(8, 3)).double()


def _cnn(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3), HybridBatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(36, 3)).double()


def _cfg(**kw):
    base = dict(rounds=1, local_steps=1, batch_size=1000, lr=0.3, dtype="float64", progress=False,
                batched="off")  # the sequential reference engine (the default is batched='auto')
    base.update(kw)
    return fl.TrainConfig(**base)


def _sim(alg, model=None, data=None, **kw):
    return fl.Simulation(model if model is not None else _mlp(), data if data is not None else _data(), alg, _cfg(**kw))


def _close(a, b, tol=TOL):
    assert torch.allclose(a, b, atol=tol, rtol=0), float((a - b).abs().max())


def _spy_uploads(alg):
    seen = []
    orig = alg.aggregate

    def aggregate(server, state, clients, weights, uploads):
        seen.append([dict(u) for u in uploads])
        return orig(server, state, clients, weights, uploads)

    alg.aggregate = aggregate
    return seen


# -- composition ------------------------------------------------------------------------------------
class _HandScaffoldHBN(Scaffold):
    """SCAFFOLD's hooks, with HBN's statistics written out by hand (eq. 7 before training,
    eq. 8 pooling, eq. 11 EMA with the first estimate replacing (0, 1)), alpha local."""

    local_state = frozenset({"local"})
    server_state = frozenset({"bn_stats"})

    def __init__(self, lam):
        super().__init__()
        self.lam, self.first = lam, True

    def client_start(self, client, r, model):
        super().client_start(client, r, model)
        self.mom = fl.hbn_client_stats(model, client.data()[0])

    def extra_upload(self, client, model, steps, lr):
        up = super().extra_upload(client, model, steps, lr)
        for n, m in self.mom.items():
            up.update({f"m.{n}.count": torch.tensor(float(m.count)), f"m.{n}.mean": m.mean, f"m.{n}.var": m.var})
        return up

    def aggregate(self, server, state, clients, weights, uploads):
        new = super().aggregate(server, state, clients, weights, uploads)
        for n in ("1", "4"):
            mean, var = stats.hbn_global([stats.Moments(count=int(u[f"m.{n}.count"]), mean=u[f"m.{n}.mean"],
                                                        var=u[f"m.{n}.var"]) for u in uploads])
            old_m, old_v = (mean, var) if self.first else (state[f"{n}.global_mean"], state[f"{n}.global_var"])
            new[f"{n}.global_mean"] = (1 - self.lam) * old_m + self.lam * mean
            new[f"{n}.global_var"] = (1 - self.lam) * old_v + self.lam * var
        self.first = False
        return new


def test_hbn_on_scaffold_equals_the_hand_composition_of_scaffold_and_hbn_statistics():
    hand = _sim(_HandScaffoldHBN(lam=0.3), rounds=2, local_steps=2, lr=0.1)
    hand.run()
    hbn = _sim(fl.HBN(solver="scaffold", lam=0.3, final_round=False), rounds=2, local_steps=2, lr=0.1)
    hbn.run()
    assert hbn.global_state.keys() == hand.global_state.keys()
    for k in hbn.global_state:
        _close(hbn.global_state[k], hand.global_state[k])
    for c in range(3):  # the same control variates, and alpha stayed local
        for n in hand.client_algorithm[c]["scaffold.ci"]:  # client state, kept by the engine
            _close(hbn.client_algorithm[c]["scaffold.ci"][n], hand.client_algorithm[c]["scaffold.ci"][n])
        assert any(k.endswith("alpha") for k in hbn.client_local[c])
    assert any(float(v.abs().max()) > 0 for v in hbn.server.state["scaffold.c"].values())  # round 2 was corrected


def test_hbn_forwards_every_hook_it_does_not_extend_to_the_solver():
    calls = []

    class Recorder:
        def __getattr__(self, name):
            return lambda *a, **k: calls.append(name) or f"solver:{name}"

    alg = fl.HBN(solver="moon")
    alg.solver = Recorder()
    hooks = [n for n, v in vars(Algorithm).items() if callable(v) and not n.startswith("_")]
    assert {"local_loss", "extra_download", "coupled_step", "frozen_stats"} <= set(hooks)
    for name in hooks:
        if name not in fl.HBN._OWN_HOOKS:
            assert getattr(alg, name)(*([None] * 6)[:getattr(Algorithm, name).__code__.co_argcount - 1]) \
                == f"solver:{name}"
            assert calls[-1] == name


def test_hbn_with_fedprox_never_uploads_alpha_and_averaged_sharing_does():
    for sharing, sent in (("local", False), ("averaged", True)):
        alg = fl.HBN(solver="fedprox", solver_options={"mu": 0.1}, alpha_sharing=sharing, final_round=False)
        seen = _spy_uploads(alg)
        sim = _sim(alg, rounds=2)
        sim.run()
        assert not any("alpha" in k for k in sim.upload_keys)
        assert any("alpha" in k for u in seen[0] for k in u) is sent


# -- reference-code variants ------------------------------------------------------------------------
def test_count_samples_pools_eq8_over_samples_not_elements():
    data = _data(shape=(1, 5, 5))
    model = _cnn()
    parts = [fl.hbn_client_stats(model, data.x_train[torch.as_tensor(i)]) for i in data.clients]
    sizes = [len(i) for i in data.clients]
    moms = [p["1"] for p in parts]
    n, mean = sum(sizes), sum(s * m.mean for s, m in zip(sizes, moms, strict=True)) / sum(sizes)
    by_samples = sum(s * (m.var + (m.mean - mean) ** 2) for s, m in zip(sizes, moms, strict=True)) / (n - 1)
    got = {}
    for count in ("elements", "samples"):
        sim = _sim(fl.HBN(lam=1.0, count=count, final_round=False), model=_cnn(), data=data)
        sim.run()
        got[count] = sim.global_state["1.global_var"]
        _close(sim.global_state["1.global_mean"], mean)
    _close(got["samples"], by_samples)
    _close(got["elements"], stats.hbn_global(moms)[1])  # N H W elements: (N H W - 1) in the denominator
    assert not torch.allclose(got["samples"], got["elements"], atol=1e-6)


def test_reference_stats_are_the_alpha_mixed_moments_of_a_hybrid_forward():
    model = _mlp()
    with torch.no_grad():
        model[1].alpha.copy_(torch.linspace(-2, 2, 8))
        model[1].set_global_stats(torch.full((8,), 0.5).double(), torch.full((8,), 2.0).double())
    x = _data().x_train[:10]
    got = hbn_reference_stats(model.eval(), x)
    assert not model.training  # the mode is restored
    s = torch.sigmoid(model[1].alpha.detach())
    h1 = model[0](x).detach()
    mb, vb = h1.mean(0), h1.var(0, unbiased=False)
    mean1, var1 = (1 - s) * mb + s * 0.5, (1 - s) * vb + s * 2.0
    _close(got["1"].mean, mean1)
    _close(got["1"].var, var1)
    h4 = model[3](torch.relu((h1 - mean1) / torch.sqrt(var1 + 1e-5) * model[1].weight + model[1].bias)).detach()
    _close(got["4"].mean, 0.5 * h4.mean(0) + 0.5 * 0.0)  # layer 4: alpha 0, placeholder (0, 1)
    _close(got["4"].var, 0.5 * h4.var(0, unbiased=False) + 0.5 * 1.0)
    # the reference layer puts sigmoid(a) on the batch side: the same model under alpha -> -alpha
    a = torch.linspace(-2, 2, 8).double()
    ref = torch.sigmoid(a) * mb + (1 - torch.sigmoid(a)) * 0.5
    with torch.no_grad():
        model[1].alpha.copy_(-a)
    _close(hbn_reference_stats(model, x)["1"].mean, ref)


def test_stat_source_reference_uploads_the_first_64_unshuffled_samples():
    data = _data(n_per=(70,))
    for source in ("eq7", "reference"):
        sim = _sim(fl.HBN(lam=1.0, stat_source=source, count="samples", final_round=False), data=data)
        sim.run()
        x = data.x_train if source == "eq7" else data.x_train[:64]
        want = (fl.hbn_client_stats if source == "eq7" else hbn_reference_stats)(_mlp(), x)
        for n in ("1", "4"):
            _close(sim.global_state[f"{n}.global_mean"], want[n].mean)
            _close(sim.global_state[f"{n}.global_var"], want[n].var * len(x) / (len(x) - 1))
    ref = hbn_reference_stats(_mlp(), data.x_train[:64])["4"]
    assert not torch.allclose(ref.var, fl.hbn_client_stats(_mlp(), data.x_train[:64])["4"].var, atol=1e-3)


def test_first_estimate_blend_mixes_the_first_eq8_estimate_into_the_placeholder():
    exact = _sim(fl.HBN(lam=1.0, final_round=False))
    exact.run()
    for first, want in (("replace", lambda e, p: e), ("blend", lambda e, p: 0.9 * p + 0.1 * e)):
        sim = _sim(fl.HBN(lam=0.1, first_estimate=first, final_round=False))
        sim.run()
        for n in ("1", "4"):
            _close(sim.global_state[f"{n}.global_mean"], want(exact.global_state[f"{n}.global_mean"], 0.0))
            _close(sim.global_state[f"{n}.global_var"], want(exact.global_state[f"{n}.global_var"], 1.0))


def test_alpha_sharing_averaged_starts_a_new_client_from_the_server_average():
    for sharing in ("local", "averaged"):
        alg = fl.HBN(alpha_sharing=sharing, final_round=False)
        sim = _sim(alg, rounds=2, local_steps=2)
        sim.participation = [np.array([0, 1]), np.array([1, 2])]
        start = {}
        orig = alg.client_start

        def spy(client, r, model, orig=orig, start=start):
            orig(client, r, model)
            start[(r, client.client)] = {n: p.detach().clone() for n, p in alpha_parameters(model)}

        alg.client_start = spy
        sim.run(stop_after=1)
        own = {c: {n: sim.client_local[c][n].clone() for n in start[(1, c)]} for c in (0, 1)}
        sim.run()
        for n, a in start[(2, 2)].items():
            if sharing == "local":
                assert torch.all(a == 0), n  # the layer's initial alpha
            else:  # round 1's size-weighted average (12 and 8 samples)
                _close(a, 0.6 * own[0][n] + 0.4 * own[1][n])
                assert float(a.abs().max()) > 0
            _close(start[(2, 1)][n], own[1][n])  # a returning client keeps its own alpha


def test_clip_grad_norm_clips_the_local_gradient():
    data = _data(n_per=(12,))
    model = _mlp()
    loss = nn.functional.cross_entropy(model(data.x_train), data.y_train)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    assert norm > 1e-2
    init = _mlp().state_dict()
    for clip, scale in ((None, 1.0), (1e-2, 1e-2 / (float(norm) + 1e-6))):
        sim = _sim(fl.HBN(clip_grad_norm=clip, final_round=False), data=data, lr=0.5)
        sim.run()
        for n, g in grads.items():
            if not n.endswith("alpha"):
                _close(sim.global_state[n], init[n] - 0.5 * scale * g)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        fl.HBN(clip_grad_norm=0)


def test_eval_stats_recompute_tests_with_the_rounds_clients_statistics_and_leaves_training_alone():
    base = _sim(fl.HBN(final_round=False), rounds=3, local_steps=2, participation=2 / 3)
    base.run()
    sim = _sim(fl.HBN(eval_stats="recompute", final_round=False), rounds=3, local_steps=2, participation=2 / 3)
    sim.run()
    for k in base.global_state:  # the server's statistics and the training are unchanged
        assert torch.equal(sim.global_state[k], base.global_state[k]), k
    clients = [int(c) for c in sim.participation[-1]]
    model = _mlp()
    parts = []
    for c in clients:
        model.load_state_dict(sim.client_state(c))
        parts.append(fl.hbn_client_stats(model, sim.x_train[torch.as_tensor(sim.client_indices[c])]))
    state = dict(sim.global_state)
    for n in ("1", "4"):
        state[f"{n}.global_mean"], state[f"{n}.global_var"] = stats.hbn_global([p[n] for p in parts])
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        loss = float(nn.functional.cross_entropy(model(sim.x_test), sim.y_test))
    assert math.isclose(sim.history.rows[-1]["test_loss"], loss, rel_tol=0, abs_tol=1e-10)
    assert not math.isclose(base.history.rows[-1]["test_loss"], loss, rel_tol=0, abs_tol=1e-6)


def test_reference_code_preset_sets_every_variant_and_takes_overrides():
    alg = fl.HBN.reference_code()
    for k, v in REFERENCE_CODE.items():
        assert getattr(alg, k) == v, k
    assert fl.HBN.reference_code(lam=0.5, solver="fedprox").lam == 0.5
    sim = _sim(fl.HBN.reference_code(), model=_cnn(), data=_data(shape=(1, 5, 5)), rounds=2)
    sim.run()
    assert all(np.isfinite(r["test_acc"]) for r in sim.history.rows)
    assert not any(r.get("statistics_only") for r in sim.history.rows)
    for label, bad in (("count", {"count": "pixels"}), ("stat_source", {"stat_source": "x"}),
                       ("first_estimate", {"first_estimate": "x"}), ("alpha_sharing", {"alpha_sharing": "x"}),
                       ("eval_stats", {"eval_stats": "x"})):
        with pytest.raises(ValueError, match=label):
            fl.HBN(**bad)
    with pytest.raises(ValueError, match="stat_samples"):
        fl.HBN(stat_source="reference", stat_samples=8)


def test_scaffold_under_hbn_keeps_alpha_out_of_its_control_variates():
    """alpha is client-local: SCAFFOLD's uploaded control-variate changes must not reveal how it moved."""
    from bnfl import models
    from bnfl.data import load, partition

    split = load("digits", form="flat")
    parts = partition.dirichlet(split.y_train.numpy()[:200], 4, 0.6, 0)
    data = fl.FederatedData(split.x_train[:200], split.y_train[:200], split.x_test[:40], split.y_test[:40], parts)
    torch.manual_seed(0)
    sim = fl.Simulation(models.build("q_mlp_bn", norm="hbn"), data, fl.HBN(solver="scaffold"),
                        fl.TrainConfig(rounds=2, local_steps=2, batch_size=8, lr=0.05, progress=False,
                                       batched="off"))
    sent: list[str] = []
    gather = sim.channel.gather

    def spy(uploads, **kw):
        sent.extend(k for u in uploads for k in u)
        return gather(uploads, **kw)

    sim.channel.gather = spy
    sim.run()
    assert any(k.startswith("scaffold.dc.") for k in sent)
    assert not any("alpha" in k for k in sent)
