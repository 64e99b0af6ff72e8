"""The round as a function over a RunState value (issue 37, Build item 1): ``run_round`` leaves the
state it is given alone, a hand-driven loop of it is the Simulation's run, the checkpoint saves and
loads the RunState (older checkpoints too), and the engines page's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bnfl import fl
from bnfl.fl import _rundir
from bnfl.fl.engine import run_round

ROOT = Path(__file__).resolve().parents[1]


def _data(k=4, n=12, dim=6, classes=3):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(k * n, dim, generator=g)
    y = torch.arange(k * n) % classes
    x = x + y[:, None].float()
    return fl.FederatedData(x, y, x[:20], y[:20], [np.arange(i * n, (i + 1) * n) for i in range(k)])


def _sim(alg, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    cfg = dict(rounds=3, local_steps=2, batch_size=5, lr=0.1, momentum=0.9, participation=0.5, progress=False,
               batched="off")
    cfg.update(kw)
    return fl.Simulation(model, _data(), alg, fl.TrainConfig(**cfg))


def _by_hand(sim, rounds):
    state, rows = sim.run_state, []
    for r in range(1, rounds + 1):
        state, row = run_round(state, r, algorithm=sim.algorithm, clients=sim.clients, server=sim.server,
                               channel=sim.channel, participation=sim.participation)
        rows.append(row)
    return state, rows


def test_run_round_returns_a_new_state_and_leaves_the_given_one_alone():
    sim = _sim(fl.Scaffold())  # SCAFFOLD writes server state (its c) in round 1
    before = sim.run_state
    weights = {k: v.clone() for k, v in before.global_state.items()}
    after, rows = _by_hand(sim, 1)
    assert before.round == 0 and before.server_state == {} and before.participants == ()
    assert all(torch.equal(before.global_state[k], w) for k, w in weights.items())
    assert after.round == 1 and after.participants == tuple(rows[0]["clients"])
    assert "scaffold.c" in after.server_state
    assert any(not torch.equal(after.global_state[k], w) for k, w in weights.items())


def test_a_hand_driven_loop_of_run_round_is_the_simulations_run():
    run = _sim(fl.FedTAN())
    history = run.run()
    state, rows = _by_hand(_sim(fl.FedTAN()), 3)
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in history.rows]
    assert state.participants == run.run_state.participants and state.round == run.round == 3
    assert all(torch.equal(state.global_state[k], v) for k, v in run.global_state.items())


def test_the_checkpoint_holds_the_run_state_and_an_older_one_without_participants_resumes(tmp_path):
    full = _sim(fl.FedAvg()).run()
    d = tmp_path / "ck"
    first = _sim(fl.FedAvg(), checkpoint_dir=str(d))
    first.run(stop_after=2)
    saved = _rundir.load(d)
    assert saved["round"] == 2 and saved["participants"] == list(first.run_state.participants)
    del saved["participants"]  # what bnfl wrote before the RunState
    _rundir.save(d, saved)
    resumed = _sim(fl.FedAvg(), checkpoint_dir=str(d))
    assert resumed.run(resume=True).without_time() == full.without_time()


def test_an_older_checkpoints_server_momentum_moves_into_the_server_state():
    m = {"0.weight": torch.ones(2)}
    state = fl.RunState.from_checkpoint({"round": 3, "global_state": {}, "server_state": {"x": 1},
                                         "global_momentum": m})
    assert state.round == 3 and state.participants == ()
    assert state.server_state == {"x": 1, "optimizer.momentum": m}


def test_the_engines_page_run_state_example_runs():
    text = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    section = text.split("## The round as a function", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], "engines.md", "exec"), {})  # noqa: S102
