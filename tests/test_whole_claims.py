"""Issue 47, parts 3, 4 and 6: the headline rows test the papers' whole claims, thresholds follow the
calibration's rule where the benchmark states one, and FedBN's rows measure their precondition in
the entry. Read from the committed results (no training) except where a stub stands in for runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bnfl.experiments import counting as K
from bnfl.experiments import protocols as P
from bnfl.experiments.calibration import BENCH_REPAIR, scaled_effect
from bnfl.experiments.core import Context, Result
from bnfl.experiments.headlines import HEADLINES
from bnfl.experiments.papers.fedbn import setups as FS

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def _result(entry: str) -> Result:
    return Result.from_dict(json.loads((FIGURES / entry / "result.json").read_text()))


def _claims(entry: str) -> dict:
    return {c.name: c for c in _result(entry).claims}


def test_hbn_best_is_tested_as_best_and_its_non_inferiority_line_is_reported_beside():
    r = _result("hbn-tab1")
    cs = {c.name: c for c in r.claims}
    for tag in ("Q-DIG phi=0.6", "Q-DIG phi=0.3", "Q-DIG phi=0.1"):
        best, near = cs[f"hbn-best-{tag}"], cs[f"hbn-near-best-{tag}"]
        assert best.threshold == 0.0 and near.threshold == -1.0
        assert K.same_vector(best, near)  # one measurement ...
        assert K.standing(r, best).counted and not K.standing(r, near).counted  # ... counted once, in "best"
    row6 = HEADLINES[5]
    assert (row6.entry, row6.claim) == ("hbn-tab1", "hbn-best-Q-DIG phi=0.1")
    assert P.threshold_source(row6) == "direction only"


def test_the_benchmark_asks_every_fix_to_repair_the_whole_damage_it_measures():
    cs = _claims("bench-bn-fixes")
    for slug in ("label-skew", "feature-shift", "small-batch-skew"):
        damage = cs[f"{slug}-damage"].interval["estimate"]
        for m in ("fedavg+gn", "fedtan", "hbn", "fixbn", "fedbn"):
            c = cs[f"{slug}-{m}"]
            assert c.threshold == pytest.approx(scaled_effect(BENCH_REPAIR, damage)) == pytest.approx(damage)
            assert "whole damage" in c.statement
    assert BENCH_REPAIR.effect == BENCH_REPAIR.damage == 1.0  # ratio 1: the calibration's rule, in one place
    for h in HEADLINES[22:24]:
        assert h.entry == "bench-bn-fixes" and "whole damage" in h.threshold_reason


@pytest.mark.parametrize(("entry", "claim", "items"), [
    ("fedtan-tab2", "every-cell", 4), ("fixbn-fig3", "conv-every-partition", 4), ("fedtan-fig4", "fair-iid-both", 2)])
def test_a_whole_claim_counts_every_part_of_the_papers_statement(entry, claim, items):
    c = _claims(entry)[claim]
    assert c.interval["need"] == items and len(c.interval["items"]) == items
    assert any((h.entry, h.claim) == (entry, claim) for h in HEADLINES)


def test_fixbn_fig3_runs_each_non_iid_partition_in_place_of_the_shards(monkeypatch):
    """Each partition replaces the shards' fields (a Dirichlet split takes no ``k``) and keeps the
    client count; the shards keep their first claim names."""
    from bnfl.experiments.papers.fixbn import noniid

    seen = []

    def fake_train(ctx, spec):
        seen.append(spec["partition"])
        return [{"final_acc": 90.0 + s, "n_test": 360} for s in ctx.seeds]

    monkeypatch.setattr(noniid, "train_runs", fake_train)
    monkeypatch.setattr(noniid, "tuned_runs", lambda ctx, spec, conv: (_Rate(0.05), fake_train(ctx, spec)))
    conv = {"base": {"partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5}}, "grid": [0.05]}
    claims, _, rates = noniid._conv_claims(Context(profile="quick", seeds=[0, 1, 2]), conv)
    assert list(rates) == ["Shards", "Dir(0.6)", "Dir(0.3)", "Dir(0.1)"]
    assert {"kind": "dirichlet", "phi": 0.1, "num_clients": 5} in seen and all(
        "k" not in p for p in seen if p["kind"] == "dirichlet")
    names = [c.name for c in claims]
    assert names[:2] == ["conv-bn-damage", noniid.CONV_CLAIM] and names[-1] == noniid.CONV_EVERY


class _Rate:
    def __init__(self, rate: float) -> None:
        self.rate, self.at_edge = rate, False

    def describe(self) -> str:
        return f"{self.rate:g}"


def test_fedbn_shift_damage_is_an_iid_control_of_the_same_domains_minus_the_shifted_runs(monkeypatch):
    specs = []

    def fake_runs(ctx, spec, *, unseen=(), curve=True):
        specs.append(spec)
        return [{"domain_acc": [95.0, 93.0, 91.0], "domains": ["a", "b", "c"]} for _ in ctx.seeds]

    monkeypatch.setattr(FS, "fedbn_runs", fake_runs)
    shifted = [{"domain_acc": [90.0, 80.0, 70.0], "domains": ["a", "b", "c"], "n_test_domain": [10, 10, 10]}
               for _ in range(3)]
    base = {"data": {"name": "digit_domains", "domains": ["a", "b", "c"]}, "partition": {"kind": "by_domain"},
            "train": {"lr": 0.01}}
    c = FS.shift_damage(Context(profile="quick", seeds=[0, 1, 2]), base, shifted)
    (spec,) = specs
    assert spec["partition"] == {"kind": "iid", "num_clients": 3} and spec["method"] == "fedavg+bn"
    assert spec["train"]["lr"] == 0.01  # the entry's common rate
    assert c.name == "shift-damage" and c.measured == pytest.approx(93.0 - 80.0)
    with pytest.raises(ValueError, match="at least 2"):
        FS.shift_damage(Context(profile="quick", seeds=[0]), {"data": {}}, [{"domains": ["a"]}])


def test_fedbn_rows_read_their_precondition_from_their_own_entry():
    for h in HEADLINES[17:22]:
        assert h.entry.startswith("fedbn-") and h.precondition is not None and h.precondition.claim, h.entry
        assert h.precondition.claim in _claims(h.entry), (h.entry, h.precondition.claim)


def test_a_row_moved_to_another_claim_keeps_its_earlier_amendments():
    log = {"amendment": [
        {"id": "A1", "entry": "e", "claim": "old", "after": {"claim": "old"}},
        {"id": "A2", "entry": "e", "claim": "old", "after": {"claim": "new"}},
        {"id": "A3", "entry": "e", "claim": "new", "after": {"claim": "new"}},
        {"id": "A4", "entry": "other", "claim": "old", "after": {"claim": "old"}}]}
    row = HEADLINES[4].__class__("e", "new", "t", "p", "s")
    assert [a["id"] for a in P.row_amendments(row, log)] == ["A1", "A2", "A3"]


def test_partial_rows_say_which_part_they_test_and_it_is_declared():
    partial = {h.entry: h for h in HEADLINES if h.tested}
    assert set(partial) == {"hbn-tab4", "fedbn-fig4"}
    for eid, h in partial.items():
        assert any(c.get("tested") == h.tested for c in P.declaration(eid)["claims"])


def test_a_claim_on_several_stand_ins_is_reproduced_only_where_every_testable_one_agrees():
    from bnfl.experiments import verdicts as V

    rep = V.Verdict(V.REPRODUCED, V.REPRODUCED, reason="r.")
    und = V.Verdict(V.UNDECIDED, "undecided (leans towards; ~7 seeds would decide)", "towards", 7, "u.")
    nt = V.Verdict(V.NOT_TESTABLE, "not testable here (BN's damage +0.10 [-1.00, 1.20]: no damage to repair)")
    assert V.across_stand_ins({"A": rep}) is rep
    assert V.across_stand_ins({"A": rep, "B": rep}).word == V.REPRODUCED
    mixed = V.across_stand_ins({"A": rep, "B": und})
    assert mixed.word == V.STAND_IN_DEPENDENT and "A: reproduced" in mixed.text and "B: undecided" in mixed.text
    assert V.across_stand_ins({"A": nt, "B": rep}).word == V.REPRODUCED  # an untestable stand-in says nothing
    assert V.across_stand_ins({"A": nt, "B": nt}).word == V.NOT_TESTABLE
    with pytest.raises(ValueError, match="at least one"):
        V.across_stand_ins({})
    assert V.STAND_IN_DEPENDENT in V.WORDS


def test_every_row_with_other_stand_ins_stores_them_and_reads_its_verdict_across_them():
    from bnfl.experiments import dashboard as D
    from bnfl.experiments.verdicts import across_stand_ins

    rows = [n for n, h in enumerate(HEADLINES, 1) if h.others]
    # the label skew's rows with MNIST-5K calibrated (bench-calib-proxies); HBN's rows 8-11 on the MLP's real
    # digits wherever regime.ALSO_CALIBRATION shows the damage
    assert rows == [1, 2, 4, 8, 9, 10, 11, 12, 13, 14]
    hbn = {8: ["Q-GAUSS(10)/Q-MLP-BN", "Q-DIG/Q-MLP-BN", "MNIST-5K/Q-MLP-BN"],
           10: ["Q-GAUSS(10)/Q-MLP-BN", "MNIST-5K/Q-MLP-BN"]}
    hbn[9], hbn[11] = hbn[8], hbn[10]
    for n in rows:
        h = HEADLINES[n - 1]
        results = {h.entry: _result(h.entry)}
        words = D.stand_in_words(results, h)
        assert list(words) == hbn.get(n, ["Q-DIG-2", "MNIST-5K"]), n  # every stand-in's claim is stored
        assert D.headline_verdict(results, h).word == across_stand_ins(words).word, n


def test_row_1_names_both_stand_ins_and_reads_its_verdict_across_them():
    from bnfl.experiments import dashboard as D

    h = HEADLINES[0]
    assert (h.entry, h.claim) == ("fedtan-fig3", "b-fedavg+bn") and [o.claim for o in h.others] == ["b-fedavg+bn MNIST-5K"]
    results = {"fedtan-fig3": _result("fedtan-fig3")}
    words = D.stand_in_words(results, h)
    assert list(words) == ["Q-DIG-2", "MNIST-5K"]
    from bnfl.experiments.verdicts import across_stand_ins

    assert D.headline_verdict(results, h).word == across_stand_ins(words).word
    row = D.headline_rows(results, [h])[0]
    assert "MNIST-5K" in row["stand-in (quick)"] and "On the other stand-in: MNIST-5K" in row["why"]
    assert any(c.get("other_stand_ins") for c in P.declaration("fedtan-fig3")["claims"])
