"""bench-bn-fixes: the settings chosen from FedAvg+BN calibration, the entry as a non-paper entry."""

from __future__ import annotations

import pytest

from bnfl import experiments as E
from bnfl.experiments.benchmarks import bn_fixes_settings as S
from bnfl.experiments.intervals import Interval


def _iv(low, est, high):
    return Interval(est, low, high, "t", 0.95, 5, 1.0, 0.5)


def test_the_chosen_scales_follow_the_rule_on_the_recorded_calibration():
    for setting, cal in S.CALIBRATION.items():
        damages = {c: _iv(*v["damage"]) for c, v in cal["candidates"].items()}
        assert S.choose(damages) == S.CHOSEN[setting], setting
        assert set(cal["candidates"]) == set(S.CANDIDATES[setting])
    assert set(S.CHOSEN) == set(S.SETTINGS)
    assert E.get("bench-bn-fixes").config("quick")["settings"] == S.CHOSEN


def test_choose_rule():
    # the smallest damage whose interval clears DAMAGE_MIN; else the largest damage
    assert S.choose({"a": _iv(6, 8, 10), "b": _iv(10, 20, 30), "c": _iv(1, 3, 5)}) == "a"
    assert S.choose({"a": _iv(-1, 1, 3), "b": _iv(2, 4, 6)}) == "b"
    with pytest.raises(ValueError, match="at least one"):
        S.choose({})


def test_methods_share_partitions_and_settings():
    for setting in S.SETTINGS:
        cand = S.CHOSEN[setting]
        specs = [S.setting_spec(setting, cand, m) for m in ("fedavg+bn", "fedtan", "hbn", "fixbn", "fedbn", "fedavg+gn")]
        assert all({k: v for k, v in s.items() if k != "method"} == {k: v for k, v in specs[0].items() if k != "method"}
                   for s in specs)
        control = S.setting_spec(setting, cand, "fedavg+bn", control=True)
        assert control["partition"]["kind"] == "iid" and control["train"] == specs[0]["train"]
    assert S.metric("feature shift") == "own domain" and S.metric("label skew") == "global test set"


def test_a_non_paper_entry_is_registered_and_documented():
    from bnfl.experiments.notebook import label, prose

    entry = E.get("bench-bn-fixes")
    assert entry.paper == "bench" and "bench-bn-fixes" in E.ids("bench")
    assert entry.default_seeds["quick"] >= 5
    assert label("bench-bn-fixes").startswith("Benchmark")
    text = prose("bench-bn-fixes")
    assert "No paper has this benchmark" in text and "bnfl/experiments/benchmarks/" in text
    assert "papers/fedtan/" in prose("fedtan-fig4")  # paper entries keep their text


def test_report_only_writes_the_report_from_stored_results_without_computing(tmp_path, monkeypatch):
    import shutil

    from bnfl.experiments import registry

    stored = E.run("fedtan-tab3", profile="smoke", out=tmp_path)
    shutil.rmtree(tmp_path / "_runs")  # no done marker: a normal reproduce would recompute it

    def refuse(*args, **kwargs):
        raise AssertionError("report_only computed an entry")

    entry = registry.get("fedtan-tab3")
    monkeypatch.setitem(registry.EXPERIMENTS._entries, "fedtan-tab3", type(entry)(**{**entry.__dict__, "compute": refuse}))
    results = E.reproduce(out=tmp_path, only=["fedtan-tab3", "fedtan-tab4"], report_only=True, progress=False)
    assert [r.id for r in results] == ["fedtan-tab3"] and results[0].config_hash == stored.config_hash
    report = (tmp_path / "REPORT.md").read_text()
    assert "## fedtan-tab3" in report and "## fedtan-tab4" not in report


def test_every_method_is_compared_at_its_own_tuned_rate_and_the_damage_at_the_shared_one(monkeypatch):
    """The fair-rate protocol: each of the six methods goes through one tuning with the same grid
    (which holds the shared recipe's rates), FedAvg+BN's damage and iid control train at the shared
    rate, and the rows say which rate each method ran at."""
    from bnfl.experiments.benchmarks import bn_fixes as B
    from bnfl.experiments.tuning import Tuned

    tuned, plain = [], []

    def fake_run(spec):
        return {"test_acc": [50.0], "n_test": 100, "domain_acc": [50.0, 50.0, 50.0]}

    def fake_tuned(ctx, spec, tune, *, score):
        tuned.append((spec["method"], tuple(tune["grid"]), spec["train"]["lr"]))
        return Tuned(0.2, {lr: 50.0 for lr in tune["grid"]}, (0, 1, 2), 0.2), [fake_run(spec) for _ in ctx.seeds]

    def fake_train(ctx, spec):
        plain.append((spec["method"], spec["partition"]["kind"], spec["train"]["lr"]))
        return [fake_run(spec) for _ in ctx.seeds]

    monkeypatch.setattr(B, "tuned_runs", fake_tuned)
    monkeypatch.setattr(B, "train_runs", fake_train)
    config = E.get("bench-bn-fixes").config("quick")
    ctx = E.Context(profile="quick", seeds=[0, 1])
    out = B._setting(ctx, config, "label skew")
    assert sorted(m for m, _, _ in tuned) == sorted(B.METHODS)
    assert {g for _, g, _ in tuned} == {tuple(B.GRID)} and {0.05, 0.1} <= set(B.GRID)
    assert sorted(plain) == [("fedavg+bn", "classes_per_client", 0.1), ("fedavg+bn", "iid", 0.1)]
    assert {m: t.rate for m, t in out["rates"].items()} == {m: 0.2 for m in B.METHODS}
