"""bnfl.experiments.calibration and bench-calib-proxies: scaled effects, resolution, the choice rule,
and that the calibration runs BN only (no fix's outcome can enter the choice)."""

from __future__ import annotations

import math

import pytest

from bnfl import experiments as E
from bnfl.experiments import calibration as C
from bnfl.experiments.headlines import HEADLINES


def test_every_headline_claim_has_exactly_one_calibration():
    keys = [(e.entry, e.claim) for e in C.EFFECTS]
    assert len(keys) == len(set(keys))
    assert set(keys) == {(h.entry, h.claim) for h in HEADLINES}
    for e in C.EFFECTS:
        assert e.family in C.FAMILIES and e.source
        assert e.kind in ("effect", "equivalence", "none")
        if e.kind == "effect":
            assert e.effect > 0 and e.damage > 0
        if e.kind == "none":
            assert e.effect is None
    assert set(C.CANDIDATES) == set(C.FAMILIES)


def test_scaled_effect_is_the_share_of_the_damage():
    e = C.ClaimEffect("x", "y", "label skew", 41.76, 45.63, "effect", "FedTAN Table 1")
    assert C.scaled_effect(e, 20.0) == pytest.approx(41.76 * 20.0 / 45.63)
    tol = C.ClaimEffect("x", "y", "iid", 2.0, None, "equivalence", "tolerance")
    assert C.scaled_effect(tol, 20.0) == 2.0  # a tolerance is not scaled
    assert C.scaled_effect(C.ClaimEffect("x", "y", "iid", None, None, "none", "curve"), 20.0) is None


def test_the_one_rule_scales_the_papers_effect_to_the_stand_ins_damage():
    """rule_threshold: E_paper x D / D_paper rounded to 0.1 pt, 0 without a damage; rule_share: the
    paper's repaired share; a claim without a paper effect is one clear error."""
    assert C.rule_threshold("fedtan-tab1", "fair-fedtan-gap", 19.8) == round(41.76 * 19.8 / 45.63, 1) == 18.1
    assert C.rule_threshold("hbn-tab2", "drop-0.6", 39.8) == 24.6
    assert C.rule_threshold("hbn-tab1", "hbn-vs-bn-Q-DIG phi=0.1", 2.888) == 0.9
    assert C.rule_threshold("fedtan-tab1", "fair-fedtan-gap", -3.0) == 0.0  # no damage: nothing to repair
    assert C.rule_share("fixbn-fig1", "fair-fixbn-closes") == round(41.75 / 45.57, 2) == 0.92
    with pytest.raises(KeyError, match="no paper effect and damage for fixbn-fig1/star"):
        C.rule_threshold("fixbn-fig1", "star", 10.0)  # Fig. 1 prints no number


def test_a_damage_that_is_not_a_number_leaves_the_claim_undecided():
    """A BN-only run that diverged gives a NaN damage: its rule threshold is NaN (not 0, against
    which any positive gap would pass), and a claim judged against it is inconclusive."""
    from bnfl.experiments.claims import per_seed_claim

    for damage in (math.nan, math.inf):
        need = C.rule_threshold("fedtan-tab1", "fair-fedtan-gap", damage)
        assert math.isnan(need)
        claim = per_seed_claim("gap", "FedTAN - FedAvg+BN >= need", [60.0, 61.0, 62.0], need,
                               baseline=[40.0, 41.0, 42.0], seeds=[0, 1, 2])
        assert claim.verdict == "inconclusive"


def test_resolution_and_seeds_needed():
    # one test sample dominates a tiny spread; the standard error dominates a large one
    assert C.resolution(0.1, 360) == pytest.approx(100 / 360)
    assert C.resolution(4.0, 5000, seeds=4) == pytest.approx(2.0)
    assert C.resolves(4.0, 4.0, 5000, seeds=4) and not C.resolves(3.99, 4.0, 5000, seeds=4)
    assert C.resolves(None, 1.0, 100) is None
    assert not C.resolves(-5.0, 0.0, 5000)  # no damage on the proxy: nothing to resolve
    # effect >= 2 sd / sqrt(S)  <=>  S >= (2 sd / effect)^2
    assert C.seeds_needed(2.0, 3.0, 5000) == 9
    assert C.seeds_needed(2.0, 0.5, 5000) == 1
    assert C.seeds_needed(0.5, 0.1, 360) is None  # below 2 test samples: no seed count helps
    assert C.seeds_needed(0.1, 10.0, 5000) is None  # beyond MAX_SEEDS
    for sd in (0.9, 1.3, 2.2, 3.1):  # the count is the smallest that resolves
        s = C.seeds_needed(1.0, sd, 5000)
        assert C.resolves(1.0, sd, 5000, seeds=s) and not C.resolves(1.0, sd, 5000, seeds=s - 1)
    with pytest.raises(ValueError, match="n_test"):
        C.resolution(1.0, 0)
    with pytest.raises(ValueError, match="seed std"):
        C.resolution(float("nan"), 100)


