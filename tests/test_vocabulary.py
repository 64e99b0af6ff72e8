"""The papers' names and the verdict marks are defined once, in :mod:`bnfl.experiments.vocabulary`.

Before issue 37 there were two paper-name tables (the dashboard's and the notebooks', already
different for the benchmark) and three verdict-mark tables. This test reads every Python file of
the package, the docs extension and the scripts, and fails on a dict literal that maps the paper
keys to their names or the verdicts to their marks anywhere else.
"""

from __future__ import annotations

import ast
from pathlib import Path

from bnfl.experiments import vocabulary

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "bnfl" / "experiments" / "vocabulary.py"


def _shown(node: ast.AST) -> str | None:
    """The text a table value shows: a string, or the first item of a tuple (``("PASS", colour)``)."""
    if isinstance(node, ast.Tuple) and node.elts:
        node = node.elts[0]
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def second_tables(path: Path) -> list[str]:
    """``file:line what`` for each dict literal in ``path`` that restates a vocabulary table."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Dict):
            continue
        pairs = {k.value: _shown(v) for k, v in zip(node.keys, node.values, strict=True)
                 if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        names = [k for k, v in pairs.items() if k in vocabulary.PAPER_NAMES and vocabulary.PAPER_NAMES[k] == v]
        marks = [k for k, v in pairs.items() if k in ("pass", "fail", "inconclusive") and vocabulary.VERDICT_MARKS[k] == v]
        if len(names) >= 3:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} paper names")
        if len(marks) >= 3:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} verdict marks")
    return out


def test_the_detector_sees_a_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    f = tmp_path / "x.py"
    f.write_text('A = {"fedtan": "FedTAN", "hbn": "HBN", "fedbn": "FedBN"}\n'
                 'B = {"pass": ("PASS", "#0f0"), "fail": ("FAIL", "#f00"), "inconclusive": ("INCONCLUSIVE", "")}\n'
                 'C = {"fedtan": "fedtan-tab1", "hbn": "hbn-fig3", "fedbn": "fedbn-tab3", "pass": 1}\n'
                 'D = {"fedtan": H("fedtan-tab1", "FedTAN"), "hbn": H("HBN"), "fedbn": H("FedBN")}\n')
    assert second_tables(f) == ["x.py:1 paper names", "x.py:2 verdict marks"]


def test_paper_names_and_verdict_marks_are_defined_once():
    files = [*(ROOT / "bnfl").rglob("*.py"), *(ROOT / "docs" / "_ext").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
    found = [hit for f in sorted(files) if f != HOME for hit in second_tables(f)]
    assert second_tables(HOME), "the detector no longer recognises the vocabulary's own tables"
    assert not found, "a second definition (use bnfl.experiments.vocabulary): " + "; ".join(found)


def test_the_summary_titles_read_as_before():
    assert [vocabulary.paper_title(k) for k in vocabulary.PAPER_ORDER] == [
        "FedTAN", "HBN", "FixBN", "FedBN", "Benchmark (no paper)"]
    assert vocabulary.paper_title("other") == "other"
