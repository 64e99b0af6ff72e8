"""SCAFFOLD's option-II control variates under SGD momentum (Karimireddy et al. 2020, Alg. 1 line 12,
with the heavy-ball step count K_mu of bnfl.fl.algorithms._fedavg.momentum_steps), float64, sequential
engine. The plain-SGD case (momentum 0) is proven in test_fl_defining.py; here: the momentum case by
hand, and momentum 0 bit for bit equal to the paper's K * lr formula."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import fl
from bnfl.fl.algorithms._fedavg import momentum_steps

torch.set_num_threads(1)


def _data(n_per=(12, 8, 10), dim=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(n, dim, generator=g, dtype=torch.float64) + 2.0 * i for i, n in enumerate(n_per)]
    ys = [torch.full((n,), i % classes, dtype=torch.int64) for i, n in enumerate(n_per)]
    x, y = torch.cat(xs), torch.cat(ys)
    bounds = np.cumsum((0,) + tuple(n_per))
    return fl.FederatedData(x, y, x, y, [np.arange(bounds[i], bounds[i + 1]) for i in range(len(n_per))])


def _mlp(dim=6, classes=3, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, classes)).double()


def _cfg(**kw):
    base = dict(rounds=2, local_steps=3, batch_size=4, lr=0.1, dtype="float64", progress=False, batched="off")
    base.update(kw)
    return fl.TrainConfig(**base)


class _RawGradients(fl.Scaffold):
    """Records every client's raw gradients (before SCAFFOLD's correction) per local step, and its
    c_i after each round."""

    def __init__(self):
        super().__init__()
        self.raw: dict[tuple[int, int], list[dict[str, torch.Tensor]]] = {}
        self.ci_after: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self.c_before: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self._rc = (0, 0)

    def client_start(self, client, r, model):
        super().client_start(client, r, model)
        self._rc = (r, client.client)
        self.raw[self._rc] = []
        c_recv, ci = client.scratch["scaffold.c"], client.state["scaffold.ci"]
        self.c_before[self._rc] = {n: (c_recv[n] - ci[n]).clone() for n in c_recv}

    def adjust_grads(self, client, model):
        self.raw[self._rc].append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        super().adjust_grads(client, model)

    def extra_upload(self, client, model, steps, lr):
        up = super().extra_upload(client, model, steps, lr)
        self.ci_after[self._rc] = copy.deepcopy(client.state["scaffold.ci"])
        return up


@pytest.mark.parametrize("k", [1, 2, 3, 7])
@pytest.mark.parametrize("mu", [0.0, 0.5, 0.9])
def test_momentum_steps_is_the_heavy_ball_displacement_per_unit_gradient(k, mu):
    """K_mu = sum_m (1 - mu^m)/(1 - mu): the distance PyTorch's SGD(momentum=mu) moves a weight in
    k steps of a constant unit gradient at lr 1; exactly the int k at mu = 0."""
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0, momentum=mu)
    for _ in range(k):
        w.grad = torch.ones_like(w)
        opt.step()
    assert momentum_steps(k, mu) == pytest.approx(-float(w.detach()), rel=1e-14)
    if mu == 0:
        assert momentum_steps(k, mu) == k and isinstance(momentum_steps(k, mu), int)


def test_momentum_steps_rejects_bad_input():
    with pytest.raises(ValueError, match="momentum"):
        momentum_steps(3, 1.0)
    with pytest.raises(ValueError, match="steps"):
        momentum_steps(0, 0.9)


def test_scaffold_variate_under_momentum_is_the_momentum_weighted_mean_of_raw_gradients():
    """Option II's aim, c_i^+ = the client's mean gradient, under momentum mu = 0.9 (buffer from 0
    each round): step k's corrected gradient moves the weights by lr (1 - mu^(K-k+1))/(1 - mu), so
    c_i^+ = sum_k w_k g_k / sum_k w_k with the raw gradients g_k, in round 1 (c = c_i = 0) and in
    round 2, where the correction c - c_i is non-zero and must cancel. The paper's K * lr
    denominator would give c_i^+ about 1/(1 - mu) times too large (this test fails with it)."""
    mu, k = 0.9, 3
    cfg = _cfg(momentum=mu, local_steps=k)
    alg = _RawGradients()
    fl.Simulation(_mlp(), _data(), alg, cfg).run()
    w = [(1 - mu ** (k - j)) / (1 - mu) for j in range(k)]  # step j = 0..K-1 counts K - j buffer terms
    assert sum(w) == pytest.approx(momentum_steps(k, mu), rel=1e-14)
    corrected = 0.0
    for (r, c), ci in alg.ci_after.items():
        raw = alg.raw[(r, c)]
        assert len(raw) == k
        for n, got in ci.items():
            want = sum(wj * g[n] for wj, g in zip(w, raw, strict=True)) / sum(w)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        if r == 2:
            corrected = max(corrected, max(float(v.abs().max()) for v in alg.c_before[(r, c)].values()))
    assert corrected > 1e-3  # round 2 really ran with a non-zero correction c - c_i


class _PaperFormula(fl.Scaffold):
    """SCAFFOLD with the paper's plain-SGD denominator K * lr written out (bnfl before the fix)."""

    def extra_upload(self, client, model, steps, lr):
        ci, c_recv, start = client.state["scaffold.ci"], client.scratch["scaffold.c"], client.scratch["scaffold.start"]
        new = {n: ci[n] - c_recv[n] + (start[n] - p.detach()) / (steps * lr)
               for n, p in model.named_parameters() if n in c_recv}
        delta = {f"scaffold.dc.{n}": new[n] - ci[n] for n in new}
        client.state["scaffold.ci"] = new
        return delta


def test_scaffold_at_momentum_zero_is_the_paper_formula_bit_for_bit():
    """Plain SGD: the momentum-scaled variates reduce to c_i - c + (w_g - w_i)/(K lr) exactly
    (global models, c and every c_i bitwise equal after 3 rounds with half the clients a round)."""
    cfg = _cfg(rounds=3, participation=0.67, seed=2, dtype="float32")
    got, ref = fl.Scaffold(), _PaperFormula()
    a = fl.Simulation(_mlp(), _data(), got, cfg)
    b = fl.Simulation(_mlp(), _data(), ref, cfg)
    a.run()
    b.run()
    for key, v in b.global_state.items():
        assert torch.equal(a.global_state[key], v), key
    c_got, c_ref = a.server.state["scaffold.c"], b.server.state["scaffold.c"]
    assert all(torch.equal(c_got[n], c_ref[n]) for n in c_ref)
    ci_got = {j: s["scaffold.ci"] for j, s in a.client_algorithm.items()}
    ci_ref = {j: s["scaffold.ci"] for j, s in b.client_algorithm.items()}
    assert sorted(ci_got) == sorted(ci_ref)
    assert all(torch.equal(ci_got[j][n], ci_ref[j][n]) for j in ci_ref for n in ci_ref[j])
    assert max(float(t.abs().max()) for t in c_got.values()) > 1e-3


def test_scaffold_refuses_momentum_carried_across_rounds():
    """The momentum scaling assumes a buffer that starts at 0 every round; a kept one is an error."""
    cfg = _cfg(momentum=0.9, momentum_mode="local", rounds=1)
    with pytest.raises(ValueError, match="momentum_mode"):
        fl.Simulation(_mlp(), _data(), fl.Scaffold(), cfg).run()
