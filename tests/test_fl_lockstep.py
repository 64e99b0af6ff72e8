"""Seeds in lock-step (:func:`bnfl.fl.lockstep.run_lockstep`): the clients of several simulations
train as one batched computation, and each simulation ends where its own batched run ends
(states and history to 1e-12 in float64, byte counters equal); a diverging one stops with its
error while the others go on; what cannot share a computation trains apart."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
from test_fl_batched import _max_history_diff, _max_state_diff  # (tests/ is on sys.path)

from bnfl import fl
from bnfl.fl.lockstep import run_lockstep

SPEC = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": 3, "seed": 0,
        "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 5},
        "train": {"local_steps": 3, "lr": 0.05, "batch_size": 48, "momentum": 0.9, "participation": 0.6,
                  "dtype": "float64", "progress": False, "batched": "on"}}
SEEDS = (0, 1, 2)
#: plain BN, local BN state, a hook with per-client scratch (FedProx's anchor), control variates
#: and extra uploads (SCAFFOLD), the frozen phase (FixBN), HBN's alphas and statistics requests,
#: server state (FedAdam), GN, and FedTAN (its coupled first step trains each seed apart)
METHODS = ["fedavg+bn", "fedbn", "fedprox", "scaffold", "fixbn", "hbn", "fedadam+bn", "fedavg+gn", "fedtan"]


def _spec(method: str, seed: int, **train) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["method"], spec["seed"] = method, seed
    spec["partition"]["seed"] = seed
    spec["train"].update(train)
    if method == "fixbn":
        spec["method_options"] = {"switch": 2}
    return spec


def _assert_same(a: fl.Simulation, b: fl.Simulation) -> None:
    """Equal up to float64 rounding: the seeds' clients are padded to the largest batch of all of
    them, so BN moments and losses sum in another order than in one seed's own computation."""
    assert _max_state_diff(a, b) <= 1e-12
    assert _max_history_diff(a.history, b.history) <= 1e-12
    assert a.channel.counters() == b.channel.counters()


@pytest.mark.parametrize("method", METHODS)
def test_seeds_in_lockstep_end_where_each_seeds_own_batched_run_ends(method):
    alone = [fl.build(_spec(method, s)) for s in SEEDS]
    for sim in alone:
        sim.run()
    together = [fl.build(_spec(method, s)) for s in SEEDS]
    outcomes = run_lockstep(together)
    for sim, solo, out in zip(together, alone, outcomes, strict=True):
        assert out is sim.history
        _assert_same(sim, solo)
    assert all(type(s.batched_engine).__name__ == "BatchedClients" for s in together)


def test_uneven_local_epochs_across_seeds_train_together():
    """Local epochs over Dirichlet splits: every seed's clients have their own step counts, and the
    rows of all seeds are ordered by them in one computation."""
    alone = [fl.build(_spec("fedavg+bn", s, local_unit="epochs", local_steps=1, batch_size=16)) for s in SEEDS]
    counts = set()
    for sim in alone:
        counts |= {sim.steps_this_round(c) for c in range(sim.num_clients)}
        sim.cursors = {c: [0, 0] for c in range(sim.num_clients)}
        sim.run()
    assert len(counts) >= 4
    together = [fl.build(_spec("fedavg+bn", s, local_unit="epochs", local_steps=1, batch_size=16)) for s in SEEDS]
    run_lockstep(together)
    for sim, solo in zip(together, alone, strict=True):
        _assert_same(sim, solo)


def test_a_diverging_seed_stops_with_its_error_and_history_while_the_others_go_on():
    alone = fl.build(_spec("fedavg+bn", 2))
    alone.run()
    sims = [fl.build(_spec("fedavg+bn", s)) for s in (0, 2)]
    key = next(k for k in sims[0].global_state if k.endswith("weight"))
    sims[0].global_state[key] = torch.full_like(sims[0].global_state[key], float("nan"))
    bad, good = run_lockstep(sims)
    assert isinstance(bad, fl.DivergenceError) and "non-finite loss" in str(bad)
    assert bad.history is sims[0].history and len(bad.history) == 0
    assert good is sims[1].history
    _assert_same(sims[1], alone)


def test_the_global_random_state_is_each_simulations_own_and_restored():
    seen = []

    class Spy:
        def __call__(self, sim, r):
            if r == 1:
                seen.append((sim.config.seed, float(np.random.random()), random.random()))

    sims = [fl.build(_spec("fedavg+bn", s)) for s in SEEDS]
    for sim in sims:
        sim.round_hooks.append(Spy())
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    run_lockstep(sims)
    # every simulation drew the same numbers from numpy and random: each started from the state
    # the call found, not from where the previous one left it
    assert len({(a, b) for _, a, b in seen}) == 1 and len(seen) == len(SEEDS)
    assert torch.equal(torch.get_rng_state(), before[0])
    assert np.array_equal(np.random.get_state()[1], before[1]) and random.getstate() == before[2]


def test_simulations_off_the_batched_engine_are_refused_by_name():
    sims = [fl.build(_spec("fedavg+bn", 0)), fl.build(_spec("fedavg+bn", 1, batched="off"))]
    with pytest.raises(ValueError, match=r"simulation 1 does not use the batched engine \(batched='off'\)"):
        run_lockstep(sims)
    with pytest.raises(ValueError, match="listed twice"):
        run_lockstep([sims[0], sims[0]])
