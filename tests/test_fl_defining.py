"""Defining properties of SCAFFOLD, Centralized and SingleNet (bnfl.fl), each checked against an
independent hand-written reference in float64 (the end-to-end "runs" tests live in
test_fl_algorithms.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import fl

TOL = 1e-12


def _data(n_per=(12, 8, 10), dim=6, classes=3, seed=0, shift=0.0):
    """Non-iid float64 clients of unequal sizes; ``shift`` moves the last client's features."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for i, n in enumerate(n_per):
        x = torch.randn(n, dim, generator=g, dtype=torch.float64) + 2.0 * i
        if i == len(n_per) - 1:
            x = x + shift
        xs.append(x)
        ys.append(torch.full((n,), i % classes, dtype=torch.int64))
    x, y = torch.cat(xs), torch.cat(ys)
    bounds = np.cumsum((0,) + tuple(n_per))
    parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(n_per))]
    return fl.FederatedData(x, y, x, y, parts)


def _mlp(dim=6, classes=3, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8), nn.BatchNorm1d(8),
                         nn.ReLU(), nn.Linear(8, classes)).double()


def _cfg(**kw):
    base = dict(rounds=1, local_steps=1, batch_size=1000, lr=0.3, dtype="float64", progress=False,
                batched="off")  # the sequential reference engine (the default is batched='auto')
    base.update(kw)
    return fl.TrainConfig(**base)


def _client_xy(data, c):
    idx = torch.as_tensor(data.clients[c])
    return data.x_train[idx], data.y_train[idx]


def _pooled_xy(data):
    idx = torch.as_tensor(np.concatenate(data.clients))
    return data.x_train[idx], data.y_train[idx]


def _sgd_steps(model, batches, lr, correction=None):
    """Plain SGD by hand: ``w -= lr * (grad + correction)`` per batch, in train mode (PyTorch BN
    updates its running statistics as in any training step). Returns the model."""
    model.train()
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for n, p in model.named_parameters():
                g = p.grad if correction is None else p.grad + correction[n]
                p -= lr * g
    return model


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _max_diff(a, b):
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in b)


def _state(sd):
    return {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}


# -- SCAFFOLD (Karimireddy et al. 2020, Algorithm 1, option II) --------------------------------------


def _ci(sim):
    """Every client's SCAFFOLD control variate c_i: client state, kept in the engine's store."""
    return {j: s["scaffold.ci"] for j, s in sim.client_algorithm.items()}


class _ScaffoldSpy(fl.Scaffold):
    """Records what the server holds at the start of every round (``c``, and every client's
    ``c_i`` from the simulation's client store ``sim``), and each client's parameters just before
    every local optimizer step (after the SCAFFOLD gradient correction)."""

    def __init__(self):
        super().__init__()
        self.sim = None  # set by the test: where the clients' states are kept
        self.at_round: dict[int, dict] = {}
        self.before_step: dict[tuple[int, int], list[dict]] = {}
        self._rc = (0, 0)

    def begin_round(self, server, r, clients, state):
        super().begin_round(server, r, clients, state)
        self.at_round[r] = {"global": copy.deepcopy(dict(state)), "c": copy.deepcopy(server.state.get("scaffold.c")),
                            "ci": copy.deepcopy(_ci(self.sim)), "clients": list(clients)}

    def client_start(self, client, r, model):
        super().client_start(client, r, model)
        self._rc = (r, client.client)
        self.before_step[self._rc] = []

    def adjust_grads(self, client, model):
        super().adjust_grads(client, model)
        self.before_step[self._rc].append({n: (p.detach().clone(), p.grad.detach().clone())
                                           for n, p in model.named_parameters()})


