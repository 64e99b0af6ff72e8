"""What a reader sees first: the headline table, claim kinds, figure order, rounding (no training)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

import bnfl.experiments as E  # noqa: E402
from bnfl.experiments import dashboard as D  # noqa: E402
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
    assert counts["reproduction"]["pass"] == 1 and counts["structural"]["pass"] == 1
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
    assert f"[{D.display_number(iv['low'])}, {D.display_number(iv['high'])}] (95% CI)" in bench
    assert "| PASS |" in bench and h_interval.stand_in in bench and h_interval.paper_effect in bench
    tab1 = next(r for r in rows if h_noise.topic in r)
    assert "| 16.67 ± 5.50 (noise) |" in tab1 and "measured 16.67 >= 8.0" in tab1 and "16.6663" not in tab1
    assert "| not run |" in next(r for r in rows if h_missing.topic in r)
    assert "**The quick profile trains on stand-in data" in text and "**Q-DIG**" in text
    assert "## Claims by paper and kind" in text and "| Benchmark (no paper) | 1/0/0/0 |" in text
    grouped = text.split("## Entries by paper")[1]
    assert grouped.index("fedtan-fig2") < grouped.index("fedtan-fig10") < grouped.index("fedtan-tab1")
    assert grouped.index("### FedTAN") < grouped.index("### Benchmark (no paper)")
    assert "87.66 / 96.50 (FedTAN, acc)" in grouped
    assert "**The paper beside ours:**" in text


@pytest.fixture
def bnfl_docs():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    return bnfl_docs


def test_notebook_index_groups_by_paper_in_natural_order_with_the_benchmark_last(bnfl_docs):
    books = ["bench/bench-bn-fixes", "fedtan/fedtan-fig10", "theory/fedtan-bound", "fedtan/fedtan-tab1",
             "hbn/hbn-tab1", "fedtan/fedtan-fig2", "fedbn/fedbn-fig1"]
    groups = bnfl_docs.notebook_groups(books)
    assert [t for t, _ in groups] == ["FedTAN", "HBN", "FedBN", "Theory", "Benchmark (no paper)"]
    assert groups[0][1] == ["fedtan/fedtan-fig2", "fedtan/fedtan-fig10", "fedtan/fedtan-tab1"]


def test_docs_dashboard_and_paper_pages_from_a_small_results_folder(bnfl_docs, tmp_path, monkeypatch):
    figures = tmp_path / "figures"
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    results = {
        "hbn-fig1": _result("hbn-fig1", [E.at_least("x", "HBN >= BN", 0.2, 1.0, noise=0.28)]),
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
    assert "97.78; threshold 1.00" in row and "| Q-DIG-DIR |" in row and "| PASS |" in row
    hbn = (out / "hbn.md").read_text()
    assert hbn.index("## Verdicts") < hbn.index("(repro-hbn-fig1)=") < hbn.index("(repro-hbn-tab1)=")
    assert "**2 entries: 1 pass, 1 fail.**" in hbn
    heading = next(line for line in hbn.splitlines() if line.startswith("## `hbn-fig1`"))
    assert "artifact" not in heading and heading == f"## `hbn-fig1`: {E.get('hbn-fig1').title}"
    assert "conversion artifact" in hbn  # the catalog's note moved into the body
    assert "97.78" in hbn and "97.7776" not in hbn
    assert "Why, by check:" in hbn and "| why |" not in hbn
