"""Engine: determinism, checkpoint/resume, divergence, history formats, schedules, channel."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from bnfl import fl


def _data(k=4, n=12, dim=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(k * n, dim, generator=g)
    y = torch.arange(k * n) % classes
    x = x + y[:, None].float()
    parts = [np.arange(i * n, (i + 1) * n) for i in range(k)]
    return fl.FederatedData(x, y, x[:20], y[:20], parts)


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 3))


def _cfg(**kw):
    base = dict(rounds=4, local_steps=3, batch_size=5, lr=0.1, momentum=0.9, participation=0.5, progress=False,
                batched="off")  # the sequential reference engine (the default is batched='auto')
    base.update(kw)
    return fl.TrainConfig(**base)


@pytest.mark.parametrize("alg", [lambda: fl.FedTAN(), lambda: fl.FedBN(), lambda: fl.FixBN(switch=2, momentum="local"),
                                 lambda: fl.FixBN(switch=1, momentum="global"), lambda: fl.Scaffold()])
def test_resume_equals_uninterrupted(tmp_path, alg):
    full = fl.Simulation(_model(), _data(), alg(), _cfg()).run()
    cfg = _cfg(checkpoint_dir=str(tmp_path / "ck"))
    fl.Simulation(_model(), _data(), alg(), cfg).run(stop_after=2)
    saved = fl.History.from_json(tmp_path / "ck" / "history.json")
    assert len(saved) == 2
    resumed_sim = fl.Simulation(_model(), _data(), alg(), cfg)
    resumed = resumed_sim.run(resume=True)
    assert resumed.without_time() == full.without_time()


def test_same_seed_same_history_and_other_seed_differs():
    a = fl.Simulation(_model(), _data(), fl.FedAvg(), _cfg()).run()
    b = fl.Simulation(_model(), _data(), fl.FedAvg(), _cfg()).run()
    c = fl.Simulation(_model(), _data(), fl.FedAvg(), _cfg(seed=1)).run()
    assert a.without_time() == b.without_time()
    assert a.without_time() != c.without_time()


def test_divergence_is_reported_and_history_kept(tmp_path):
    model = nn.Sequential(nn.Linear(6, 3))
    with torch.no_grad():
        model[0].weight.fill_(float("inf"))
    cfg = _cfg(rounds=3, momentum=0.0, checkpoint_dir=str(tmp_path))
    sim = fl.Simulation(model, _data(), fl.FedAvg(), cfg)
    with pytest.raises(fl.DivergenceError, match="non-finite loss") as info:
        sim.run()
    assert isinstance(info.value.history, fl.History)
    assert len(info.value.history) == 0 and "round 1" in str(info.value)
    assert (tmp_path / "history.json").exists()


def test_divergence_after_some_rounds_keeps_them():
    # gradient ascent in disguise: a quadratic loss with a far too large step explodes geometrically
    model = nn.Sequential(nn.Linear(6, 3))
    sim = fl.Simulation(model, _data(), fl.FedAvg(), _cfg(rounds=200, lr=30.0, momentum=0.0, participation=1.0),
                        loss_fn=lambda out, y: out.pow(2).mean())
    with pytest.raises(fl.DivergenceError) as info:
        sim.run()
    hist = info.value.history
    assert len(hist) >= 1 and all(np.isfinite(r["train_loss"]) for r in hist.rows)


def test_history_json_and_csv(tmp_path):
    hist = fl.Simulation(_model(), _data(), fl.SiloBN(), _cfg(rounds=2)).run()
    hist.to_json(tmp_path / "h.json")
    hist.to_csv(tmp_path / "h.csv")
    d = json.loads((tmp_path / "h.json").read_text())
    assert [r["round"] for r in d["rows"]] == [1, 2]
    lines = (tmp_path / "h.csv").read_text().splitlines()
    assert len(lines) == 3 and "test_acc" in lines[0] and "comm_rounds" in lines[0]
    for key in ("train_loss", "test_acc", "client_test_acc", "client_own_acc", "bytes_total", "comm_rounds",
                "wall_time"):
        assert key in hist[-1]


def test_participation_weights_and_rounds():
    sim = fl.Simulation(_model(), _data(), fl.FedAvg(), _cfg(rounds=3))
    hist = sim.run()
    assert all(len(r["clients"]) == 2 for r in hist.rows)
    assert hist.column("comm_rounds") == [1, 2, 3]
    # bytes: one multicast download + one upload per participating client, per round
    payload = fl.state_bytes({k: v for k, v in sim.global_state.items() if k in sim.upload_keys})
    assert hist[-1]["bytes_total"] == 3 * payload * (2 + 1)


def test_epochs_unit_covers_whole_epochs():
    sim = fl.Simulation(_model(), _data(), fl.FedAvg(), _cfg(rounds=2, local_unit="epochs", local_steps=1,
                                                              participation=1.0))
    sim.run()
    assert all(sim.cursors[c] == [1, 2] for c in range(4))  # epochs 0 and 1, 2 batches of 5 (drop_last)


def test_schedule_step_and_exponential():
    s = fl.Schedule(lr=0.5, milestones=(6000, 8000), gamma=0.1)
    assert s.at(6000, 10000) == 0.5 and s.at(6001, 10000) == pytest.approx(0.05)
    assert s.at(8001, 10000) == pytest.approx(0.005)
    f = fl.Schedule(lr=0.02, fractions=(0.5, 0.75))
    assert f.at(50, 100) == 0.02 and f.at(51, 100) == pytest.approx(0.002) and f.at(76, 100) == pytest.approx(2e-4)
    e = fl.Schedule(lr=1.0, decay=0.998)
    assert e.at(3, 10) == pytest.approx(0.998**2)
    with pytest.raises(ValueError, match="lr"):
        fl.Schedule(lr=-0.1)


def test_bad_train_config_names_the_field():
    with pytest.raises(ValueError, match="rounds"):
        fl.TrainConfig(rounds=0)
    with pytest.raises(ValueError, match="lr"):
        fl.TrainConfig(lr=-1.0)
    with pytest.raises(ValueError, match="local_unit"):
        fl.TrainConfig(local_unit="minutes")
    with pytest.raises(TypeError, match="momentum"):
        fl.TrainConfig(momentum="0.9")
    with pytest.raises(ValueError, match="client 1 has 0 samples"):
        fl.FederatedData(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), torch.zeros(1, 2),
                         torch.zeros(1, dtype=torch.long), [np.arange(4), np.array([], dtype=int)])


def test_channel_accounting_and_allreduce():
    ch = fl.Channel()
    state = {"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.float64)}
    got = ch.broadcast(state, 3)
    assert len(got) == 3 and ch.bytes_down == 12 * 4 + 5 * 8 and ch.rounds == 0
    assert ch.bytes_down_unicast == 3 * (12 * 4 + 5 * 8)
    ch.gather(got)
    assert ch.bytes_up == 3 * (12 * 4 + 5 * 8) and ch.rounds == 1
    t = [torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0, 5.0], requires_grad=True)]
    out = ch.allreduce(t, [0.25, 0.75])
    torch.testing.assert_close(out, torch.tensor([2.5, 4.25]))
    out.sum().backward()
    torch.testing.assert_close(t[0].grad, torch.full((2,), 0.25))
    assert ch.rounds == 2 and ch.bytes_up == 3 * (12 * 4 + 5 * 8) + 2 * 8
    with pytest.raises(ValueError, match="weights"):
        ch.allreduce(t, [1.0])
    avg = fl.weighted_sum([{"x": torch.ones(2)}, {"x": torch.zeros(2)}], [0.5, 0.5])
    torch.testing.assert_close(avg["x"], torch.full((2,), 0.5))


def test_momentum_modes_differ_and_global_momentum_is_sent():
    hists, bytes_up = {}, {}
    for mode in ("reset", "local", "global"):
        sim = fl.Simulation(_model(), _data(), fl.FedAvg(), _cfg(momentum_mode=mode, participation=1.0))
        hists[mode] = sim.run().without_time()
        bytes_up[mode] = sim.channel.bytes_up
    assert hists["reset"] != hists["local"]
    assert hists["local"] != hists["global"]
    assert hists["reset"] != hists["global"]
    assert bytes_up["reset"] == bytes_up["local"] < bytes_up["global"]
    with pytest.raises(ValueError, match="momentum_mode"):
        fl.TrainConfig(momentum_mode="nesterov")


def test_accuracy_is_per_label_element_for_segmentation():
    """Pixel accuracy: correct pixels over all pixels (not over images); classification unchanged."""
    import torch
    from torch import nn

    from bnfl.fl.engine import accuracy

    class Const(nn.Module):  # predicts class 1 everywhere: (N, 2, H, W) logits
        def forward(self, x):
            out = torch.zeros(x.shape[0], 2, *x.shape[2:])
            out[:, 1] = 1.0
            return out

    x = torch.zeros(4, 1, 3, 3)
    y = torch.zeros(4, 3, 3, dtype=torch.long)
    y[:, 0, :] = 1  # one row of 3 pixels of 9 is class 1
    acc, loss = accuracy(Const(), x, y, batch=3)
    assert acc == pytest.approx(1 / 3)
    assert loss == pytest.approx(float(nn.functional.cross_entropy(Const()(x), y)))
    xc, yc = torch.zeros(5, 1, 1, 1), torch.tensor([1, 1, 0, 1, 0])
    assert accuracy(nn.Sequential(Const(), nn.Flatten()), xc, yc)[0] == pytest.approx(3 / 5)


def test_decoupled_statistics_are_recomputed_every_round():
    """FixBN Sec. 3.3 (decoupled-bn): each round's global BN statistics are the clients' data
    statistics; a statistics request must not run on the previous round's frozen BN layers
    (which would leave the reset statistics, mean 0 and variance 1, in place from round 2 on)."""
    sim = fl.build({"method": "decoupled-bn", "rounds": 2, "train": {"local_steps": 1, "progress": False}})
    for r in (1, 2):
        sim.run(stop_after=r)
        for name, v in sim.global_state.items():
            if name.endswith("running_mean"):
                assert float(v.abs().sum()) > 0.1, (r, name)
            if name.endswith("running_var"):
                assert not torch.allclose(v, torch.ones_like(v)), (r, name)


def test_history_writes_its_two_files_and_says_its_final_accuracy(tmp_path):
    h = fl.History(rows=[{"round": 1, "test_acc": 0.5}, {"round": 2, "test_acc": 0.875}])
    assert h.write(tmp_path / "run") == tmp_path / "run" / "history.json"
    assert fl.History.from_json(tmp_path / "run" / "history.json").rows == h.rows
    assert (tmp_path / "run" / "history.csv").read_text().splitlines()[0] == "round,test_acc"
    assert h.final_accuracy() == "87.50%"
    assert fl.History().final_accuracy() == "-" and fl.History(rows=[{"round": 1}]).final_accuracy() == "-"
