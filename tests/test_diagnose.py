"""`bnfl diagnose` / bnfl.diagnose: the defining settings, the rules, the costs, bad input, the CLI."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bnfl
from bnfl import cli, fl, models, stats
from bnfl.data import digit_domains, digits, partition
from bnfl.diagnosis import RULES, Facts, measure, recommend, rules
from bnfl.diagnosis.report import figure, format_table, to_json
from bnfl.methods import METHODS
from bnfl.nn import replace_norm

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "examples" / "fedtan_digits.toml")
FAST = {"batch_size": 32, "stat_samples": 64, "permutations": 2, "progress": False}


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return models.build("q_mlp_bn")  # 64-32-BN-ReLU-32-BN-ReLU-10


def _digits_clients(kind: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    split = digits(form="flat", seed=0)
    y = split.y_train.numpy()
    parts = partition.iid(y, 5, 0) if kind == "iid" else partition.classes_per_client(y, 2, 5, 0)
    return [(split.x_train[torch.as_tensor(p[:80])], split.y_train[torch.as_tensor(p[:80])]) for p in parts]


@pytest.fixture(scope="module")
def label_skew():
    return bnfl.diagnose(_model(), _digits_clients("k2"), **FAST)


@pytest.fixture(scope="module")
def iid():
    return bnfl.diagnose(_model(), _digits_clients("iid"), **FAST)


def test_label_skew_k2_is_label_skew_with_a_large_fedavg_bn_error(label_skew, iid):
    d = label_skew
    assert d.shift == "label" and not d.small_batch
    assert d.label_divergence == pytest.approx(0.8) and d.feature_shift is None  # no class on two clients
    assert d.grad_error["none"] > 0.5 and d.grad_error["none"] > 2 * iid.grad_error["none"]
    assert d.grad_error["none"] > 2 * d.grad_error_floor["none"]
    assert d.grad_error["fedtan"] < 1e-10 and d.mean_b2["fedtan"] < 1e-20  # eq. 41: exact
    assert d.mean_b2["none"] > 1e-3 and d.mean_b2["stats"] > 1e-3
    assert all(r["between"] > 0.05 for r in d.layers)
    assert d.recommendation.fix == "fixbn" and d.recommendation.rule == "shift, one global model"


def test_feature_shift_domains_are_feature_shift():
    split = digit_domains(form="flat", seed=0)
    owners = partition.by_domain(split.domain_train.numpy())
    clients = [(split.x_train[torch.as_tensor(o[:120])], split.y_train[torch.as_tensor(o[:120])]) for o in owners]
    options = {**FAST, "stat_samples": 120}
    d = bnfl.diagnose(_model(), clients, per_client_models=True, **options)
    assert d.shift == "feature" and d.label_divergence - d.label_floor < rules.LABEL_SKEW_THRESHOLD
    assert d.feature_shift > 1.5 * rules.FEATURE_SHIFT_RATIO * d.feature_floor
    assert d.feature_shift - d.feature_floor > 5 * rules.FEATURE_SHIFT_MIN_EXCESS
    assert d.recommendation.fix == "fedbn"
    assert bnfl.diagnose(_model(), clients, **options).recommendation.fix == "fixbn"  # one global model


def test_iid_says_bn_is_not_the_problem(iid):
    assert iid.shift == "none" and not iid.small_batch
    assert iid.recommendation.fix == "fedavg+bn" and "BN is not the problem" in iid.recommendation.reason
    assert iid.feature_shift < 2 * iid.feature_floor
    assert "BN is not the problem" in format_table(iid)


def test_feature_shift_on_a_cnn_too():
    """A convolution's channel statistics pool many positions: the floor is ~100x lower than the
    MLP's, so feature shift is a multiple of the floor, not a fixed excess."""
    split = digit_domains(form="image", seed=0)
    owners = partition.by_domain(split.domain_train.numpy())
    clients = [(split.x_train[torch.as_tensor(o[:120])], split.y_train[torch.as_tensor(o[:120])]) for o in owners]
    torch.manual_seed(0)
    d = bnfl.diagnose(models.build("q_lenet"), clients, **{**FAST, "stat_samples": 120})
    assert d.shift == "feature" and d.feature_shift > 1.5 * rules.FEATURE_SHIFT_RATIO * d.feature_floor
    iid = partition.iid(split.y_train.numpy(), 6, 0)  # the same six domains' samples, dealt at random
    same = [(split.x_train[torch.as_tensor(o[:120])], split.y_train[torch.as_tensor(o[:120])]) for o in iid]
    torch.manual_seed(0)
    assert bnfl.diagnose(models.build("q_lenet"), same, **{**FAST, "stat_samples": 120}).shift == "none"


