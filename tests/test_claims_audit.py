"""Claim hygiene (issue 25 items 1, 3, 6): declared structural claims, the list of counted trained
claims without an interval, the record a claim keeps when no interval can exist (a diverged run), and
the headline claims moved onto the proxy the BN-only calibration recommends. No training."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

import bnfl.experiments as E  # noqa: E402
from bnfl.experiments import dashboard as D  # noqa: E402
from bnfl.experiments import report as R  # noqa: E402
from bnfl.experiments._claim import no_interval  # noqa: E402
from bnfl.experiments.claims import Claim, at_least, info, linked, per_seed_claim, within  # noqa: E402
from bnfl.experiments.headlines import HEADLINES  # noqa: E402
from bnfl.experiments.interval_claims import interval_claim, interval_monotone, interval_within  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEEDS = [0, 1, 2]


def _result(eid, claims, *, runs=True):
    return E.Result(id=eid, title=f"title of {eid}", profile="quick", seeds=list(SEEDS), rows=[], paper=[],
                    claims=claims, runs={"r1": 1.0} if runs else {})


def _trained(name="t"):
    return per_seed_claim(name, "a beats b", [80.0, 81.0, 82.0], 0.0, baseline=[70.0, 70.5, 71.0], seeds=SEEDS,
                          n_test=360)


def test_a_claim_declared_structural_counts_as_structural_inside_a_trained_entry():
    arith = within("rounds", "rounds = 3L+1 = 22", 22.0, 22.0, 0.0, kind="structural")
    plain = within("rounds-old", "rounds = 22", 22.0, 22.0, 0.0)  # the old way: counted as trained
    res = _result("fedtan-fig10", [arith, plain, _trained()])
    assert [D.claim_kind(res, c) for c in res.claims] == ["structural", "reproduction", "reproduction"]
    counts = D.kind_counts([res])["fedtan"]
    assert counts["structural"]["pass"] == 1 and counts["reproduction"]["reproduced"] == 2
    assert "*(structural check)*" in R.claim_rows(res)[0]["check"]
    assert Claim.from_dict(json.loads(json.dumps(arith.to_dict()))).kind == "structural"
    with pytest.raises(ValueError, match="kind must be one of"):
        Claim("x", "y", "pass", kind="arithmetic")


def test_an_interval_over_seeds_makes_a_claim_trained_even_where_no_fl_run_is_recorded():
    res = _result("fedbn-fig9", [_trained(), at_least("exact", "1 >= 0", 1.0, 0.0)], runs=False)
    assert [D.claim_kind(res, c) for c in res.claims] == ["reproduction", "structural"]


def test_missing_intervals_lists_counted_trained_claims_without_one():
    no_iv = at_least("margin-only", "a >= b by margin", 3.0, 0.0, noise=0.28)  # a trained claim, no interval
    diverged = interval_claim("div", "fix beats BN", [float("nan"), 80.0, float("nan")], [70.0, 71.0, 72.0],
                              seeds=SEEDS, n_test=360)
    trained = _result("bench-x", [
        _trained("ok"), no_iv, diverged,
        linked(at_least("re-read", "x", 3.0, 0.0), "fedtan-tab2"),  # counted elsewhere
        info("reported", "a number", 3.0),  # not asserted
        within("arith", "1 = 1", 1.0, 1.0, 0.0, kind="structural"),
        Claim("copy", "paper vs paper", "fail", kind="consistency"),
    ])
    exact = _result("fedtan-tab3", [at_least("count", "params", 5.0, 1.0)], runs=False)  # trains nothing
    assert D.missing_intervals([trained, exact]) == [("bench-x", "margin-only")]
    assert D.no_interval_claims([trained, exact]) == [("bench-x", "div", "diverged")]
    assert D.missing_intervals([_result("bench-y", [_trained(), diverged])]) == []
    line = R._interval_line([trained, exact])
    assert "no 95% interval: 1 (bench-x `margin-only`)" in line and "bench-x `div` (diverged)" in line


def test_the_report_states_the_count(tmp_path):
    res = [_result("fedtan-fig10", [_trained(), at_least("m", "margin", 3.0, 0.0)]),
           _result("fedtan-fig11", [within("rounds", "rounds", 1.0, 1.0, 0.0, kind="structural")])]
    text = R.write_report(res, tmp_path / "REPORT.md").read_text()
    assert "Counted reproduction claims with a verdict but no 95% interval: 1 (fedtan-fig10 `m`)." in text
    assert "*(structural check)*" in text


def test_a_diverged_run_leaves_a_record_in_place_of_the_interval():
    nan = float("nan")
    c = interval_claim("fix", "FixBN beats BN", [nan, 80.56, nan, nan, nan], [81.7, 85.6, 84.2, 84.2, 86.4],
                       seeds=[0, 1, 2, 3, 4], n_test=120, why="FixBN diverged")
    iv = c.interval
    assert c.verdict == "fail" and c.measured is None and not c.has_interval
    assert iv["no_interval"] == "diverged" and iv["diverged_seeds"] == [0, 2, 3, 4] and iv["finite"] == 1
    assert iv["values"] == [None, 80.56, None, None, None] and iv["baseline"][1] == 85.6
    assert "seed(s) 0, 2, 3, 4" in c.why and "FixBN diverged" in c.why
    json.dumps(c.to_dict(), allow_nan=False)  # the stored record is plain JSON (no NaN)
    assert R.interval_text(c) == "none: diverged on seed(s) 0, 2, 3, 4 (1 of 5 seeds gave a number)"
    w = interval_within("w", "close", [1.0, nan, 1.0], [1.0, 1.0, 1.0], 1.0, seeds=SEEDS)
    assert w.interval["diverged_seeds"] == [1]
    m = interval_monotone("m", "rises", [[1.0, 2.0, 3.0], [2.0, nan, 4.0]], seeds=SEEDS, labels=["a", "b"])
    assert m.verdict == "fail" and m.interval["columns"][1] == [2.0, None, 4.0]
    assert _trained().has_interval and not at_least("x", "y", 1.0, 0.0).has_interval
    with pytest.raises(ValueError, match="reason"):
        no_interval("")


def test_bench_bn_fixes_says_why_fixbn_diverged():
    from bnfl.experiments.benchmarks.bn_fixes import ROUNDS, _diverged_why, _t_star

    assert _t_star("fixbn") == ROUNDS // 2 and _t_star("fedtan") is None
    why = _diverged_why("fixbn", [51, 51, 51, 51], 5, 0.1)
    assert "4 of 5 seeds" in why and "T* + 1 = 51" in why and "frozen BN statistics" in why
    assert "T*" not in _diverged_why("fixbn", [7], 5, 0.1) and "HBN diverged" in _diverged_why("hbn", [7], 5, 0.1)


def test_fedtan_ii_round_counts_are_structural():
    from bnfl import models
    from bnfl.experiments.papers.fedtan.communication import _fedtan_ii_claims

    runs = {"M=2": [{"comm_rounds": [2 * 4 + 8]}], "FedTAN": [{"comm_rounds": [10 * 4]}]}
    claims = _fedtan_ii_claims(runs, 10, models.build("q_mlp1"))
    assert [c.kind for c in claims] == ["structural", "structural"]
    assert all(c.verdict == "pass" for c in claims)


def test_normalisation_layer_headlines_run_on_a_conv_net_at_tuned_rates_with_their_precondition():
    """Issue 36: FedTAN vs FedAvg+GN (fedtan-tab2) and "FixBN is the best layer" (fixbn-tab5) compare
    layers on a convolutional stand-in (GN over channels), every method at its own tuned rate, and
    measure BN's damage with BN-only runs first; no MLP proxy is left."""
    assert not (ROOT / "bnfl" / "experiments" / "proxies.py").exists()
    for eid, claim in (("fedtan-tab2", "every-cell"), ("fixbn-tab5", "fixbn-best")):
        quick = E.get(eid).config("quick")
        assert "proxy" not in quick and len(quick["tune"]["grid"]) >= 4
        assert quick["base"]["model"]["name"] == "q_res"
        head = next(h for h in HEADLINES if h.entry == eid and h.claim == claim)
        assert head.precondition is not None and head.precondition.claim == "bn-damage"
        assert "Q-RES" in head.stand_in and "tuned" in head.threshold_reason


