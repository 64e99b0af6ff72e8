"""The seeded claims of HBN's Tables 4, 5, 8-10 and Fig. 7 (bnfl.experiments.evidence): paired
intervals, diverged pairs (NaN vs NaN is reported, not an HBN fail), and "k of n" counts decided by
intervals; hbn-tab4 asks the catalog's 3 of 4. No training."""

from __future__ import annotations

import math

import pytest

from bnfl.experiments.evidence import count_of, fmt, mean_of, paired_at_least
from bnfl.experiments.papers.hbn.comparison import QUICK_SOLVERS, needed

NAN = math.nan
SEEDS = [0, 1, 2]


def test_paired_interval_passes_fails_and_stays_undecided():
    up = paired_at_least("x", "a >= b", [91.0, 92.0, 93.0], [90.0, 90.5, 91.2], 0.0, seeds=SEEDS, n_test=360)
    assert up.verdict == "pass" and up.interval["seeds"] == SEEDS and up.interval["n_test"] == 360
    assert up.interval["paired"] is True and up.interval["values"] == pytest.approx([1.0, 1.5, 1.8])
    down = paired_at_least("x", "a >= b", [88.0, 88.2, 88.1], [90.0, 90.5, 90.2], 0.0, seeds=SEEDS, n_test=360)
    assert down.verdict == "fail"
    noisy = paired_at_least("x", "a >= b", [95.0, 85.0, 91.0], [90.0, 90.0, 90.0], 0.0, seeds=SEEDS, n_test=360)
    assert noisy.verdict == "inconclusive" and "seeds" in noisy.why


def test_both_diverged_is_reported_not_failed():
    c = paired_at_least("not-worse-SCAFFOLD", "+HBN >= base - 0.5", [NAN] * 3, [NAN] * 3, -0.5, seeds=SEEDS,
                        n_test=360)
    assert c.verdict == "info" and "both runs diverged" in c.detail
    only_base = paired_at_least("x", "+HBN >= base", [90.0, 91.0, 92.0], [NAN, 90.0, 91.0], 0.0, seeds=SEEDS,
                                n_test=360)
    assert only_base.verdict == "info" and "only the baseline" in only_base.detail


def test_hbn_diverging_where_the_baseline_trained_fails():
    c = paired_at_least("x", "+HBN >= base", [NAN, 91.0, 92.0], [90.0, 90.0, 91.0], 0.0, seeds=SEEDS, n_test=360)
    assert c.verdict == "fail" and "seed(s) [0]" in c.why


def test_one_seed_falls_back_to_one_test_sample():
    tie = paired_at_least("x", "a >= b", [90.2], [90.0], 0.0, seeds=[0], n_test=360)
    assert tie.verdict == "inconclusive"  # 0.2 pts < one sample (0.28 pts of 360)
    assert paired_at_least("x", "a >= b", [91.0], [90.0], 0.0, seeds=[0], n_test=360).verdict == "pass"
    with pytest.raises(ValueError, match="per seed"):
        paired_at_least("x", "a >= b", [91.0, 92.0], [90.0], 0.0, seeds=[0, 1], n_test=360)


def _item(verdict_of):
    good, bad, open_ = [91.0, 91.7, 91.3], [88.0, 88.2, 88.1], [95.0, 85.0, 91.0]
    vals = {"pass": good, "fail": bad, "inconclusive": open_, "info": [NAN] * 3}[verdict_of]
    base = [NAN] * 3 if verdict_of == "info" else [90.0, 90.5, 90.2]
    c = paired_at_least(verdict_of, "a > b", vals, base, 0.0, seeds=SEEDS, n_test=360)
    assert c.verdict == verdict_of
    return c


@pytest.mark.parametrize("verdicts, need, want", [
    (["pass", "pass", "pass", "fail"], 3, "pass"),
    (["pass", "pass", "inconclusive", "fail"], 3, "inconclusive"),
    (["pass", "pass", "fail", "fail"], 3, "fail"),
    (["pass", "pass", "info", "pass"], 3, "pass"),
    (["pass", "pass", "info", "inconclusive"], 4, "fail"),  # both-diverged never counts as a success
])
def test_count_of_is_decided_by_the_items_intervals(verdicts, need, want):
    items = {f"{v}-{i}": _item(v) for i, v in enumerate(verdicts)}
    c = count_of("gains", "k of n", items, need)
    assert c.verdict == want
    assert c.interval["need"] == need and set(c.interval["items"]) == set(items)


def test_tab4_quick_asks_the_catalogs_three_of_four():
    assert QUICK_SOLVERS == ["FedAvg", "FedProx", "SCAFFOLD", "FedAdam"]
    assert needed(4) == 3 and needed(8) == 6 and needed(2) == 2


def test_fmt_and_mean():
    assert fmt([1.0, 2.0, 3.0]) == "2.00 ± 1.00" and fmt([2.0]) == "2.00 (1 seed)" and fmt([NAN, NAN]) == "diverged"
    assert math.isnan(mean_of([1.0, NAN])) and mean_of([1.0, 3.0]) == 2.0