@pytest.mark.parametrize(("args", "shift"), [
    ((0.80, 0.07, None, None), "label"), ((0.10, 0.06, 0.40, 0.03), "feature"),
    ((0.10, 0.06, 0.004, 0.001), "none"), ((0.10, 0.06, 0.03, 0.028), "none"), ((0.7, 0.1, 0.5, 0.05), "label+feature"),
])
def test_classify_shift(args, shift):
    assert rules.classify_shift(*args) == shift


def test_small_batches_are_flagged():
    d = bnfl.diagnose(_model(), _digits_clients("iid"), **{**FAST, "batch_size": 4})
    assert d.small_batch and d.recommendation.fix == "fedavg+gn"
    assert rules.total_batch_noise([r["batch_noise"] for r in d.layers]) > rules.SMALL_BATCH_THRESHOLD


def test_model_and_buffers_untouched_and_deterministic():
    model = _model()
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    clients = _digits_clients("k2")
    a = bnfl.diagnose(model, clients, **FAST).to_dict()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training and all(p.grad is None for p in model.parameters())
    assert next(model.parameters()).dtype == torch.float32
    b = bnfl.diagnose(model, clients, **FAST, device="cpu").to_dict()
    a["setting"].pop("seconds"), b["setting"].pop("seconds")
    assert a == b


def test_one_local_step_update_error_is_the_gradient_error(label_skew):
    """E = 1: the aggregated update is -lr times the aggregated gradient (same batches)."""
    assert label_skew.update_error["none"] == pytest.approx(label_skew.grad_error["none"], rel=1e-9)
    assert label_skew.update_error["fedtan"] < 1e-10


def test_between_share_is_the_relative_bias_of_averaged_variances():
    torch.manual_seed(1)
    h = torch.randn(60, 4, 3, dtype=torch.float64) + torch.repeat_interleave(torch.arange(3.0), 20)[:, None, None]
    owner = torch.repeat_interleave(torch.arange(3), 20)
    got = measure.layer_shares(h, owner, None, batch_size=5)
    union = h.transpose(0, 1).reshape(4, -1).var(1, correction=0)  # (N, C, L) -> (C, N*L)
    avg = sum(h[owner == i].transpose(0, 1).reshape(4, -1).var(1, correction=0) / 3 for i in range(3))
    assert got["between"] == pytest.approx(float(((union - avg) / union).mean()), rel=1e-12)
    within, between = stats.decompose([stats.moments(h[owner == i]) for i in range(3)])
    assert got["avg_var"] == pytest.approx(float(within.mean()), rel=1e-12)
    assert got["batch_noise"] == measure.batch_noise(h, owner, batch_size=5)


def test_batch_noise_is_the_error_of_the_batch_statistics_bn_uses():
    """The measure against its definition, by exhaustive enumeration of every batch of B = 2 (each
    client's (mean, std) over the batch's B x L positions vs the client's population), float64."""
    import itertools

    torch.manual_seed(2)
    h = torch.randn(14, 3, 5, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5])[:, None]
    owner = torch.tensor([0] * 6 + [1] * 8)
    want = 0.0
    for i, n in ((0, 6), (1, 8)):
        hi = h[owner == i]
        mu, sd = hi.mean((0, 2)), hi.var((0, 2), correction=0).sqrt()
        errs = []
        for a, b in itertools.combinations(range(n), 2):
            batch = hi[[a, b]].transpose(0, 1).reshape(3, -1)  # (B, C, L) -> (C, B*L): what BN pools
            errs.append((((batch.mean(1) - mu) ** 2 + (batch.var(1, correction=0).sqrt() - sd) ** 2) / sd**2).mean())
        want += n / 14 * float(torch.stack(errs).mean())
    got = measure.batch_noise(h, owner, batch_size=2, draws=4000)
    assert got == pytest.approx(want, rel=0.05)
    assert measure.batch_noise(h, owner, batch_size=8) < 1e-20  # a batch that is the client's population


def test_batch_noise_counts_positions_by_their_correlation():
    """A channel whose positions are independent pools B x L values (noise ~1.5/(B L)); one whose
    positions repeat the sample's value pools B (the MLP's noise at B)."""
    torch.manual_seed(3)
    owner = torch.zeros(400, dtype=torch.long)
    independent = torch.randn(400, 4, 8, 8, dtype=torch.float64)
    repeated = torch.randn(400, 4, 1, 1, dtype=torch.float64).expand(400, 4, 8, 8)
    flat = repeated[:, :, 0, 0]
    a = measure.batch_noise(independent, owner, batch_size=2)
    b = measure.batch_noise(repeated, owner, batch_size=2)
    assert a == pytest.approx(1.5 / 128, rel=0.2)
    assert b == pytest.approx(measure.batch_noise(flat, owner, batch_size=2), rel=1e-12) and b > 0.5


