"""FedBN's entries on the shared training loop: the per-client protocol as an observer
(:class:`bnfl.experiments.domain_protocol.FedBNProtocol`), its seeds in lock-step on the batched
engine, per-seed claims with intervals, each measurement counted once, "smoother" as upticks and
Fig. 9's attainable fit target. Smoke scale: a few rounds of a few samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnfl.experiments import core, training, tuning
from bnfl.experiments.cache import RunCache
from bnfl.experiments.claims import per_seed_claim
from bnfl.experiments.curves import upticks
from bnfl.experiments.domain_protocol import FedBNProtocol
from bnfl.experiments.papers.fedbn import digits, sweeps, unequal
from bnfl.experiments.papers.fedbn.setups import fedbn_run, fedbn_runs
from bnfl.theory.ntk import bayes_accuracy, fit_target

torch.set_num_threads(1)

#: Two Q-DOM domains of 16 training digits, Q-ALEX, 2 rounds of 1 local epoch (float64: the lock-step
#: computation sums in another order than one seed's own, see bnfl.fl.lockstep).
SPEC = {"data": {"name": "digit_domains", "form": "image", "domains": ["clean", "contrast"], "train_per_domain": 16},
        "model": {"name": "q_alex"}, "partition": {"kind": "by_domain"}, "rounds": 2, "method": "fedbn",
        "train": {"batch_size": 8, "lr": 0.01, "local_steps": 1, "local_unit": "epochs", "eval_every": 2,
                  "dtype": "float64"}}


def _without_time(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "seconds"}


def test_a_seed_records_the_same_alone_and_in_lockstep(monkeypatch):
    from bnfl.fl import lockstep

    calls = []
    real = lockstep.run_lockstep
    monkeypatch.setattr(lockstep, "run_lockstep", lambda sims, **kw: calls.append(len(sims)) or real(sims, **kw))
    cache = RunCache(None)
    together = fedbn_runs(core.Context(profile="smoke", cache=cache, batched="auto", seeds=[0, 1]), SPEC,
                          unseen=["thin"])
    assert calls == [2] and all(r["batched"]["used"] for r in together)
    for s, run in zip((0, 1), together, strict=True):
        alone = fedbn_runs(core.Context(profile="smoke", cache=cache, batched="auto", seeds=[s]), SPEC,
                           unseen=["thin"])[0]
        assert _without_time(alone) == _without_time(run)  # every recorded field, as stored
        assert len(run["eval_loss"]) == 2 and len(run["domain_acc"]) == 2 and "thin" in run["unseen_acc"]
    assert calls == [2] and len(cache) == 4  # the lone seeds trained on their own, cached apart


def test_the_observer_records_without_changing_the_training():
    ctx = core.Context(profile="smoke", cache=RunCache(None), batched="off", seeds=[0])
    spec = {**SPEC, "method": "fedavg+bn", "train": {**SPEC["train"], "dtype": "float32"}}
    plain = training.train(ctx, spec)
    seen = fedbn_run(ctx, spec)
    for key in ("train_loss", "test_acc", "domain_acc_global", "bytes_total"):
        assert seen[key] == plain[key]
    assert len(ctx.cache) == 2  # the observer is part of the cache key: another run
    assert len(seen["eval_loss"]) == 2 and seen["domain_acc"] == pytest.approx(plain["domain_acc_global"][:-1], abs=1e-3)
    quiet = fedbn_run(ctx, spec, curve=False)
    assert quiet["eval_loss"] == [] and quiet["domain_acc"] == seen["domain_acc"]


def test_observers_must_be_observers():
    with pytest.raises(TypeError, match="Observer"):
        training.train(core.Context(profile="smoke", cache=None, seeds=[0]), SPEC, observers=[lambda sim: None])
    with pytest.raises(ValueError, match="data"):
        FedBNProtocol(["thin"])


def _loss_runs(curves: list[list[float]]) -> list[dict]:
    return [{"eval_loss": c} for c in curves]


def test_smoother_counts_upticks_not_the_variance_of_the_changes():
    t = np.arange(12)
    slow = [list(1.0 - 0.01 * t + 0.001 * s) for s in range(3)]  # FedAvg: slow, no upticks
    fast = [list(np.exp(-0.5 * t) + 0.001 * s) for s in range(3)]  # FedBN: fast, large early steps, no upticks
    assert np.var(np.diff(fast[0])) > np.var(np.diff(slow[0]))  # the old check would call FedBN rougher
    claims = {c.name: c for c in digits._loss_claims("", _loss_runs(slow), _loss_runs(fast), [0, 1, 2])}
    assert claims["smoother"].verdict == "pass" and claims["faster"].verdict == "pass"
    assert claims["smoother"].interval is not None and claims["faster"].interval is not None
    jitter = [[v + (0.5 if i % 2 else 0.0) for i, v in enumerate(c)] for c in fast]  # FedBN rises every 2nd round
    assert upticks(jitter[0]) == 6 and upticks(fast[0]) == 0
    rough = {c.name: c for c in digits._loss_claims("", _loss_runs(slow), _loss_runs(jitter), [0, 1, 2])}
    assert rough["smoother"].verdict == "fail"


def test_fig9_target_is_the_bayes_accuracy_less_two_standard_errors():
    rng = np.random.default_rng(0)
    d, mean, rho = 10, 1.0, 0.8
    lag = np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    cov = rho ** lag
    x = mean + rng.standard_normal((100_000, d)) @ np.linalg.cholesky(cov).T  # class +mu of client 2
    mc = float(np.mean(x @ np.linalg.solve(cov, np.full(d, mean)) > 0))
    b1, b2 = bayes_accuracy(d, mean, rho)
    assert b2 == pytest.approx(mc, abs=0.005) and b1 > 0.999 and b2 < 0.93
    target, bayes = fit_target(d, mean, rho, 100)
    assert bayes == pytest.approx(50 * (b1 + b2)) and 90.0 < target < bayes < 99.0


def test_per_seed_claims_store_an_interval_and_one_seed_falls_back():
    c = per_seed_claim("x", "a >= b", [3.0, 4.0, 5.0], 0.0, baseline=[1.0, 1.5, 2.0], seeds=[0, 1, 2], n_test=72)
    assert c.verdict == "pass" and c.interval["seeds"] == [0, 1, 2] and c.interval["n_test"] == 72
    one = per_seed_claim("x", "a >= b", [3.0], 0.0, baseline=[2.5], seeds=[0], n_test=72)
    assert one.interval is None and one.verdict == "inconclusive"  # 0.5 < one test sample (1.39)
    with pytest.raises(ValueError, match="agree"):
        per_seed_claim("x", "a >= b", [3.0, 4.0], 0.0, seeds=[0, 1, 2])


def _fake_runs(acc: np.ndarray, domains: list[str]) -> list[dict]:
    return [{"domain_acc": list(map(float, row)), "domains": domains, "n_test_domain": [72] * len(domains),
             "n_test": 72 * len(domains), "diverged": False} for row in acc]


def test_shared_measurements_are_counted_once(monkeypatch):
    from bnfl import experiments as E

    ctx = core.Context(profile="quick", cache=None, seeds=[0, 1, 2])
    rng = np.random.default_rng(1)
    cfg13 = E.get("fedbn-tab13").configs["quick"]
    fake13 = {(b, int(e), k): 80 + rng.random((3, 5)) + (5 if k == "FedBN" else 0)
              for b in cfg13["B"] for e in cfg13["E"] for k in ("FedAvg", "FedBN")}
    monkeypatch.setattr(sweeps, "_t13", lambda ctx, config: (fake13, list(cfg13["base"]["data"]["domains"])))
    tab13 = sweeps.compute_tab13(ctx, cfg13)["claims"]
    fig8 = sweeps.compute_fig8(ctx, cfg13)["claims"]
    assert all(c.counted_in is None and c.interval is not None and c.verdict == "pass" for c in tab13)
    assert [c.counted_in for c in fig8] == ["fedbn-tab13"] * len(tab13)

    cfg5 = E.get("fedbn-fig5").configs["quick"]
    doms = list(cfg5["base"]["data"]["domains"])
    acc5 = {k: 70 + 20 * rng.random((3, 5)) for k in ("SingleSet", "FedAvg", "FedProx", "FedBN")}
    fake5 = {k: _fake_runs(a, doms) for k, a in acc5.items()}
    monkeypatch.setattr(digits, "sota_runs", lambda ctx, config, keys=tuple(fake5): {k: fake5[k] for k in keys})
    tacc5 = {k: 70 + 20 * rng.random((3, 5)) for k in fake5}
    tuned5 = {k: _fake_runs(a, doms) for k, a in tacc5.items()}
    rates5 = {k: tuning.Tuned(0.01, {0.01: 80.0, 0.02: 79.0}, (0, 1, 2), 0.2) for k in fake5}
    monkeypatch.setattr(digits, "tuned_sota_runs", lambda ctx, config: (tuned5, rates5))
    # the precondition (shift_damage) trains its iid control: only that training is faked, the
    # pairing with the shifted runs is the entry's own
    control5 = _fake_runs(80 + rng.random((3, 5)), doms)
    monkeypatch.setattr(digits.S, "fedbn_runs", lambda ctx, spec, *, unseen=(), curve=True: control5)
    fig5 = [c for c in digits.compute_fig5(ctx, cfg5)["claims"] if c.verdict != "info"]
    tab11 = [c for c in digits.compute_tab11(ctx, cfg5)["claims"] if c.verdict != "info"]
    assert all(c.counted_in is None and c.interval is not None for c in fig5)
    assert [c.counted_in for c in tab11] == ["fedbn-fig5"] * len(fig5)
    # row 18 is judged on each method at its own tuned rate; the per-domain checks on the common-rate runs
    others = ("SingleSet", "FedAvg", "FedProx")
    best = max(others, key=lambda k: tacc5[k].mean())
    mean5 = next(c for c in fig5 if c.name == "fedbn-best-mean")
    assert "tuned rate" in mean5.statement and "(lr 0.01)" in mean5.detail
    assert mean5.measured == pytest.approx(tacc5["FedBN"].mean() - tacc5[best].mean())
    clean = next(c for c in fig5 if c.name == f"fedbn-{doms[0]}")
    assert clean.measured == pytest.approx(acc5["FedBN"][:, 0].mean() - max(acc5[k][:, 0].mean() for k in others))

    cfg15 = E.get("fedbn-tab15").configs["quick"]
    fake15 = {k: _fake_runs(70 + 20 * rng.random((3, 5)), doms) for k in ("FedAvg", "FedProx", "FedBN")}
    monkeypatch.setattr(unequal, "_unequal_runs", lambda ctx, config: fake15)
    t15 = unequal.compute_tab15(ctx, cfg15)["claims"]
    t16 = unequal.compute_tab16(ctx, E.get("fedbn-tab16").configs["quick"])["claims"]
    assert all(c.counted_in is None and c.interval is not None for c in t15)
    trained = [c for c in t16 if c.kind == "reproduction"]
    assert [c.counted_in for c in trained] == ["fedbn-tab15"] * len(t15)
    assert all(c.counted_in is None for c in t16 if c.kind == "consistency")