def test_recommend_prefers_the_current_proxy_then_the_fewest_seeds():
    def row(c, ok, need):
        return {"candidate": c, "resolves": ok, "seeds needed": need}

    assert C.recommend([row("Q-DIG", True, 1), row("Q-GAUSS(10)", True, 1)]) == "Q-DIG"
    assert C.recommend([row("Q-DIG", False, 19), row("Q-GAUSS(10)", True, 2)]) == "Q-GAUSS(10)"
    assert C.recommend([row("Q-DIG", False, 19), row("MNIST-5K", False, 8)]) == "MNIST-5K with 8 seeds"
    assert C.recommend([row("Q-DIG", False, None)]) == "none resolves it"
    assert C.recommend([row("Q-DIG", None, None)]).startswith("not calibrated")
    with pytest.raises(ValueError, match="at least one"):
        C.recommend([])


def test_table_from_measurements():
    m = {"label skew": {"Q-DIG": {"damage": 20.0, "sd": 5.0, "n_test": 360},
                        "Q-GAUSS(10)": {"damage": 18.0, "sd": 1.0, "n_test": 5000}}}
    eff = [e for e in C.EFFECTS if e.entry == "fedtan-tab2"]  # 5.00 of 45.63 pts of damage
    rows = C.table(m, eff)
    assert [r["candidate"] for r in rows] == ["Q-DIG", "Q-GAUSS(10)"] and rows[0]["current"]
    assert rows[0]["scaled effect"] == pytest.approx(round(5.0 * 20 / 45.63, 2))
    assert rows[0]["resolution at 5 seeds"] == pytest.approx(round(5 / math.sqrt(5), 2))
    assert rows[0]["resolves"] is False and rows[1]["resolves"] is True
    assert {r["recommended"] for r in rows} == {"Q-GAUSS(10)"}


def test_the_entry_trains_bn_only_and_reports_no_verdict(monkeypatch):
    """The choice is made from centralized BN and FedAvg+BN runs only: no fix ever runs."""
    from bnfl.experiments import training
    from bnfl.experiments.core import Context

    methods = set()

    def fake(ctx, spec):
        methods.add(spec["method"])
        acc = 95.0 if spec["method"] == "centralized" else 80.0
        return [{"acc": acc + s, "n_test": 360} for s in ctx.seeds]

    monkeypatch.setattr(training, "train_seeds", fake)
    monkeypatch.setattr(C, "_score", lambda family, run: run["acc"])
    entry = E.get("bench-calib-proxies")
    assert entry.kind == "training" and entry.default_seeds["quick"] >= 3
    out = entry.compute(Context(profile="smoke", seeds=[0, 1, 2]), entry.config("quick"))
    assert methods == {"centralized", "fedavg+bn"}
    assert {c.verdict for c in out["claims"]} == {"info"}
    assert len(out["claims"]) == len(C.EFFECTS)
    assert all(r["damage (pts)"] == 15.0 for r in out["rows"])
    assert any("before any fix ran" in n for n in out["notes"])
    one = entry.compute(Context(profile="smoke", seeds=[0]), entry.config("smoke"))  # no spread: no choice
    assert all(r["resolution at 5 seeds"] is None and r["recommended"].startswith("not calibrated")
               for r in one["rows"])
    assert any("no seed spread" in n for n in one["notes"])


def test_headroom_share_is_half_the_papers_relative_collapse():
    from bnfl.experiments.calibration import headroom_share

    # FedTAN Table 1: 45.63 of 81.53 pts above chance; a stand-in at 97.41% on 10 classes
    t = headroom_share(45.63, 91.53, 97.41, chance=10.0)
    assert t == pytest.approx(0.5 * 45.63 / 81.53 * 87.41)
    # on the paper's own data it is half the paper's damage
    assert headroom_share(45.63, 91.53, 91.53, chance=10.0) == pytest.approx(45.63 / 2)
    assert headroom_share(45.63, 91.53, 9.0, chance=10.0) == 0.0  # an untrained stand-in has no room
    with pytest.raises(ValueError, match="above its chance"):
        headroom_share(45.63, 5.0, 97.0, chance=10.0)
    with pytest.raises(ValueError, match="fraction"):
        headroom_share(45.63, 91.53, 97.0, chance=10.0, fraction=0.0)
