"""The HBN reproduction's own machinery: the registered ids, the learning-rate protocol (chosen on
a validation split, never on the test set), the paper's numbers and their consistency checks.

Every registered entry also runs at the smoke profile in ``tests/test_experiments_machinery.py``;
the paper profile on fake CIFAR / Tiny-ImageNet files in ``tests/test_hbn_paper_profile.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from bnfl import experiments as E
from bnfl import models
from bnfl.experiments import core
from bnfl.experiments.core import Context
from bnfl.experiments.papers.hbn import numbers as N
from bnfl.experiments.papers.hbn import setups as S
from bnfl.nn import FeatureNorm, is_norm_layer

torch.set_num_threads(1)

HBN_IDS = [f"hbn-fig{i}" for i in range(1, 8)] + [f"hbn-tab{i}" for i in range(1, 11)]


def test_every_hbn_catalog_id_is_registered_with_all_profiles():
    assert sorted(E.ids("hbn")) == sorted(HBN_IDS)
    for eid in HBN_IDS:
        entry = E.get(eid)
        assert set(entry.configs) == set(core.PROFILES)
        assert entry.title and entry.summary and entry.look_for
        if entry.kind == "training":
            assert any("0.998" in d for d in entry.config("quick")["deviations"]), eid  # the flagged lr decay


def _fake_train(calls, scores):
    def train(ctx, spec):
        calls.append(spec)
        lr = spec["train"]["lr"]
        s = scores[lr]
        return {"diverged": s is None, "test_acc": [] if s is None else [s], "n_test": 100}
    return train


def test_lr_is_chosen_on_a_validation_split_with_ties_to_the_larger_rate(monkeypatch):
    import bnfl.experiments.training as T

    calls: list[dict] = []
    scores = {0.02: None, 0.01: 90.0, 0.005: 90.0, 0.001: 80.0}  # 0.02 diverged; a tie between 0.01 and 0.005
    monkeypatch.setattr(T, "train", _fake_train(calls, scores))
    proto = S.selection(S.Q_BASE, {"HBN": list(scores)})
    ctx = Context(profile="quick")
    assert S.lr_of(ctx, proto, "HBN", 4) == 0.01
    assert S.lr_of(ctx, proto, "HBN", 32) == pytest.approx(0.08)  # linear scaling from B = 4
    assert calls and all(c["data"]["validation"] == 0.2 for c in calls)  # never the test set
    assert {c["method"] for c in calls} == {"hbn"}
    monkeypatch.setattr(T, "train", _fake_train([], dict.fromkeys(scores)))
    with pytest.raises(RuntimeError, match="every learning rate of HBN's grid diverged"):
        S.lr_of(ctx, proto, "HBN", 4)


def test_the_paper_profile_uses_the_rates_the_paper_chose():
    assert S.PAPER_LR["CIFAR-10"] == {"BN": 0.01, "GN": 0.005, "LN": 0.005, "FedFN": 0.005, "FixBN": 0.002,
                                      "FBN": 0.01, "HBN": 0.01}
    assert S.PAPER_LR["CIFAR-100"]["GN"] == 0.001 and S.PAPER_LR["Tiny-ImageNet"]["HBN"] == 0.32
    assert S.lr_of(Context(profile="paper"), S.P_LR["Tiny-ImageNet"], "BN", 16) == pytest.approx(0.04)


def test_printed_tables_have_one_accuracy_per_rate_and_table1_columns():
    for table in (N.TABLE8, N.TABLE9, N.TABLE10):
        for lrs, accs in table.values():
            assert len(lrs) == len(accs) and all(a == "N/A" or math.isfinite(float(a)) for a in accs)
    assert all(len(v) == len(N.TABLE1_COLUMNS) for v in N.TABLE1.values())
    assert set(N.TABLE1) == set(N.NORMS) == set(S.ROWS)


def test_fedfn_variant_puts_feature_norm_before_the_head_only():
    v = S.variant("FedFN")
    assert v["method"] == "fedavg+fedfn"
    m = models.build("q_scnn", norm="fedfn")
    norms = [x for x in m.modules() if is_norm_layer(x)]
    assert len(norms) == 1 and isinstance(norms[0], FeatureNorm) and norms[0] is m.head_norm


def test_variant_carries_the_papers_method_settings():
    assert S.variant("FixBN")["method_options"] == {"switch_fraction": 0.5}
    assert S.variant("HBN", lam=0.1)["method_options"] == {"lam": 0.1}
    assert S.label("fedavg+gn") == "GN" and S.label("fixbn") == "FixBN"


def test_best_of_never_picks_a_diverged_method_and_best_rate_ties_to_the_larger_rate():
    table = {"BN": [90.0, 91.0], "GN": [math.nan, 99.0], "LN": [92.0, 92.0]}
    assert S.best_of(table) == "LN" and S.best_of(table, ["BN", "GN"]) == "BN"
    assert S.best_of(table, lowest=True) == "BN" and S.best_of(table, ["GN", "LN"], lowest=True) == "LN"
    assert S.best_of({"a": [math.nan], "b": [math.nan]}) == "a"  # nothing finite: the first, as the entries did
    assert S.best_rate({0.02: [99.0, math.nan], 0.01: [90.0, 92.0], 0.005: [91.0, 91.0]}, "x") == 0.01
    with pytest.raises(RuntimeError, match=r"every rate diverged: \[0.01\]"):
        S.best_rate({0.01: [math.nan]}, "every rate diverged")