def _scaffold_reference(model, data, cfg, rounds_clients):
    """SCAFFOLD option II by hand, replaying each client's mini-batch stream through a twin
    Simulation's public ``next_batch`` (the stream depends only on seed, client and epoch)."""
    twin = fl.Simulation(model, data, fl.Scaffold(), cfg)
    n = np.array([len(c) for c in data.clients], dtype=np.float64)
    big_n = len(data.clients)
    w_g = {k: v.clone() for k, v in twin.global_state.items()}
    zeros = {k: torch.zeros_like(p) for k, p in model.named_parameters()}
    c = dict(zeros)
    ci = {j: dict(zeros) for j in range(big_n)}
    states = []
    for clients in rounds_clients:
        states.append({"global": {k: v.clone() for k, v in w_g.items()}, "c": dict(c),
                       "ci": {j: dict(v) for j, v in ci.items()}})
        locals_, dcs = [], []
        for j in clients:
            m = copy.deepcopy(model)
            m.load_state_dict(w_g)
            start = _params(m)
            corr = {k: c[k] - ci[j][k] for k in c}  # gradient g + c - c_i
            _sgd_steps(m, [twin.next_batch(j) for _ in range(cfg.local_steps)], cfg.lr, corr)
            new = {k: ci[j][k] - c[k] + (start[k] - p.detach()) / (cfg.local_steps * cfg.lr)
                   for k, p in m.named_parameters()}
            dcs.append({k: new[k] - ci[j][k] for k in new})
            ci[j] = new
            locals_.append(_state(m.state_dict()))
        p = n[clients] / n[clients].sum()
        for k in locals_[0]:
            w_g[k] = sum(float(pi) * s[k] for pi, s in zip(p, locals_, strict=True))
        c = {k: c[k] + (len(clients) / big_n) * (sum(d[k] for d in dcs) / len(clients)) for k in c}
    return states, c, ci


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_scaffold_control_variates_follow_option_ii(participation):
    """Karimireddy et al. 2020, Alg. 1 line 12 (option II) and line 17: after each round every
    participating client's c_i^+ = c_i - c + (w_g - w_i)/(K lr), the server's
    c <- c + |S|/N * mean_S(delta c_i); mini-batches B=4, K=3 plain SGD steps, BN model, 3 rounds,
    and (participation 0.5) only half of N=4 clients per round, so the |S|/N factor matters."""
    data = _data(n_per=(12, 8, 10, 9))
    model = _mlp()
    cfg = _cfg(rounds=3, local_steps=3, batch_size=4, participation=participation, seed=3)
    alg = _ScaffoldSpy()
    sim = alg.sim = fl.Simulation(model, data, alg, cfg)
    sim.run()
    rounds_clients = [row["clients"] for row in sim.history.rows]
    if participation < 1:
        assert all(len(cl) == 2 for cl in rounds_clients)
    states, c_final, ci_final = _scaffold_reference(model, data, cfg, rounds_clients)
    for r, ref in enumerate(states, start=1):
        got = alg.at_round[r]
        assert _max_diff(got["global"], _state(ref["global"])) < TOL, r
        if r > 1:  # the server's c, and every c_i seen so far, at the start of rounds 2, 3
            assert _max_diff(got["c"], ref["c"]) < TOL, r
            for j, cij in got["ci"].items():
                assert _max_diff(cij, ref["ci"][j]) < TOL, (r, j)
    assert _max_diff(sim.server.state["scaffold.c"], c_final) < TOL
    assert sorted(_ci(sim)) == sorted({j for cl in rounds_clients for j in cl})
    for j, cij in _ci(sim).items():
        assert _max_diff(cij, ci_final[j]) < TOL, j
    # the control variates are not trivial (else the test would prove nothing)
    assert max(float(t.abs().max()) for t in sim.server.state["scaffold.c"].values()) > 1e-3


def test_scaffold_round_two_first_step_uses_corrected_gradient():
    """Round 2, client 1, local step 1 by hand: w <- w_g - lr (grad f_1(w_g; batch) + c - c_1),
    with c and c_1 the values the server and client hold after round 1 (non-zero)."""
    data = _data()
    model = _mlp()
    cfg = _cfg(rounds=2, local_steps=3, batch_size=4, seed=1)
    alg = _ScaffoldSpy()
    sim = alg.sim = fl.Simulation(model, data, alg, cfg)
    sim.run(stop_after=1)
    w_g = copy.deepcopy(sim.global_state)
    c, c1 = copy.deepcopy(sim.server.state["scaffold.c"]), copy.deepcopy(_ci(sim)[1])
    assert max(float((c[k] - c1[k]).abs().max()) for k in c) > 1e-3
    sim.run()
    twin = fl.Simulation(model, data, fl.Scaffold(), cfg)
    for _ in range(cfg.local_steps):  # client 1's round-1 batches
        twin.next_batch(1)
    x, y = twin.next_batch(1)
    m = copy.deepcopy(model)
    m.load_state_dict(w_g)
    m.train()
    nn.functional.cross_entropy(m(x), y).backward()
    seen = alg.before_step[(2, 1)]
    for n, p in m.named_parameters():
        corrected = p.grad + c[n] - c1[n]
        torch.testing.assert_close(seen[0][n][1], corrected, rtol=0, atol=TOL)  # gradient at step 1
        torch.testing.assert_close(seen[1][n][0], p.detach() - cfg.lr * corrected, rtol=0, atol=TOL)  # w after it
        torch.testing.assert_close(seen[0][n][0], p.detach(), rtol=0, atol=0)  # step 1 starts at w_g


def test_scaffold_with_one_client_is_fedavg():
    """N=1: the server's c becomes c_1 after every round, so the correction c - c_1 vanishes and
    SCAFFOLD is FedAvg (histories and final models equal); only its bytes differ (c is sent)."""
    data = _data(n_per=(20,))
    model = _mlp()
    cfg = _cfg(rounds=3, local_steps=3, batch_size=5)
    runs = {}
    for alg in (fl.Scaffold(), fl.FedAvg()):
        sim = fl.Simulation(model, data, alg, cfg)
        runs[type(alg).__name__] = (sim, sim.run())
    (s_sim, s_hist), (f_sim, f_hist) = runs["Scaffold"], runs["FedAvg"]
    assert _max_diff(s_sim.global_state, _state(f_sim.global_state)) < TOL
    for k, v in f_sim.global_state.items():
        if not v.is_floating_point():
            assert torch.equal(s_sim.global_state[k], v), k
    for name in ("train_loss", "test_loss", "test_acc"):
        np.testing.assert_allclose(s_hist.column(name), f_hist.column(name), rtol=0, atol=TOL)
    assert s_hist.column("clients") == f_hist.column("clients")
    assert s_hist.column("bytes_total")[-1] > f_hist.column("bytes_total")[-1]