def _dirichlet_clients(form: str, num_clients: int, phi: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    split = digits(form=form, seed=0)
    parts = partition.dirichlet(split.y_train.numpy(), num_clients, phi, 0)
    return [(split.x_train[torch.as_tensor(p)], split.y_train[torch.as_tensor(p)]) for p in parts]


@pytest.mark.parametrize("name, form, clients, phi, batch_size, small", [
    # benchmarks/calibrate_small_batch.py, 3 seeds: BN's damage (GN - BN, points, paired 95% t-interval)
    # and the batch noise summed over BN layers (the rule's measure; threshold 0.7)
    ("q_mlp_bn", "flat", 5, 0.5, 2, True),      # noise 1.76, damage +42.1 [21.2, 63.0]
    ("q_mlp_bn", "flat", 5, 0.5, 4, True),      # noise 0.85, damage +4.4 [0.8, 8.1]
    ("q_mlp_bn", "flat", 5, 0.5, 32, False),    # noise 0.092, damage +3.1 [-0.3, 6.6]
    ("q_lenet", "image", 5, 0.5, 2, False),     # noise 0.156, damage -0.9 [-8.3, 6.5]
    ("q_lenet", "image", 5, 0.5, 32, False),    # noise 0.017, damage -3.2 [-9.7, 3.2]
    # conv nets with deep layers on 2x2 maps, 20 clients, Dirichlet(0.1): HBN's regime
    ("q_res", "image", 20, 0.1, 2, True),       # noise 0.885, damage +4.7 [3.5, 5.9]
    ("q_res", "image", 20, 0.1, 4, False),      # noise 0.526, damage +2.0 [-6.0, 10.1]
    ("tiny_vgg", "image", 20, 0.1, 4, False),   # noise 0.484, damage -2.5 [-13.3, 8.3]
    ("q_scnn", "image", 20, 0.1, 2, False),     # noise 0.357, damage -1.5 [-3.9, 0.9]
])
def test_small_batch_rule_follows_measured_damage(name, form, clients, phi, batch_size, small):
    """The threshold separates the calibration's damaged BN runs from the undamaged ones, for the
    MLP and for conv nets: a ResNet at B = 2 under a Dirichlet split gets the small-batch advice
    (HBN first, as the setting is label-skewed too)."""
    split = digits(form=form, seed=0)
    torch.manual_seed(0)
    model = models.build_for(name, split.input_shape, norm="bn", num_classes=10)
    d = bnfl.diagnose(model, _dirichlet_clients(form, clients, phi), batch_size=batch_size, stat_samples=128,
                      permutations=1, progress=False)
    assert d.small_batch is small
    assert (d.recommendation.fix in ("hbn", "fedavg+gn")) is small
    noise = rules.total_batch_noise([r["batch_noise"] for r in d.layers])
    assert f"batch noise {noise:.3f}, summed over {len(d.layers)} BN layers" in format_table(d)


def test_diagnose_sets_and_restores_the_thread_count():
    seen = []
    real = measure.layer_shares

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(measure, "layer_shares", spy)
            bnfl.diagnose(_model(), _digits_clients("iid"), **FAST)
            assert set(seen) == {1} and torch.get_num_threads() == 2
            seen.clear()
            bnfl.diagnose(_model(), _digits_clients("iid"), **FAST, threads=None)
            assert set(seen) == {2}
            with pytest.raises(ValueError, match="threads must be a positive integer"):
                bnfl.diagnose(_model(), _digits_clients("iid"), **FAST, threads=0)
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_print_gives_the_table(label_skew):
    assert str(label_skew) == format_table(label_skew)
    text = str(label_skew)
    assert "update error after 1 local step" in text and "after 1 local steps" not in text
    assert "(BatchNorm1d)" in text and "e-1" not in text


def test_label_divergence_values():
    owner = torch.repeat_interleave(torch.arange(5), 4)
    assert measure.label_divergence(torch.arange(20) // 2, owner) == pytest.approx(0.8)  # 2 of 10 classes each
    assert measure.label_divergence(torch.arange(20) % 4, owner) == pytest.approx(0.0)


@pytest.mark.parametrize(("facts", "fix"), [
    (Facts("none", False, False, False), "fedavg+bn"),
    (Facts("none", True, False, False), "fedavg+gn"),
    (Facts("label", True, True, True), "hbn"),
    (Facts("feature", False, True, False), "fedbn"),
    (Facts("label+feature", False, True, True), "fedbn"),
    (Facts("label", False, True, False), "fixbn"),
    (Facts("feature", False, False, True), "fedtan"),
    (Facts("label", False, False, False), "fixbn"),
])
def test_rules_table(facts, fix):
    assert recommend(facts).fix == fix


def test_rules_are_stated_once_and_documented():
    doc = bnfl.diagnosis.diagnose.__doc__
    for r in RULES:
        assert all(f in METHODS and f in rules.FIXES for f in r.fixes)
        assert re.search(re.escape(r.when), doc), r.when  # the docstring's table lists every rule
    with pytest.raises(ValueError, match="shift must be"):
        recommend(Facts("labels", False, False, False))


def test_hbn_cost_equals_what_the_channel_counts():
    torch.manual_seed(0)
    model = models.build("q_mlp_bn")
    hbn = replace_norm(copy.deepcopy(model), "hbn")
    x, y = torch.randn(24, 64), torch.arange(24) % 10
    data = fl.FederatedData(x, y, x[:4], y[:4], [np.arange(i * 8, i * 8 + 8) for i in range(3)])
    sim = fl.Simulation(hbn, data, fl.make_algorithm("hbn"),
                        fl.TrainConfig(rounds=2, local_steps=1, batch_size=4, progress=False))
    sim.run()
    per_round, final = rules._hbn_round_bytes(model, 3, 4)
    assert sim.channel.bytes_total == 2 * per_round + final
    costs = {c["method"]: c for c in rules.communication(model, 3)}
    assert costs["hbn"]["bytes"] == per_round
    for mid in ("fedavg+bn", "fedtan", "fixbn", "fedbn"):
        assert costs[mid]["bytes"] == fl.comm_volume(model, 3, mid).bytes
    assert costs["fedtan"]["rounds"] == 3 * 2 + 1 and costs["fedbn"]["extra"] < 0


def test_bad_input_is_a_clear_error():
    clients = _digits_clients("k2")
    gn = replace_norm(copy.deepcopy(_model()), "gn")
    with pytest.raises(ValueError, match="no BatchNorm layer"):
        bnfl.diagnose(gn, clients, **FAST)
    one = [*clients[:4], (clients[4][0][:1], clients[4][1][:1])]
    with pytest.raises(ValueError, match="client 4 has 1 sample;"):
        bnfl.diagnose(_model(), one, **FAST)
    wide = [*clients[:4], (torch.randn(10, 65), clients[4][1][:10])]
    with pytest.raises(ValueError, match=r"client 4 has samples of shape \(65,\) but client 0 has \(64,\)"):
        bnfl.diagnose(_model(), wide, **FAST)
    with pytest.raises(ValueError, match="cannot take the clients' samples"):
        bnfl.diagnose(_model(), [(torch.randn(10, 65), c[1][:10]) for c in clients], **FAST)
    with pytest.raises(ValueError, match="x has 80 samples but y has 3"):
        bnfl.diagnose(_model(), [*clients[:4], (clients[4][0], clients[4][1][:3])], **FAST)
    with pytest.raises(ValueError, match="batch_size must be"):
        bnfl.diagnose(_model(), clients, **{**FAST, "batch_size": 1})
    with pytest.raises(TypeError, match="list of"):
        bnfl.diagnose(_model(), torch.randn(4, 64), **FAST)


def test_report_table_json_and_figure(label_skew):
    text = format_table(label_skew)
    for s in ("features.1", "FedAvg+BN", "FedTAN", "label skew", "Recommendation: FixBN", "HBN", "FedAvg+GN"):
        assert s in text
    d = json.loads(to_json(label_skew))
    assert d["shift"] == "label" and d["recommendation"]["fix"] == "fixbn" and len(d["layers"]) == 2
    import matplotlib.pyplot as plt

    for columns, size in ((3, (3 * 3.8, 3.1)), (1, (5.2, 3 * 3.1))):
        fig = figure(label_skew, columns=columns)
        assert len(fig.axes) == 3 and tuple(fig.get_size_inches()) == pytest.approx(size)
        plt.close(fig)
    with pytest.raises(ValueError, match="columns must be 1 or 3"):
        figure(label_skew, columns=2)


def test_cli_on_the_example_config(capsys, tmp_path):
    png = tmp_path / "d.png"
    assert cli.main(["diagnose", "--config", CONFIG, "--stat-samples", "64", "--figure", str(png), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^2  features.4 \(BatchNorm1d\)  +32 +\d+\.\d%", out, re.M)
    assert "Recommendation: FedTAN" in out and "label skew" in out  # FedTAN's config: sync rounds are fine
    assert png.stat().st_size > 10_000
    assert cli.main(["diagnose", "--config", CONFIG, "--stat-samples", "64", "--json", "--no-sync-rounds-ok"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["recommendation"]["fix"] == "fixbn" and d["setting"]["local_steps"] == 5


def test_cli_checkpoint(capsys, tmp_path):
    out = tmp_path / "run"
    assert cli.main(["train", "--config", CONFIG, "--rounds", "2", "--out", str(out), "--quiet",
                     "--method", "fedavg+bn"]) == 0
    capsys.readouterr()
    args = ["diagnose", "--config", CONFIG, "--stat-samples", "64", "--json", "--quiet"]
    assert cli.main(args) == 0
    init = json.loads(capsys.readouterr().out)
    assert cli.main([*args, "--checkpoint", str(out)]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["grad_error"]["none"] != init["grad_error"]["none"]
    assert trained["grad_error"]["fedtan"] < 1e-10
    assert cli.main([*args, "--checkpoint", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_diagnose_loss_fn_option():
    d = bnfl.diagnose(_model(), _digits_clients("k2"), loss_fn=lambda out, y: F.nll_loss(out.log_softmax(1), y),
                      **FAST)
    assert d.grad_error["fedtan"] < 1e-10


def test_live_explorer_recomputes_on_a_slider(monkeypatch):
    """The notebook's sliders: releasing one re-diagnoses with the new value (no kernel needed)."""
    from bnfl.diagnosis import interactive

    seen = []
    monkeypatch.setattr(interactive, "show", seen.append)
    ui = interactive.explorer(phi=100.0, clients=3, batch_size=8, local_steps=1)
    assert len(seen) == 1 and seen[-1].shift == "none" and seen[-1].setting["clients"] == 3
    phi = next(c for c in ui.children if getattr(c, "description", "").startswith("label skew"))
    phi.value = 0.05
    assert len(seen) == 2 and seen[-1].shift == "label" and "updated in" in ui.children[-2].value
    clients = next(c for c in ui.children if getattr(c, "description", "") == "clients")
    clients.value = 4
    assert len(seen) == 3 and seen[-1].setting["clients"] == 4


def test_docs_example_numbers():
    """docs/diagnose.md reads these numbers of `bnfl diagnose --config examples/fedtan_digits.toml`."""
    from bnfl.diagnosis.cli import diagnose_config

    d = diagnose_config(CONFIG, progress=False)
    assert [round(r["between"], 2) for r in d.layers] == [0.11, 0.11] and d.feature_shift is None
    assert round(d.label_divergence, 2) == 0.80 and round(d.label_floor, 2) == 0.07
    assert round(d.grad_error["none"], 2) == 0.83 and round(d.grad_error["none"] / d.grad_error_floor["none"]) == 6
    assert d.grad_error["stats"] > 0.75 and d.update_error["fedtan"] > 0.1
    assert d.recommendation.fix == "fedtan" and d.setting["local_steps"] == 5
    tan = next(c for c in d.communication if c["method"] == "fedtan")
    assert round(100 * tan["extra"], 1) == 6.9 and tan["rounds"] == 7
    text = (ROOT / "docs" / "diagnose.md").read_text(encoding="utf-8")
    for phrase in ("about 11%", "$D_y = 0.80$ against 0.07", "83% of its norm", "six times", "6.9% more bytes",
                   "7 communication rounds"):
        assert phrase in text, phrase


def test_without_class_labels_feature_shift_reads_the_plain_between_share():
    split = digit_domains(form="flat", seed=0)
    owners = partition.by_domain(split.domain_train.numpy())
    clients = [(split.x_train[torch.as_tensor(o[:60])], split.y_train[torch.as_tensor(o[:60])].float()[:, None])
               for o in owners]  # regression-like targets: no classes
    mse = lambda out, y: F.mse_loss(out[:, :1], y)  # noqa: E731
    d = bnfl.diagnose(_model(), clients, loss_fn=mse, **FAST)
    assert d.label_divergence is None and d.layers[0]["between_given_label"] is None
    assert d.shift == "feature" and d.feature_shift == d.layers[0]["between"]
    iid = _digits_clients("iid")
    d = bnfl.diagnose(_model(), [(x, y.float()[:, None]) for x, y in iid], loss_fn=mse, **FAST)
    assert d.shift == "none" and d.grad_error["fedtan"] < 1e-10
