"""Verdict words from stored intervals, ``bnfl compare``, and the headline forest plot (no training)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

torch.set_num_threads(1)

import bnfl.experiments as E  # noqa: E402
from bnfl.cli import main as bnfl_main  # noqa: E402
from bnfl.experiments import verdicts as V  # noqa: E402
from bnfl.experiments.compare import compare_results, load_folder  # noqa: E402
from bnfl.experiments.dashboard import headline_rows  # noqa: E402
from bnfl.experiments.forest import WORD_COLORS, forest_items, headline_forest  # noqa: E402
from bnfl.experiments.headlines import HEADLINES  # noqa: E402
from bnfl.experiments.interval_claims import interval_claim, interval_within  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_the_words_follow_the_interval_against_threshold_null_and_margin():
    # a minimum effect (threshold on the paper's side of 0)
    assert V.judge(5.0, 3.0, 7.0, threshold=2.0).word == V.REPRODUCED
    assert V.judge(-5.0, -7.0, -3.0, threshold=2.0).word == V.CONTRADICTED  # wholly below 0
    assert V.judge(1.0, 0.5, 1.5, threshold=2.0).word == V.SMALLER  # short of 2, not reversed
    assert V.judge(1.0, -0.5, 1.8, threshold=2.0).word == V.SMALLER  # excludes 2; 0 inside
    assert V.judge(2.5, 1.0, 4.0, threshold=2.0).word == V.UNDECIDED
    # a non-inferiority margin (threshold on the other side of 0): judged against the margin itself
    assert V.judge(-0.7, -0.9, -0.6, threshold=-0.5).word == V.CONTRADICTED
    assert V.judge(-0.2, -0.4, 0.1, threshold=-0.5).word == V.REPRODUCED
    # "below" claims mirror "above"
    assert V.judge(-19.4, -36.9, -2.0, threshold=-10.0, side="below").word == V.UNDECIDED
    assert V.judge(4.0, 1.0, 7.0, threshold=-10.0, side="below").word == V.CONTRADICTED
    assert V.judge(-20.0, -30.0, -12.0, threshold=-10.0, side="below").word == V.REPRODUCED
    # a share whose "no effect" is 0.5, not 0
    assert V.judge(0.4, 0.3, 0.45, threshold=0.8, null=0.5).word == V.CONTRADICTED
    assert V.judge(0.6, 0.55, 0.7, threshold=0.8, null=0.5).word == V.SMALLER
    # equivalence
    assert V.judge(0.5, -1.0, 1.9, threshold=2.0, side="within").word == V.REPRODUCED
    assert V.judge(26.4, 10.9, 42.0, threshold=3.0, side="within").word == V.CONTRADICTED
    assert V.judge(1.0, -1.0, 3.5, threshold=3.0, side="within").word == V.UNDECIDED
    with pytest.raises(ValueError, match="low <= high"):
        V.judge(0.0, 1.0, -1.0, threshold=0.0)


_num = st.floats(-50, 50, allow_nan=False, allow_infinity=False)


@given(_num, st.floats(0, 30, allow_nan=False), st.floats(0, 30, allow_nan=False), _num, _num, _num)
def test_words_mirror_between_sides_and_ignore_a_common_shift(est, down, up, t, z, shift):
    low, high = est - down, est + up
    above = V.judge(est, low, high, threshold=t, null=z)
    below = V.judge(-est, -high, -low, threshold=-t, side="below", null=-z)
    assert above.word == below.word and above.word in V.WORDS
    moved = V.judge(est + shift, low + shift, high + shift, threshold=t + shift, null=z + shift)
    assert moved.word == above.word or abs(shift) > 0 and min(abs(low - t), abs(high - t), abs(high - z)) < 1e-6
    # reproduced exactly when the interval lies on the paper's side of the threshold
    assert (above.word == V.REPRODUCED) == (low >= t)
    # contradicted never while the interval reaches the paper's side of the threshold
    assert not (above.word == V.CONTRADICTED and high >= t)


def test_undecided_says_which_way_it_leans_and_the_seeds_that_would_decide_it():
    seeds = [0, 1, 2]
    towards = interval_claim("c", "x >= 1", [3.0, -1.0, 4.0], threshold=1.0, seeds=seeds)
    against = interval_claim("c", "x >= 1", [-3.0, 2.0, -4.0], threshold=1.0, seeds=seeds)
    vt, va = V.judge_claim(towards), V.judge_claim(against)
    assert vt.word == va.word == V.UNDECIDED
    assert vt.leans == "towards" and va.leans == "against"
    assert vt.seeds_needed == towards.interval["seeds_to_decide"]  # the stored count, recomputed the same
    assert vt.text == f"undecided (leans towards; ~{vt.seeds_needed} seeds would decide)"
    assert va.text.startswith("undecided (leans against; ~")


def test_a_missing_precondition_makes_the_claim_not_testable_with_its_interval():
    seeds = [0, 1, 2]
    fix = interval_claim("gain", "HBN >= BN", [5.0, 6.0, 7.0], seeds=seeds)  # would be reproduced
    no_damage = interval_claim("bn-drop", "BN drops", [3.0, -4.0, 2.0], seeds=seeds)
    damage = interval_claim("bn-drop", "BN drops", [3.0, 4.0, 2.0], threshold=15.0, seeds=seeds)
    v = V.judge_claim(fix, precondition=no_damage, precondition_label="BN's drop")
    iv = no_damage.interval
    assert v.word == V.NOT_TESTABLE
    assert v.text == (f"not testable here (BN's drop {iv['estimate']:+.2f} [{iv['low']:.2f}, {iv['high']:.2f}]: "
                      "no damage to repair)")
    # a damage wholly above 0 is a precondition that holds, whatever its own threshold (15) says
    assert V.judge_claim(fix, precondition=damage).word == V.REPRODUCED


def test_counts_and_claims_without_intervals_keep_their_meaning():
    seeds = [0, 1, 2]
    items = {"A": interval_claim("a", "", [-1.0, -0.9, -1.1], seeds=seeds).interval,
             "B": interval_claim("b", "", [1.0, -0.5, 1.5], seeds=seeds).interval,
             "C": interval_claim("c", "", [1.0, 1.2, 1.1], seeds=seeds).interval}
    rec = {"method": "count of per-item 95% intervals", "need": 2, "items": items}
    v = V.judge_claim_record(rec)
    assert v.word == V.UNDECIDED and "A contradicted" in v.reason and "B must still hold" in v.reason
    assert V.judge_claim_record({**rec, "need": 1}).word == V.REPRODUCED
    assert V.judge_claim_record({**rec, "need": 3}).word == V.CONTRADICTED
    noisy = E.at_least("n", "x >= 1", 2.0, 1.0, noise=0.5)
    assert V.judge_claim(noisy).word == V.REPRODUCED and "no interval stored" in V.judge_claim(noisy).reason


def test_committed_headlines_speak_the_words_whole_with_reasons_and_units():
    from bnfl.experiments.runner import load_result

    results = {h.entry: load_result(ROOT / "figures", h.entry) for h in HEADLINES}
    rows = headline_rows(results)
    assert all(h.threshold_reason for h in HEADLINES), "every threshold states its reason"
    words = {r["word"] for r in rows}
    assert words <= set(V.WORDS)
    for r in rows:
        assert not r["why"].endswith("..."), r["why"]  # whole, never cut
        assert r["why"].endswith("."), r["why"]
    row = dict(enumerate(rows, 1))
    # HBN rows 6-11 judge their precondition by the entry's own BN-only claim 'bn-damage' (issue 36): the stored
    # result either holds it (the word follows its interval) or the row says that it has none
    for i in range(6, 12):
        r = row[i]
        assert ("has no claim 'bn-damage'" in r["why"] or "Precondition held" in r["why"]
                or (r["word"] == V.NOT_TESTABLE and "not wholly above 0" in r["why"])), (i, r["why"])
    assert row[22]["word"] == V.CONTRADICTED  # FedBN's new client, statistics from a held-apart half
    assert row[1]["word"] == row[12]["word"] == V.SMALLER  # 10 seeds: a collapse, smaller than half the paper's
    assert "3 of 4 items reproduced" in row[10]["why"] and "(pass)" not in row[10]["why"]  # items said once
    assert row[7]["verdict"].startswith("UNDECIDED (LEANS AGAINST; ~")
    # A67: 0.92 of the gap (the paper's share); Q-DIG-2 smaller than claimed, MNIST-5K undecided
    assert row[13]["word"] == V.STAND_IN_DEPENDENT and "Precondition held: BN's FL gap" in row[13]["why"]
    bench = {c.name: c for c in results["bench-bn-fixes"].claims}  # the share, from the stored numbers
    repaired = bench["label-skew-fedtan"].measured / bench["label-skew-damage"].interval["estimate"]
    assert f"repairs {repaired:.0%} of it" in row[23]["why"]  # FedTAN and FedAvg+BN each at its tuned rate
    assert "pts (95% CI, 10 seeds)" in row[1]["ours"] and "pts" not in row[13]["ours"]  # a share has no unit
    for i in range(18, 23):  # FedBN's rows measure the feature shift's damage in their own entry (issue 47)
        assert "Precondition held: the feature shift's damage" in row[i]["why"], (i, row[i]["why"])
    assert "SingleSet" in HEADLINES[17].topic  # row 18 names what it tests against


def _write(folder: Path, results: list) -> None:
    for r in results:
        (folder / r.id).mkdir(parents=True)
        (folder / r.id / "result.json").write_text(json.dumps(r.to_dict()))


def _res(eid: str, claims: list, machine: dict | None = None) -> E.Result:
    return E.Result(id=eid, title=eid, profile="quick", seeds=[0, 1, 2], rows=[], paper=[], claims=claims,
                    machine=machine or {})


def test_compare_marks_differences_beyond_the_combined_interval_and_borderline_verdicts(tmp_path, capsys):
    seeds = [0, 1, 2]
    base = [interval_claim("same", "x >= 0", [1.0, 2.0, 3.0], seeds=seeds),
            interval_claim("edge", "x >= 0", [0.5, 0.6, 0.55], seeds=seeds),
            interval_claim("far", "x >= 0", [5.0, 5.2, 4.9], seeds=seeds),
            E.at_least("plain", "x >= 1", 2.0, 1.0, noise=0.1)]
    moved = [interval_claim("same", "x >= 0", [1.0, 2.0, 3.0], seeds=seeds),
             interval_claim("edge", "x >= 0", [0.5, 0.1, 0.6], seeds=seeds),  # near 0: flips, within noise
             interval_claim("far", "x >= 0", [-5.0, -5.2, -4.9], seeds=seeds),  # flips beyond its interval
             E.at_least("plain", "x >= 1", 2.0, 1.0, noise=0.1)]
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, [_res("fedtan-fig4", base, {"cpu": "Intel", "python": "3.11.9"}), _res("hbn-tab1", [])])
    _write(b, [_res("fedtan-fig4", moved)])
    diffs = {d.claim: d for d in compare_results(load_folder(a), load_folder(b))}
    assert diffs["same"].agree and not diffs["same"].verdict_differs and diffs["same"].diff == 0.0
    assert diffs["edge"].verdict_differs and diffs["edge"].borderline is True and diffs["edge"].agree
    assert diffs["far"].verdict_differs and diffs["far"].borderline is False and not diffs["far"].agree
    ia, ib = base[2].interval, moved[2].interval
    # equal spreads, 3 seeds each: Welch's df = 4, t_0.975(4) = 2.776445
    assert diffs["far"].half == pytest.approx(2.776445 * (ia["se"] ** 2 + ib["se"] ** 2) ** 0.5, rel=1e-5)
    assert diffs["plain"].agree and diffs["plain"].half is None
    assert bnfl_main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "machine: Intel, 3.11.9 (2)" in out.splitlines()[0] or "Intel, 3.11.9" in out
    assert "fedtan-fig4 | edge:" in out and "(borderline)" in out and "(not borderline)" in out
    assert "fedtan-fig4 | same:" not in out  # only what differs, unless --all
    assert out.strip().splitlines()[-1] == ("4 claims in 1 shared entries: 3 agree, 1 differ beyond their combined "
                                            "95% interval (or, without one, in the number); 2 verdicts differ "
                                            "(1 borderline, 1 not); entries only in A: 1, only in B: 0.")
    assert bnfl_main(["compare", str(b), str(b)]) == 0
    assert bnfl_main(["compare", str(tmp_path / "nope"), str(b)]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_compare_does_not_call_a_verdict_changed_when_one_side_stores_no_interval(tmp_path, capsys):
    # a run that diverged on one machine stores the same verdict without an interval (fedtan-fig3
    # a-no-bn on an AMD EPYC): "pass" against "pass (reproduced)" is the same verdict
    seeds = [0, 1, 2]
    kept = interval_claim("a-no-bn", "x <= -20", [-70.0, -80.0, -75.0], threshold=-20.0, side="below", seeds=seeds)
    diverged = dataclasses.replace(kept, measured=None, threshold=None, interval=None,
                                   detail="the no-BN run diverged (non-finite loss)")
    flipped = dataclasses.replace(diverged, name="b", verdict="fail")
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, [_res("fedtan-fig3", [diverged, flipped])])
    _write(b, [_res("fedtan-fig3", [kept, dataclasses.replace(kept, name="b")])])
    diffs = {d.claim: d for d in compare_results(load_folder(a), load_folder(b))}
    assert not diffs["a-no-bn"].verdict_differs and not diffs["a-no-bn"].agree  # the number is missing on A
    assert diffs["b"].verdict_differs and diffs["b"].borderline is None
    assert bnfl_main(["compare", str(a), str(b)]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith("1 verdicts differ (0 borderline, 0 not, 1 without an interval).")


def test_compare_on_a_copy_of_the_committed_figures_with_one_claim_moved(tmp_path, capsys):
    entries = ["fedtan-tab1", "hbn-tab2", "bench-bn-fixes"]
    for eid in entries:
        shutil.copytree(ROOT / "figures" / eid, tmp_path / "copy" / eid)
        shutil.copytree(ROOT / "figures" / eid, tmp_path / "orig" / eid)
    path = tmp_path / "copy" / "hbn-tab2" / "result.json"
    d = json.loads(path.read_text())
    c = next(c for c in d["claims"] if c["name"] == "hbn-ge-bn-0.6-B2")
    was = c["interval"]["estimate"]
    shift = -1.5 * (c["interval"]["high"] - c["interval"]["low"]) - was  # well beyond the interval, below 0
    for k in ("estimate", "low", "high"):
        c["interval"][k] += shift
    path.write_text(json.dumps(d))
    assert bnfl_main(["compare", str(tmp_path / "copy"), str(tmp_path / "orig")]) == 1
    out = capsys.readouterr().out
    moved = [line for line in out.splitlines() if " | " in line]
    assert len(moved) == 1
    assert moved[0].startswith(f"hbn-tab2 | hbn-ge-bn-0.6-B2: A {was + shift:.2f} B {was:.2f} d {shift:.2f} (BEYOND")
    assert "(not borderline)" in moved[0]


def test_forest_items_follow_the_table_and_the_figure_draws(tmp_path):
    from bnfl.experiments.runner import load_result

    results = {h.entry: load_result(ROOT / "figures", h.entry) for h in HEADLINES}
    items = forest_items(results)
    labels = [it["label"] for it in items["pts"]]
    assert labels[0].startswith("1. FedTAN: FedAvg+BN collapses") and not any(lab.endswith("…") for lab in labels)
    assert sum(lab.startswith("10. ") for lab in labels) == 8  # the count is drawn as its items, on both stand-ins
    assert labels[[lab.startswith("10. ") for lab in labels].index(True)].replace("\n", " ").endswith(
        "FedAvg, Q-GAUSS(10)/Q-MLP-BN")
    row3 = [it for it in items["pts"] if it["label"].startswith("3. ")]  # an equivalence item keeps its band
    assert len(row3) == 2 and all(it["threshold"] == (-2.0, 2.0) for it in row3)
    row1 = [it["label"].replace("\n", " ") for it in items["pts"] if it["label"].startswith("1. ")]
    assert row1[0].endswith(", Q-DIG-2") and row1[1].endswith(", MNIST-5K")  # each stand-in drawn
    assert [it["label"].split(".")[0] for it in items["share"]] == ["13", "13", "20"]  # row 13 on both stand-ins
    assert {it["color"] for it in items["pts"]} <= set(WORD_COLORS.values())
    tab17 = next(it for it in items["pts"] if it["label"].startswith("22."))
    assert tab17["threshold"] == (-3.0, 3.0) and tab17["paper"] == pytest.approx(0.10)
    fig = headline_forest(results)
    fig.savefig(tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_interval_within_is_read_back_as_its_band():
    w = interval_within("w", "|d| <= 3", [1.0, 2.0, 1.5], [0.0, 0.0, 0.0], 3.0, seeds=[0, 1, 2])
    assert V.judge_claim(w).word == V.REPRODUCED


def test_the_landing_pages_hero_figure_states_its_own_verdict_from_the_stored_numbers():
    import re

    from bnfl.experiments.runner import load_result

    caption = (ROOT / "docs" / "index.md").read_text().split("fedtan-fig4.png")[1].split("```")[0]
    r = load_result(ROOT / "figures", "fedtan-fig4")
    acc = {(row["setting"], row["method"]): row for row in r.rows}
    non = {m: acc[("non-iid", m)] for m in ("FedAvg+BN", "Centralized+BN", "FedTAN")}
    iid = [row["test acc (%)"] for (s, _), row in acc.items() if s == "iid"]
    assert f"FedAvg+BN reaches {non['FedAvg+BN']['test acc (%)']:.2f}% (std {non['FedAvg+BN']['std']:.2f})" in \
        " ".join(caption.split())
    assert f"{non['Centralized+BN']['test acc (%)']:.2f}% for centralized" in caption
    assert f"reaches {non['FedTAN']['test acc (%)']:.2f}%" in caption
    assert f"within {max(iid) - min(iid):.2f} points" in caption
    gap = next(c for c in r.claims if c.name == "fedtan-gap")
    iv = gap.interval
    assert f"{iv['estimate']:+.2f} [{iv['low']:.2f}, {iv['high']:.2f}]" in caption
    word = V.judge_claim(gap).word
    assert re.search(rf"\*\*{word}\*\*", caption) and f"{word} on the stand-in" in caption


def test_issue_36_defects_in_the_entries_that_need_no_retraining():
    from bnfl.experiments.papers.fedbn import numbers as N
    from bnfl.experiments.papers.fixbn.noniid import _gn_why

    # FedBN Table 17's FedAvg row is in the paper's text (App. G): the paper's numbers, not "missing"
    assert dict(N.TABLE17)["FedAvg"] == ("91.28", "93.55")
    # fixbn-fig3's why names the reason that holds in each setting (issue 36: row 16 cited chance wrongly)
    assert "chance" not in _gn_why("Q-DIG / Q-MLP-BN").replace("far above chance", "")
    assert "100-class" in _gn_why("Tiny analogue: Q-GAUSS(100) / Q-MLP-BN")


def test_a_count_whose_items_store_no_interval_is_undecided_not_a_crash():
    """One seed (the smoke profile) stores no interval per item; the count still reads, undecided."""
    v = V.judge_claim_record({"items": {"FedAvg": None, "FedProx": None}, "need": 1})
    assert v.word == V.UNDECIDED and "0 of 2 items reproduced" in v.reason


def test_two_headlines_on_one_paired_difference_count_once():
    """Issue 36: HBN's rows 6 and 7 ("HBN is best", "HBN beats BN by 1 pt") read one measurement when BN
    is the best other normaliser; the table keeps both statements and counts the measurement once."""
    from types import SimpleNamespace

    from bnfl.experiments.dashboard import headline_word_counts
    from bnfl.experiments.headlines import Headline

    seeds = [0, 1, 2, 3, 4]
    diffs = [2.0, 2.5, 3.0, 2.2, 2.8]
    best = interval_claim("best", "HBN within 1 pt of the best", diffs, threshold=-1.0, seeds=seeds)
    vs_bn = interval_claim("vs-bn", "HBN - BN >= 1", diffs, threshold=1.0, seeds=seeds)
    other = interval_claim("other", "FixBN >= BN", [1.0, 1.2, 0.8, 1.1, 0.9], seeds=seeds)
    results = {"e": SimpleNamespace(claims=[best, vs_bn, other])}
    heads = [Headline("e", name, name, "paper", "stand-in", threshold_reason="r") for name in ("best", "vs-bn", "other")]
    rows = headline_rows(results, heads)
    assert [r.get("same_as") for r in rows] == [None, "1", None]
    assert "One measurement with row 1" in rows[1]["why"]
    assert headline_word_counts(results, heads) == {V.REPRODUCED: 2}


def test_a_headline_claim_whose_seeds_all_give_one_value_is_counted_as_a_structural_check():
    """On an AMD EPYC, fedbn-fig3's fair-faster gave 0.94 on every seed: counting re-kinds it a
    structural check, so it has no verdict word; the row says so and the summary still counts it
    (it read "PASS" and the summary added up to 21 of 22 measurements)."""
    from types import SimpleNamespace

    from bnfl.experiments.dashboard import headline_word_counts
    from bnfl.experiments.headlines import Headline

    seeds = [0, 1, 2, 3, 4]
    flat = interval_claim("faster", "FedBN's loss below FedAvg's in >= 0.8 of the rounds", [0.94] * 5,
                          threshold=0.8, seeds=seeds)
    other = interval_claim("other", "FixBN >= BN", [1.0, 1.2, 0.8, 1.1, 0.9], seeds=seeds)
    results = {"e": SimpleNamespace(id="e", claims=[flat, other])}
    heads = [Headline("e", name, name, "paper", "stand-in", threshold_reason="r") for name in ("faster", "other")]
    rows = headline_rows(results, heads)
    assert rows[0]["verdict"] == "PASS (STRUCTURAL CHECK)" and rows[0]["word"] == "structural check"
    assert "every seed gives 0.94: no spread over seeds" in rows[0]["why"]
    counts = headline_word_counts(results, heads)
    assert counts == {V.REPRODUCED: 1, "structural check": 1} and sum(counts.values()) == len(rows)
