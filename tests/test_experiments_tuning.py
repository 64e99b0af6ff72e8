"""Fair learning rates (:mod:`bnfl.experiments.tuning`) and the lock-step grid they train on
(:func:`bnfl.experiments.training.train_grid`)."""

from __future__ import annotations

import math

import pytest

from bnfl.experiments import core, training, tuning
from bnfl.experiments.cache import RunCache

SPEC = {"method": "fedavg+bn", "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
        "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 3}, "rounds": 2,
        "train": {"local_steps": 2, "eval_every": 2}}


def test_a_grid_trains_as_one_lockstep_group_and_a_one_rate_grid_is_the_seed_group(monkeypatch):
    from bnfl.fl import lockstep

    calls = []
    real = lockstep.run_lockstep
    monkeypatch.setattr(lockstep, "run_lockstep", lambda sims, **kw: calls.append(len(sims)) or real(sims, **kw))
    cache = RunCache(None)
    ctx = core.Context(profile="smoke", cache=cache, batched="auto", seeds=[0, 1])
    grid = training.train_grid(ctx, SPEC, [0.05, 0.2])
    assert calls == [4] and sorted(grid) == [0.05, 0.2] and all(len(v) == 2 for v in grid.values())
    assert grid[0.05][0]["test_acc"] != grid[0.2][0]["test_acc"]  # the rate reaches its row
    assert training.train_grid(ctx, SPEC, [0.05, 0.2]) == grid and calls == [4]  # cached
    one = training.train_grid(ctx, SPEC, [0.05])[0.05]
    seeds = training.train_seeds(ctx, core.deep_merge(SPEC, {"train": {"lr": 0.05}}))
    assert [r["test_acc"] for r in one] == [r["test_acc"] for r in seeds]  # bitwise: the same lock-step
    off = core.Context(profile="smoke", cache=cache, seeds=[0, 1])
    alone = training.train_grid(off, SPEC, [0.05, 0.2])
    assert alone[0.2][1] == training.train(off, training._seed_spec(core.deep_merge(SPEC, {"train": {"lr": 0.2}}), 1))
    with pytest.raises(ValueError, match="distinct"):
        training.train_grid(ctx, SPEC, [0.1, 0.1])


def test_tune_rate_takes_the_best_mean_validation_accuracy_ties_to_the_larger_and_never_a_diverged_rate(monkeypatch):
    table = {0.01: [80.0, 82.0], 0.05: [90.0, 88.0], 0.1: [89.0, 89.0], 0.5: [99.0, float("nan")]}
    seen = {}

    def fake(ctx, spec, rates):
        seen.update(spec=spec, seeds=list(ctx.seeds))
        return {lr: [{"test_acc": [v]} for v in table[lr]] for lr in rates}

    monkeypatch.setattr(tuning, "train_grid", fake)
    t = tuning.tune_rate(core.Context(profile="quick"), SPEC, list(table), seeds=(0, 1))
    assert t.rate == 0.1 and t.scores[0.05] == t.scores[0.1] == 89.0 and t.scores[0.5] == -math.inf
    assert seen["spec"]["data"]["validation"] == 0.2 and seen["seeds"] == [0, 1] and "validation" not in SPEC["data"]
    assert not t.at_edge and "lr 0.1 (validation 89.0" in t.describe() and "0.5: diverged" in t.describe()
    with pytest.raises(ValueError, match="empty"):
        tuning.tune_rate(core.Context(profile="quick"), SPEC, [])
    with pytest.raises(ValueError, match="fraction"):
        tuning.tune_rate(core.Context(profile="quick"), SPEC, [0.1], validation=1.0)
    table[0.1] = table[0.05] = table[0.01] = [float("nan")]
    with pytest.raises(RuntimeError, match="diverged"):
        tuning.tune_rate(core.Context(profile="quick"), SPEC, [0.01, 0.05, 0.1, 0.5])


