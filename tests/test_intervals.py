"""Interval estimates over seeds and the claims they judge (bnfl.experiments.intervals, .interval_claims)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bnfl.experiments import intervals as I
from bnfl.experiments.claims import Claim, at_least
from bnfl.experiments.core import Result
from bnfl.experiments.interval_claims import interval_claim, interval_monotone, interval_within
from bnfl.experiments.report import claim_rows


def test_t_quantile_matches_the_table():
    # Student's t table, two-sided 95%: df 4 -> 2.776, df 9 -> 2.262, df 29 -> 2.045; df inf -> 1.960
    for df, table in ((4, 2.776), (9, 2.262), (29, 2.045), (math.inf, 1.960)):
        assert I.t_quantile(0.975, df) == pytest.approx(table, abs=5e-4)
    assert I.t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="p must"):
        I.t_quantile(1.0, 3)


def test_t_interval_by_hand_in_float64():
    # values 1..5: mean 3, sd sqrt(2.5), se sqrt(2.5/5) = sqrt(0.5); t_{0.975,4} = 2.7764451051977987
    iv = I.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.7764451051977987 * math.sqrt(0.5)
    assert iv.estimate == 3.0 and iv.n == 5 and iv.method == "t"
    assert iv.sd == pytest.approx(math.sqrt(2.5), rel=1e-15)
    assert iv.low == pytest.approx(3.0 - half, rel=1e-14) and iv.high == pytest.approx(3.0 + half, rel=1e-14)
    assert iv.low == pytest.approx(1.0367568385224212, abs=1e-12)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="at least 2"):
        I.t_interval([1.0])
    with pytest.raises(ValueError, match="non-finite"):
        I.t_interval([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="one value per seed"):
        I.paired_differences([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="shared seeds"):
        I.paired_differences({0: 1.0, 1: 2.0}, {1: 1.0, 2: 3.0})
    with pytest.raises(ValueError, match="method"):
        I.estimate([1.0, 2.0], method="bayes")
    with pytest.raises(ValueError, match="side"):
        I.verdict(I.t_interval([1.0, 2.0]), 0.0, side="left")


def test_paired_differences_match_seeds():
    assert I.paired_differences({2: 5.0, 0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.0, 3: 9.0}) == [0.5, 1.0]


@settings(max_examples=6, deadline=None)
@given(mu=st.floats(-50, 50), sigma=st.floats(0.1, 10), n=st.integers(3, 8), seed=st.integers(0, 2**16))
def test_t_interval_covers_the_mean_at_the_nominal_rate(mu, sigma, n, seed):
    rng = np.random.default_rng(seed)
    trials = 1500
    hits = 0
    data = rng.normal(mu, sigma, (trials, n))
    for row in data:
        iv = I.t_interval(row)
        hits += iv.low <= mu <= iv.high
    # binomial sd at 1500 trials: 0.0056; 0.95 +- 0.025 is 4.4 sd
    assert 0.925 <= hits / trials <= 0.975


@settings(max_examples=3, deadline=None)
@given(mu=st.floats(-5, 5), seed=st.integers(0, 2**16))
def test_bootstrap_covers_the_mean_near_the_nominal_rate(mu, seed):
    rng = np.random.default_rng(seed)
    trials, n = 300, 20
    hits = 0
    for k, row in enumerate(rng.normal(mu, 2.0, (trials, n))):
        iv = I.bootstrap_interval([row], n_boot=1000, seed=k)
        hits += iv.low <= mu <= iv.high
    # the percentile bootstrap runs a little short of 95% at n = 20 (about 93%)
    assert 0.87 <= hits / trials <= 0.99


def test_bootstrap_is_deterministic_and_stratified():
    a, b = [90.1, 91.3, 89.7, 92.0, 90.8], [85.0, 86.2, 84.1, 87.9, 85.5]
    one = I.estimate(a, b, paired=False, method="bootstrap")
    assert one == I.estimate(a, b, paired=False, method="bootstrap")
    assert one.method == "bootstrap" and one.paired is False
    assert one.estimate == pytest.approx(np.mean(a) - np.mean(b))
    other = I.bootstrap_interval([a, b], signs=(1, -1), seed=1)
    assert other.low != one.low and abs(other.low - one.low) < 0.5
    # stratified: each group keeps its own size (a group of 2 and one of 6)
    iv = I.bootstrap_interval([[1.0, 3.0], [0.0] * 6], signs=(1, -1), n_boot=2000)
    assert 1.0 <= iv.low <= iv.high <= 3.0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(4, 10), method=st.sampled_from(I.METHODS))
def test_paired_interval_is_narrower_when_runs_are_correlated(seed, n, method):
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 5.0, n)  # what a seed does to both runs (init, batches, partition)
    a = 80 + shared + rng.normal(0, 0.3, n)
    b = 78 + shared + rng.normal(0, 0.3, n)
    paired = I.estimate(a, b, paired=True, method=method)
    unpaired = I.estimate(a, b, paired=False, method=method)
    assert paired.paired is True and unpaired.paired is False
    assert paired.estimate == pytest.approx(unpaired.estimate)
    assert paired.half_width < unpaired.half_width


def _iv(low, high):
    return I.Interval((low + high) / 2, low, high, "t", 0.95, 5, 1.0, 0.5)


def test_verdict_at_the_boundaries():
    assert I.verdict(_iv(0.0, 2.0), 0.0) == "pass"  # an end touching the threshold is on the claimed side
    assert I.verdict(_iv(-1e-9, 2.0), 0.0) == "inconclusive"
    assert I.verdict(_iv(-2.0, -1e-9), 0.0) == "fail"
    assert I.verdict(_iv(-2.0, 0.0), 0.0) == "inconclusive"
    assert I.verdict(_iv(-2.0, 0.0), 0.0, side="below") == "pass"
    assert I.verdict(_iv(1e-9, 2.0), 0.0, side="below") == "fail"
    assert I.verdict(_iv(-1.0, 1.0), 0.0, side="below") == "inconclusive"


@settings(max_examples=25, deadline=None)
@given(low=st.floats(-10, 10), width=st.floats(0, 10), t=st.floats(-10, 10))
def test_verdicts_of_the_two_sides_mirror(low, width, t):
    iv, mirrored = _iv(low, low + width), _iv(-low - width, -low)
    assert I.verdict(iv, t) == I.verdict(mirrored, -t, side="below")


def test_detectable_effect_and_seeds_to_decide():
    iv = I.t_interval([0.5, -0.2, 1.1, 0.3, 0.1])  # mean 0.36, inconclusive against 0
    assert I.verdict(iv, 0.0) == "inconclusive"
    mde = I.detectable_effect(iv)
    assert mde > iv.half_width  # power 80% asks more than the half width
    assert I.detectable_effect(iv, n_test=20) == 5.0  # one test sample of 20 floors it
    n = I.seeds_to_decide(iv, 0.0)
    assert n is not None and n > iv.n
    # with n seeds of the same mean and per-seed spread the interval decides; with n - 1 it does not
    s = iv.sd

    def half(k):
        return I.t_quantile(0.975, k - 1) * s / math.sqrt(k)

    assert half(n) < iv.estimate <= half(n - 1)
    assert I.seeds_to_decide(I.Interval(0.0, -1, 1, "t", 0.95, 5, 1.0, 0.5), 0.0) is None


def test_interval_claim_verdict_margin_and_json():
    seeds = [0, 1, 2, 3, 4]
    fix, bn = [95.0, 94.4, 95.6, 94.2, 95.3], [76.1, 73.6, 81.4, 76.4, 77.5]
    c = interval_claim("fix-vs-bn", "fix beats BN", fix, bn, seeds=seeds, n_test=360)
    assert c.verdict == "pass" and c.margin >= 0 and c.interval["paired"] is True
    assert c.interval["values"] == pytest.approx([a - b for a, b in zip(fix, bn, strict=True)])
    assert c.interval["seeds"] == seeds and c.interval["method"] == "t"
    assert c.interval["detectable_effect"] >= 100 / 360
    lose = interval_claim("bn-vs-fix", "BN beats fix", bn, fix)
    assert lose.verdict == "fail" and lose.margin < 0 and "wholly below" in lose.why
    tie = interval_claim("tie", "a beats b", [1.0, 2.0, 3.0], [1.5, 1.5, 2.5], method="bootstrap")
    assert tie.verdict == "inconclusive" and "seeds" in tie.why and tie.interval["method"] == "bootstrap"
    assert tie.interval["seeds_to_decide"] is None or tie.interval["seeds_to_decide"] > 3
    nan = interval_claim("nan", "x", [1.0, float("nan")], [1.0, 2.0])
    assert nan.verdict == "fail" and nan.why
    # stored and read back; a claim without an interval serialises as before (no key)
    r = Result(id="bench-x", title="t", profile="smoke", seeds=seeds, rows=[], paper=[],
               claims=[c, at_least("plain", "", 2, 1)])
    back = Result.from_dict(json.loads(r.to_json()))
    assert back.claims == r.claims
    assert "interval" not in at_least("plain", "", 2, 1).to_dict()
    assert Claim.from_dict(c.to_dict()) == c


def test_interval_within():
    a, b = [90.0, 90.5, 89.8, 90.2], [89.9, 90.4, 89.9, 90.1]
    assert interval_within("w", "", a, b, 1.0).verdict == "pass"
    assert interval_within("w", "", [x + 5 for x in a], b, 1.0).verdict == "fail"
    assert interval_within("w", "", [90, 93, 87, 91], b, 1.0).verdict == "inconclusive"


def test_interval_monotone_forgives_steps_within_their_interval():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 0.2, 5)
    # a rising trend with a small noisy dip in the middle: no step's interval lies wholly the wrong way
    cols = [70 + base, 80 + base + rng.normal(0, 1.0, 5), 79.6 + base + rng.normal(0, 1.0, 5), 90 + base]
    c = interval_monotone("m", "rises", cols, labels=["a", "b", "c", "d"])
    assert c.verdict == "pass" and c.interval["steps"][1]["violation"] is False
    # a clear drop is a violation
    bad = interval_monotone("m", "rises", [cols[0], cols[1], [60 + v for v in base], cols[3]])
    assert bad.verdict == "fail" and bad.margin < 0 and "wrong way" in bad.why
    dip = [cols[0], cols[1], [75 + v for v in base]]  # 70 -> 80 -> 75: one violation, rising end to end
    assert interval_monotone("m", "", dip).verdict == "fail"
    assert interval_monotone("m", "", dip, allowed_violations=1).verdict == "pass"
    # the violation is forgiven, but 70 -> 60 end to end lies wholly the wrong way: it fails
    forgiven = interval_monotone("m", "", [cols[0], cols[1], [60 + v for v in base]], allowed_violations=1)
    assert forgiven.verdict == "fail" and "end to end" in forgiven.why
    # flat noise: nothing violates, nothing is resolved
    flat = interval_monotone("m", "", [70 + rng.normal(0, 1, 5) for _ in range(3)])
    assert flat.verdict == "inconclusive"
    down = interval_monotone("m", "", [cols[3], cols[0]], increasing=False)
    assert down.verdict == "pass" and down.interval["steps"][0]["estimate"] < 0
    with pytest.raises(ValueError, match="at least 2"):
        interval_monotone("m", "", [cols[0]])


def test_report_shows_the_interval_only_for_results_that_have_one():
    plain = Result(id="bench-x", title="t", profile="smoke", seeds=[0], rows=[], paper=[],
                   claims=[at_least("a", "x", 2, 1)])
    assert "95% interval" not in claim_rows(plain)[0]
    c = interval_claim("tie", "a beats b", [1.0, 2.0, 3.0], [1.5, 1.5, 2.5])
    rows = claim_rows(Result(id="bench-x", title="t", profile="smoke", seeds=[0, 1, 2], rows=[], paper=[],
                             claims=[c, at_least("a", "x", 2, 1)]))
    assert rows[0]["95% interval"].startswith("[") and "seeds to decide" in rows[0]["95% interval"]
    assert rows[1]["95% interval"] is None
    assert list(rows[0]) == ["check", "verdict", "measured", "threshold", "margin", "noise", "95% interval",
                             "numbers", "why"]


def test_at_least_and_at_most_take_per_seed_values():
    from bnfl.experiments.claims import at_most

    fix, bn = [95.0, 94.4, 95.6, 94.2, 95.3], [76.1, 73.6, 81.4, 76.4, 77.5]
    c = at_least("fix", "fix beats BN by 10", fix, 10.0, interval={"baseline": bn, "seeds": range(5), "n_test": 360})
    assert c == interval_claim("fix", "fix beats BN by 10", fix, bn, threshold=10.0, seeds=range(5), n_test=360)
    assert c.verdict == "pass" and c.interval["threshold"] == 10.0
    assert at_most("bn", "BN at most 70", np.array(bn), 70.0).verdict == "fail"
    assert at_least("plain", "", 2.0, 1.0).interval is None  # one number: the margin-against-noise claim


# -- how an Interval prints (issue 50: "+13.5 [6.6, 20.4] pts", not the raw dataclass) ----------------
_A, _B = [0.80, 0.85, 0.90], [0.66, 0.72, 0.766]


def test_a_difference_of_accuracies_prints_in_points_with_its_sign():
    iv = I.estimate(_A, _B, unit="fraction")
    assert str(iv) == f"{iv}" == "+13.5 [12.2, 14.7] pts"
    assert f"{iv:.2f}" == "+13.47 [12.22, 14.72] pts"
    pct = I.estimate([100 * v for v in _A], [100 * v for v in _B], unit="%")
    assert str(pct) == "+13.5 [12.2, 14.7] pts"
    assert str(I.estimate(_B, _A, unit="fraction", paired=False)).startswith("-13.5 [")


def test_a_mean_of_accuracies_prints_in_percent_without_a_sign():
    assert str(I.estimate(_A, unit="fraction")) == "85.0 [72.6, 97.4] %"
    assert str(I.t_interval([70.0, 72.0, 75.0], unit="%")) == "72.3 [66.1, 78.6] %"


def test_without_a_unit_the_numbers_print_as_they_are_and_repr_equality_and_dict_are_unchanged():
    iv = I.estimate(_A, _B)
    assert str(iv) == "+0.1347 [0.1222, 0.1472]"
    assert f"{iv:.2f}" == "+0.13 [0.12, 0.15]"
    marked = I.estimate(_A, _B, unit="fraction")
    assert repr(marked) == repr(iv) and repr(iv).startswith("Interval(estimate=0.1346")
    assert marked == iv and marked.to_dict() == iv.to_dict() and "unit" not in iv.to_dict()


def test_an_unknown_unit_or_format_spec_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unit must be one of"):
        I.estimate(_A, _B, unit="pts")
    with pytest.raises(ValueError, match="format spec"):
        format(I.estimate(_A, _B), "e")
