"""The words every experiments report uses, defined once: the papers' names and the verdict marks.

The dashboard, REPORT.md, the notebooks, the forest plot and the docs read these; none keeps its
own copy (``tests/test_vocabulary.py`` looks for a second one).
"""

from __future__ import annotations

__all__ = ["NO_PAPER", "PAPER_NAMES", "PAPER_ORDER", "VERDICT_COLOURS", "VERDICT_MARKS", "WORD_COLOURS", "paper_title"]

#: Papers in the order reports show them; the benchmark (entries no paper has) comes last.
PAPER_ORDER: tuple[str, ...] = ("fedtan", "hbn", "fixbn", "fedbn", "bench")

#: Paper key -> its name (``bench``: the entries no paper has, :mod:`bnfl.experiments.benchmarks`).
PAPER_NAMES: dict[str, str] = {"fedtan": "FedTAN", "hbn": "HBN", "fixbn": "FixBN", "fedbn": "FedBN",
                               "bench": "Benchmark"}

#: The key of the entries that reproduce no paper.
NO_PAPER = "bench"

#: A claim's or an entry's verdict as a table shows it.
VERDICT_MARKS: dict[str, str] = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "info": "info",
                                 "n/a": "n/a"}

#: The colour of each verdict in the notebooks' claims table (CSS).
VERDICT_COLOURS: dict[str, str] = {"pass": "#1a7f37", "fail": "#cf222e", "inconclusive": "#9a6700", "info": "#57606a",
                                   "n/a": "#57606a"}


#: The colour of each verdict word of a reproduction claim (:data:`bnfl.experiments.verdicts.WORDS`).
WORD_COLOURS: dict[str, str] = {"reproduced": "#1a7f37", "contradicted": "#cf222e", "smaller than claimed": "#cf222e",
                                "undecided": "#9a6700", "not testable here": "#57606a"}


def paper_title(key: str) -> str:
    """The name a summary table gives a paper key: its name, the benchmark marked as reproducing
    no paper (``"Benchmark (no paper)"``), an unknown key as it is."""
    name = PAPER_NAMES.get(key, key)
    return f"{name} (no paper)" if key == NO_PAPER else name