def test_a_best_rate_at_the_grid_edge_grows_the_grid_past_it_at_its_spacing(monkeypatch):
    """A rate chosen at the grid's edge is not known to be the best: the grid grows outward one rate at a
    time at its spacing there, at most ``extend`` rates, every added rate a group of its own (the given
    grid's runs are the same computation as without the extension)."""
    calls: list[list[float]] = []
    peak = {"at": 2.0}
    diverge_above = {"lr": math.inf}

    def fake(ctx, spec, rates):
        calls.append(list(rates))
        return {lr: [{"test_acc": [float("nan") if lr > diverge_above["lr"] else 90.0 - abs(math.log2(lr / peak["at"]))]}
                     for _ in ctx.seeds] for lr in rates}

    monkeypatch.setattr(tuning, "train_grid", fake)
    ctx = core.Context(profile="quick")
    t = tuning.tune_rate(ctx, SPEC, [0.25, 0.5, 1.0], seeds=(0,))
    assert calls == [[0.25, 0.5, 1.0], [2.0], [4.0]] and t.added == (2.0, 4.0)
    assert t.rate == 2.0 and not t.at_edge and "2, 4 added past the edge" in t.describe()
    calls.clear()
    peak["at"] = 100.0  # still rising after EXTEND rates: the choice stays at the (grown) edge and says so
    t = tuning.tune_rate(ctx, SPEC, [0.25, 0.5, 1.0], seeds=(0,))
    assert len(calls) == 1 + tuning.EXTEND and t.rate == 4.0 and t.at_edge
    calls.clear()
    peak["at"] = 0.001  # the bottom edge grows down: 0.01 / (0.02 / 0.01) = 0.005, then 0.0025
    t = tuning.tune_rate(ctx, SPEC, [0.01, 0.02, 0.05], seeds=(0,))
    assert calls[1:] == [[0.005], [0.0025]] and t.rate == 0.0025
    calls.clear()
    peak["at"], diverge_above["lr"] = 100.0, 1.0  # the rate past the top diverges: the old edge is inside now
    t = tuning.tune_rate(ctx, SPEC, [0.25, 0.5, 1.0], seeds=(0,))
    assert calls == [[0.25, 0.5, 1.0], [2.0]] and t.rate == 1.0 and not t.at_edge and t.scores[2.0] == -math.inf
    calls.clear()
    assert tuning.tune_rate(ctx, SPEC, [0.25, 0.5, 1.0], seeds=(0,), extend=0).added == () and len(calls) == 1
    # the rule does not read the profile: a smoke table keeps its grid by saying so (tuning.SMOKE_TUNE)
    assert tuning.tune_rate(core.Context(profile="smoke"), SPEC, [0.25, 0.5, 1.0], seeds=(0,)).added == (2.0,)
    with pytest.raises(ValueError, match="extend"):
        tuning.tune_rate(ctx, SPEC, [0.25, 0.5], extend=-1)


def test_tune_rate_scores_the_runs_by_what_the_claim_judges_when_given_score(monkeypatch):
    """FedBN's clients are judged each on its own domain (``mean_over_clients``), not by the default
    ``test_acc`` (every client's model on the whole split): the two can pick different rates, and a
    diverged seed (NaN) still rules a rate out under any score."""
    whole = {0.01: 60.0, 0.05: 40.0, 0.1: 20.0}  # test_acc: each client's model on every domain
    own = {0.01: 70.0, 0.05: 90.0, 0.1: 99.0}  # each client's model on its own domain

    def run(lr, seed):
        if lr == 0.1 and seed == 1:
            return {"diverged": True, "domains": ["a", "b"], "test_acc": [whole[lr]]}
        return {"test_acc": [whole[lr]], "domains": ["a", "b"], "client_domain": [0, 1],
                "domain_acc_clients": [[own[lr] + 1, 0.0, 50.0], [0.0, own[lr] - 1, 50.0]]}

    monkeypatch.setattr(tuning, "train_grid", lambda ctx, spec, rates: {lr: [run(lr, s) for s in ctx.seeds]
                                                                        for lr in rates})
    ctx = core.Context(profile="quick")
    assert tuning.tune_rate(ctx, SPEC, list(whole), seeds=(0, 1), extend=0).rate == 0.01  # default unchanged
    t = tuning.tune_rate(ctx, SPEC, list(whole), seeds=(0, 1), score=training.mean_over_clients)
    assert t.rate == 0.05 and t.scores == {0.01: 70.0, 0.05: 90.0, 0.1: -math.inf}