# -- Centralized (CATALOG §0.2: one learner on the pooled data, batch N*B, R*E steps) ---------------


@pytest.mark.parametrize("rounds, local_steps", [(1, 1), (2, 3)])
def test_centralized_is_full_batch_gd_on_the_union(rounds, local_steps):
    """Batch N*B >= pooled size: R rounds of E local steps are R*E gradient-descent steps of one
    model on the union (parameters, BN running statistics and counters); nothing is sent."""
    data = _data()
    model = _mlp()
    cfg = _cfg(rounds=rounds, local_steps=local_steps, batch_size=10)  # N*B = 30 = pooled size
    sim = fl.Simulation(model, data, fl.Centralized(), cfg)
    hist = sim.run()
    assert sim.batch_size == 30
    x, y = _pooled_xy(data)
    ref = _sgd_steps(copy.deepcopy(model), [(x, y)] * (rounds * local_steps), cfg.lr).state_dict()
    assert _max_diff(sim.global_state, _state(ref)) < TOL
    for k, v in ref.items():
        if k.endswith("num_batches_tracked"):
            assert int(sim.global_state[k]) == int(v) == rounds * local_steps
    assert sim.channel.bytes_total == 0 and sim.channel.rounds == 0 and not sim.channel.exchanges
    assert hist.column("bytes_total") == [0] * rounds


def test_centralized_minibatches_have_size_n_times_b():
    """Mini-batch variant: B=4, N=3 -> batches of 12 drawn from the pooled 30 samples; the run
    equals R*E SGD steps on that pooled stream (replayed through a twin's ``next_batch``)."""
    data = _data()
    model = _mlp()
    cfg = _cfg(rounds=2, local_steps=3, batch_size=4, seed=2)
    sim = fl.Simulation(model, data, fl.Centralized(), cfg)
    sim.run()
    twin = fl.Simulation(model, data, fl.Centralized(), cfg)
    assert twin.num_clients == 1
    batches = [twin.next_batch(0) for _ in range(2 * 3)]
    assert all(xb.shape[0] == 12 for xb, _ in batches)
    pooled = {tuple(r.tolist()) for r in _pooled_xy(data)[0]}
    seen = {tuple(r.tolist()) for xb, _ in batches for r in xb}
    assert seen <= pooled and len(seen) > 12  # samples of several clients, more than one batch
    ref = _sgd_steps(copy.deepcopy(model), batches, cfg.lr).state_dict()
    assert _max_diff(sim.global_state, _state(ref)) < TOL
    assert sim.channel.bytes_total == 0


# -- SingleNet (every client trains alone) -------------------------------------------------------------


def test_singlenet_client_models_are_trained_alone():
    """Full batch: client c's final model is R*E gradient-descent steps on its own data alone
    (parameters and BN statistics); no byte crosses the channel; the global state is untouched."""
    data = _data()
    model = _mlp()
    cfg = _cfg(rounds=2, local_steps=3)
    sim = fl.Simulation(model, data, fl.SingleNet(), cfg)
    hist = sim.run()
    for c in range(len(data.clients)):
        ref = _sgd_steps(copy.deepcopy(model), [_client_xy(data, c)] * 6, cfg.lr).state_dict()
        got = sim.client_model(c).state_dict()
        assert _max_diff(got, _state(ref)) < TOL, c
    init = model.state_dict()
    for k, v in sim.global_state.items():
        assert torch.equal(v, init[k]), k
    assert sim.channel.bytes_total == 0 and sim.channel.rounds == 0 and not sim.channel.exchanges
    assert hist.column("bytes_total") == [0, 0]
    # each client's model is evaluated (personalised protocol), and they differ (non-iid data)
    assert len(hist.rows[-1]["client_test_acc"]) == 3
    assert _max_diff(sim.client_model(0).state_dict(), _state(sim.client_model(1).state_dict())) > 1e-3


def test_singlenet_client_unaffected_by_other_clients_data():
    """Changing client 2's data (values and size) leaves clients 0 and 1 bitwise unchanged
    (mini-batches B=4, several rounds); client 2 itself does change."""
    cfg = _cfg(rounds=3, local_steps=2, batch_size=4, seed=5)
    model = _mlp()
    a = fl.Simulation(model, _data(), fl.SingleNet(), cfg)
    b = fl.Simulation(model, _data(n_per=(12, 8, 15), shift=3.0), fl.SingleNet(), cfg)
    a.run()
    b.run()
    for c in (0, 1):
        sa, sb = a.client_state(c), b.client_state(c)
        assert all(torch.equal(sa[k], sb[k]) for k in sa), c
    sa, sb = a.client_state(2), b.client_state(2)
    assert not all(torch.equal(sa[k], sb[k]) for k in sa)
