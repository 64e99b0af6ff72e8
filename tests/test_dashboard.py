"""What a reader sees first: the headline table, claim kinds, figure order, rounding (no training)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

import bnfl.experiments as E  # noqa: E402
from bnfl.experiments import dashboard as D  # noqa: E402
from bnfl.experiments.claims import linked  # noqa: E402
from bnfl.experiments.headlines import HEADLINES, STAND_INS  # noqa: E402
from bnfl.experiments.interval_claims import interval_claim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_every_headline_names_a_registered_entry_and_a_committed_claim():
    assert 18 <= len(HEADLINES) <= 25
    assert len({(h.entry, h.claim) for h in HEADLINES}) == len(HEADLINES), "a headline is named twice"
    names = [s.name for s in STAND_INS]
    for h in HEADLINES:
        E.get(h.entry)  # KeyError names the known ids
        path = ROOT / "figures" / h.entry / "result.json"
        assert path.is_file(), f"{h.entry}: no committed result"
        claims = {c["name"] for c in json.loads(path.read_text())["claims"]}
        assert h.claim in claims, f"{h.entry} has no claim {h.claim!r}; it has {sorted(claims)}"
        assert any(h.stand_in.startswith(n.split("(")[0]) for n in names), f"{h.stand_in!r}: undeclared stand-in"
    assert {h.paper for h in HEADLINES} == {"fedtan", "hbn", "fixbn", "fedbn", "bench"}


def test_natural_and_figure_order():
    ids = ["hbn-tab1", "bench-bn-fixes", "fedtan-tab1", "fedtan-fig10", "fedtan-tabD", "fedtan-fig2",
           "fedbn-tab2", "fixbn-fig1", "fedbn-fig9", "fedtan-tab10"]
    assert sorted(ids, key=D.entry_order) == [
        "fedtan-fig2", "fedtan-fig10", "fedtan-tab1", "fedtan-tab10", "fedtan-tabD", "hbn-tab1", "fixbn-fig1",
        "fedbn-fig9", "fedbn-tab2", "bench-bn-fixes"]
    assert sorted(["a10", "a2", "a1b", "A3"], key=D.natural_key) == ["a1b", "a2", "A3", "a10"]


def test_numbers_are_rounded_for_display_only():
    assert D.display_number(97.77766666666666) == "97.78"
    assert D.display_number(0.00012345) == "0.000123"
    assert D.display_number(3) == "3" and D.display_number(None) == "–" and D.display_number(0.0) == "0"
    text = "|97.77766666666666 - 97.40733333333334| = 0.3703 <= 2.0; seed 12345; v1.123456"
    assert D.round_numbers(text) == "|97.78 - 97.41| = 0.3703 <= 2.0; seed 12345; v1.123456"
    assert D.round_numbers("-0.4627000001 and 12.5") == "-0.463 and 12.5"
    assert D.round_numbers("measured 16.6663 >= 8.0", digits=3) == "measured 16.67 >= 8.0"
    assert [D.display_value(v) for v in (97.77766666666666, 2.1388, 0.27777777, 1e-5, 3, None)] == [
        "97.78", "2.1388", "0.2778", "1e-05", "3", "–"]  # an entry's own 4 decimals (the paper's) stay


def _result(eid, claims, *, runs=True, **kw):
    return E.Result(id=eid, title=f"title of {eid}", profile="quick", seeds=[0, 1, 2], rows=kw.pop("rows", []),
                    paper=kw.pop("paper", []), claims=claims, runs={"r1": 1.0} if runs else {}, **kw)


def test_claim_kinds_split_structural_from_reproduction_without_touching_stored_kinds():
    rep = E.at_least("a", "a >= 1", 2.0, 1.0)
    con = E.Claim(name="c", statement="paper vs paper", verdict="pass", kind="consistency")
    trained = _result("fedtan-fig4", [rep, con])
    exact = _result("fedtan-tab3", [rep], runs=False)
    assert [D.claim_kind(trained, c) for c in trained.claims] == ["reproduction", "consistency"]
    assert D.claim_kind(exact, rep) == "structural" and rep.kind == "reproduction"
    counts = D.kind_counts([trained, exact])["fedtan"]
    assert counts["reproduction"]["reproduced"] == 1 and counts["structural"]["pass"] == 1
    assert counts["consistency"]["pass"] == 1


def test_paper_numbers_are_paired_with_ours():
    r = _result("fedtan-tab1", [], rows=[{"method": "FedTAN", "acc": 97.77766666666666, "std": 0.4}],
                paper=[{"method": "FedTAN", "acc": "87.66 ± 0.43"}, {"method": "GN", "acc": "80"}])
    assert D.paper_pairs(r) == [("FedTAN", "acc", "87.66 ± 0.43", "97.78")]
    side = _result("fixbn-tab1", [], rows=[{"Norm": "BN", "FL ours": "77.31 ± 4.73", "FL paper": "42.93",
                                            "#R ours": 0, "#R paper": "-"}])
    assert D.paper_pairs(side) == [("BN", "FL", "42.93", "77.31 ± 4.73")]


def test_report_opens_with_the_headline_table_built_from_a_results_folder(tmp_path):
    h_interval, h_noise, h_missing = HEADLINES[-1], HEADLINES[1], HEADLINES[0]
    assert h_interval.entry == "bench-bn-fixes" and h_noise.entry == "fedtan-tab1"
    with_interval = interval_claim(h_interval.claim, "FedBN beats FedAvg+BN", [3.0, 2.0, 4.0, 3.5, 2.5],
                                   seeds=[0, 1, 2, 3, 4], n_test=360)
    noisy = E.at_least(h_noise.claim, "gap >= 8", 16.66633333, 8.0, noise=5.5)
    results = [_result("bench-bn-fixes", [with_interval], deviations=["CIFAR-10 -> Q-DIG"]),
               _result("fedtan-tab1", [noisy], rows=[{"method": "FedTAN", "acc": 96.5}],
                       paper=[{"method": "FedTAN", "acc": "87.66"}]),
               _result("fedtan-fig10", []), _result("fedtan-fig2", [], runs=False)]
    for r in results:
        (tmp_path / r.id).mkdir()
        (tmp_path / r.id / "result.json").write_text(json.dumps(r.to_dict()))
    before = {p: p.read_bytes() for p in tmp_path.glob("*/result.json")}
    E.reproduce(profile="quick", out=tmp_path, only=[r.id for r in results], progress=False, report_only=True)
    assert {p: p.read_bytes() for p in tmp_path.glob("*/result.json")} == before
    text = (tmp_path / "REPORT.md").read_text()
    assert text.startswith("# Reproduction report\n\n## Headline claims\n")
    table = text.split("## Headline claims")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(HEADLINES)
    iv = with_interval.interval
    bench = next(r for r in rows if h_interval.topic in r)
    assert f"| {iv['estimate']:+.2f} [{iv['low']:.2f}, {iv['high']:.2f}] pts (95% CI, 5 seeds) |" in bench
    assert "| REPRODUCED |" in bench and h_interval.stand_in in bench and h_interval.paper_effect in bench
    assert f"| {h_interval.threshold_reason} |" in bench  # the threshold says why it is what it is
    assert "has no claim 'feature-shift-damage'" in bench  # the precondition is named, not invented
    tab1 = next(r for r in rows if h_noise.topic in r)
    assert "| 16.67 ± 5.50 pts (noise) |" in tab1 and "Measured 16.67 >= 8.0." in tab1 and "16.6663" not in tab1
    assert "| REPRODUCED |" in tab1 and "no interval stored" in tab1
    assert "Headline rows: 24 rows, 24 measurements: 2 reproduced, 22 not run." in text
    assert text.index("![Headline effects") < text.index("| # | paper |")  # the picture opens the report
    assert (tmp_path / "headline-forest.png").is_file() and (tmp_path / "headline-forest.svg").is_file()
    assert "**Machine.** The stored numbers were computed on: not recorded (4 entries)." in text
    assert "another CPU" in text and "Key: a reproduction cell counts its claims by verdict word" in text
    assert "| not run |" in next(r for r in rows if h_missing.topic in r)
    assert "**The quick profile trains on stand-in data" in text and "**Q-DIG**" in text
    assert "## Claims by paper and kind" in text and "| Benchmark (no paper) | 1/0/0/0/0/0 |" in text
    grouped = text.split("## Entries by paper")[1]
    assert grouped.index("fedtan-fig2") < grouped.index("fedtan-fig10") < grouped.index("fedtan-tab1")
    assert grouped.index("### FedTAN") < grouped.index("### Benchmark (no paper)")
    assert "87.66 / 96.50 (FedTAN, acc)" in grouped
    assert "**The paper beside ours:**" in text


def test_notebook_index_groups_by_paper_in_natural_order_with_the_benchmark_last(bnfl_docs):
    books = ["bench/bench-bn-fixes", "fedtan/fedtan-fig10", "theory/fedtan-bound", "fedtan/fedtan-tab1",
             "hbn/hbn-tab1", "fedtan/fedtan-fig2", "fedbn/fedbn-fig1"]
    groups = bnfl_docs.notebook_groups(books)
    assert [t for t, _ in groups] == ["FedTAN", "HBN", "FedBN", "Theory", "Benchmark (no paper)"]
    assert groups[0][1] == ["fedtan/fedtan-fig2", "fedtan/fedtan-fig10", "fedtan/fedtan-tab1"]


def test_docs_dashboard_and_paper_pages_from_a_small_results_folder(bnfl_docs, tmp_path, monkeypatch):
    figures = tmp_path / "figures"
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    shared = "on the quick proxy BN shows little damage (8x8 digits; T = 60)"
    fig1 = [E.at_least("x", "HBN >= BN", 0.2, 1.0, noise=0.28),
            E.at_least("y", "HBN >= GN", 0.3, 1.0, noise=0.28),
            linked(E.at_least("z", "HBN >= BN at B = 2", 0.1, 1.0, noise=0.28), "hbn-tab1")]
    fig1 = [dataclasses.replace(c, why=f"{c.why}; {shared}; one seed") for c in fig1]
    results = {
        "hbn-fig1": _result("hbn-fig1", fig1),
        "hbn-tab1": _result("hbn-tab1", [E.at_least(HEADLINES[5].claim, "HBN best", 97.77766666666666, 1.0)],
                            deviations=["CIFAR-10 -> Q-DIG (embedded digits)"]),
    }
    for eid, r in results.items():
        (figures / eid).mkdir(parents=True)
        (figures / f"{eid}.png").write_bytes(png)
        (figures / eid / "result.json").write_text(json.dumps(r.to_dict()))
    monkeypatch.setattr(bnfl_docs, "ROOT", tmp_path)
    monkeypatch.setattr(bnfl_docs, "GEN", tmp_path / "gen")
    bnfl_docs.generate_reproductions(set())
    out = tmp_path / "gen" / "reproductions"
    index = (out / "index.md").read_text()
    assert index.index(":::{note}") < index.index("## Headline claims") < index.index("## Entries by paper")
    assert "Q-DIG" in index.split(":::")[1] and "Why, row by row:" in index
    row = next(line for line in index.splitlines() if line.startswith("| 6 |"))
    assert row.count(" | ") == 5, "six columns on the narrow docs page"
    assert f"**HBN**: {HEADLINES[5].topic} ({{ref}}`hbn-tab1 <repro-hbn-tab1>`)" in row
    assert f"97.78 pts; threshold {HEADLINES[5].threshold_reason}" in row and "| Q-DIG/Q-SCNN |" in row
    assert "| REPRODUCED |" in row
    assert "Key: a reproduction cell counts its claims by verdict word" in (out / "hbn.md").read_text()
    hbn = (out / "hbn.md").read_text()
    assert hbn.startswith("# HBN: Hybrid Batch Normalisation\n\n**2 entries; counted reproduction claims: 1 reproduced, "
                          "2 contradicted.**")  # opens with it
    assert hbn.index("## Verdicts") < hbn.index("(repro-hbn-fig1)=") < hbn.index("(repro-hbn-tab1)=")
    assert "reproduction: 1 reproduced, 2 contradicted" in hbn  # the linked claim is shown, counted in hbn-tab1 only
    headings = [line for line in hbn.splitlines() if line.startswith("#")]
    assert not [h for h in headings if re.search(r"artifact|in the text|\d\.\d{5}", h)], headings
    heading = next(line for line in hbn.splitlines() if line.startswith("## `hbn-fig1`"))
    assert heading == f"## `hbn-fig1`: {E.get('hbn-fig1').title} (quick profile on stand-in data: Q-DIG)"
    assert '*About the paper\'s text:* "16161616" in the text is a conversion artifact.' in hbn  # moved into text
    assert "(B = 16) and (b)" in hbn  # the setting keeps its own clause
    assert "97.78" in hbn and "97.7776" not in hbn
    assert "Why, by check:" in hbn and "| why |" not in hbn
    whys = hbn.split("Why, by check:")[1].split("\n\n")[1].splitlines()
    assert whys[-1] == f"- checks 1-3: {shared}; one seed" and hbn.count(shared) == 1  # said once
    assert all(len(w) < 200 for w in whys), whys
    assert "*(re-reads {ref}`hbn-tab1 <repro-hbn-tab1>`; counted there)*" in hbn


def test_split_note_keeps_the_setting_and_moves_notes_about_the_text():
    t = 'Error (a) against phi (B = 16; "16161616" in the text is a conversion artifact) and (b) B (phi = 0.6)'
    assert D.split_note(t) == ("Error (a) against phi (B = 16) and (b) B (phi = 0.6)",
                               ['"16161616" in the text is a conversion artifact'])
    assert D.split_note("Accuracy (typo in the text: 0.06)") == ("Accuracy", ["typo in the text: 0.06"])
    assert D.split_note("Table 2 (phi = 0.6)") == ("Table 2 (phi = 0.6)", [])


def test_why_lines_say_a_shared_reason_once_and_number_each_checks_own():
    whys = ["measured 9.16666 misses 7.94; proxy (a; b); one seed", None,
            "margin -0.111 is not larger than the noise; proxy (a; b); one seed", "late; one seed"]
    assert D.why_lines(whys) == ["1. measured 9.17 misses 7.94", "3. margin -0.111 is not larger than the noise",
                                 "4. late", "checks 1, 3: proxy (a; b)", "checks 1, 3, 4: one seed"]
    assert D.why_lines([None, ""]) == []
    assert D.why_lines(["a", "b", "c; d", "c; d"]) == ["1. a", "2. b", "checks 3, 4: c; d"]


def test_titles_name_the_stand_in_where_quick_numbers_come_from_a_proxy():
    for eid in E.ids():
        entry = E.get(eid)
        names = D.stand_ins_of(entry)
        if entry.kind != "training" or entry.paper == "bench":
            assert names == [], eid
            continue
        assert names, f"{eid}: the quick profile trains on the paper's own data?"
        assert D.stand_in_title(entry.title, names).endswith(f"(quick profile on stand-in data: {', '.join(names)})")
    assert D.stand_ins_of(E.get("fedtan-fig7")) == ["Q-GAUSS(C)"]
    assert D.stand_ins_of(E.get("fedbn-tab1")) == ["Q-DOM", "Q-ABIDE"]
    assert D.stand_in_title("t", []) == "t"


def test_report_links_a_re_read_claim_rounds_and_lists_whys_under_each_table(tmp_path):
    from bnfl.experiments.report import claims_table, write_report

    own = E.at_least("gap", "FedBN beats FedAvg", 2.3456789, 0.0)
    again = linked(dataclasses.replace(E.at_least("gap", "FedBN beats FedAvg", 97.77766666666666, 99.0, noise=0.3),
                                       why="short; one seed"), "fedbn-tab11")
    results = [_result("fedbn-tab11", [own]), _result("fedbn-fig5", [again], deviations=["digits -> Q-DOM, lambda 0.012345678"],
                                                      notes=["ratio 1.3333333333"])]
    table = claims_table(results[1])
    assert "| why |" not in table and "97.78" in table and "97.7776" not in table
    assert "| 1. FedBN beats FedAvg *(re-reads [fedbn-tab11](#fedbn-tab11); counted there)* |" in table
    assert table.rstrip().endswith("Why, by check:\n\n- 1. short; one seed")
    text = write_report(results, tmp_path / "REPORT.md").read_text()
    assert "Counted reproduction claims: 1 reproduced;" in text
    assert "| FedBN | 1/0/0/0/0/0 |" in text  # counts by kind: the re-read claim counts in fedbn-tab11 only
    assert "## Claims not reproduced" not in text  # the re-read claim is listed where it counts: it passes there
    assert "**title of fedbn-fig5 (quick profile on stand-in data: Q-DOM)**" in text
    assert "- digits -> Q-DOM, lambda 0.0123" in text and "- ratio 1.33" in text
    assert not re.search(r"\d\.\d{5}", text.split("Generated ")[0] + text.split("## Entries by paper")[1])


def test_ours_shows_the_signed_estimate_of_an_equivalence_claim():
    """An equivalence claim stores |difference| as its measured value; the table shows the signed
    estimate its interval is centred on (row 3 once read +0.11 [-0.83, 0.60])."""
    from types import SimpleNamespace

    claim = SimpleNamespace(measured=0.11, interval={"estimate": -0.11, "low": -0.83, "high": 0.60, "n": 5})
    assert D._ours(claim).startswith("-0.11 [-0.83, 0.60]")