def test_fig9_counts_the_qdig_columns_that_tab2_tunes():
    from bnfl.experiments.core import Context
    from bnfl.experiments.papers.fedtan.groupnorm import _MOVED, _moved

    assert _MOVED == ("with mom.", "non-iid")  # the cell whose BN-only runs measure the precondition
    assert _moved(Context(profile="quick")) and _moved(Context(profile="smoke"))
    assert not _moved(Context(profile="paper"))


def test_tab2_tunes_every_cell_around_its_own_common_rate():
    """Issue 47 (part 3): Table 2 whole, every cell at tuned rates; a cell without momentum tunes
    over the momentum recipe's grid scaled to its own common rate (0.1 over 0.05)."""
    from bnfl.experiments.papers.fedtan.groupnorm import TAB2_GRID, _cell_base, _cell_tune

    config = E.get("fedtan-tab2").config("quick")
    for mom, scale in (("with mom.", 1.0), ("w/o mom.", 2.0)):
        for dist in ("iid", "non-iid"):
            tune = _cell_tune(config, _cell_base(config, mom, dist))
            assert tune["grid"] == pytest.approx([g * scale for g in TAB2_GRID]), (mom, dist)


def test_fedbn_fig9_runs_several_seeds():
    entry = E.get("fedbn-fig9")
    assert entry.default_seeds["quick"] >= 3 and entry.default_seeds["smoke"] >= 2
