"""The headline effects as one picture: a forest plot that opens ``REPORT.md`` and the dashboard.

One row per headline claim (:data:`bnfl.experiments.headlines.HEADLINES`), drawn by
:func:`bnfl.plots.forest`: the stored 95% interval over seeds and its estimate, coloured by the
verdict word (:mod:`bnfl.experiments.verdicts`), the claim's threshold as a black tick (two ticks
for an equivalence band) and the paper's own effect (the same quantity on the paper's data) as a
hollow diamond where the headline states one. Accuracy differences (points) and shares are drawn
on two panels, each on its own scale; a count over items (HBN Table 4's solvers) is drawn as its
items, each a difference in points. Nothing is computed: every number is read from ``result.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.lines import Line2D

from bnfl.experiments.dashboard import find_claim, headline_verdict, stand_in_words
from bnfl.experiments.headlines import HEADLINES, Headline
from bnfl.experiments.verdicts import (
    CONTRADICTED,
    NOT_TESTABLE,
    REPRODUCED,
    SMALLER,
    STAND_IN_DEPENDENT,
    UNDECIDED,
    judge_claim_record,
)
from bnfl.experiments.vocabulary import paper_title
from bnfl.plots import forest, new_figure

__all__ = ["FOREST_ID", "WORD_COLORS", "forest_items", "headline_forest"]

#: The file stem the report writes the plot under (``<out>/headline-forest.png``).
FOREST_ID = "headline-forest"

#: Colour of each verdict word (Okabe-Ito, as bnfl's method colours).
WORD_COLORS: dict[str, str] = {REPRODUCED: "#009E73", CONTRADICTED: "#D55E00", SMALLER: "#E69F00",
                               UNDECIDED: "#0072B2", STAND_IN_DEPENDENT: "#CC79A7", NOT_TESTABLE: "#999999"}


def _label(text: str, width: int = 52) -> str:
    """An axis label, whole, wrapped at word boundaries onto lines of at most ``width`` characters."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False))


def forest_items(results: Mapping[str, Any], headlines: Sequence[Headline] = HEADLINES
                 ) -> dict[str, list[dict[str, Any]]]:
    """``{"pts": [...], "share": [...]}``: the rows :func:`bnfl.plots.forest` draws, in the headline
    table's order and numbering; headlines without a stored interval are left out."""
    out: dict[str, list[dict[str, Any]]] = {"pts": [], "share": []}
    for i, h in enumerate(headlines, 1):
        c = find_claim(results, h)
        v = headline_verdict(results, h)
        iv = getattr(c, "interval", None) or {}
        if c is None or v is None or not iv:
            continue
        label = _label(f"{i}. {h.topic}" if h.paper == "bench" else f"{i}. {paper_title(h.paper)}: {h.topic}")
        if "items" in iv and "low" not in iv:  # a count: its items, each judged on its own, on every stand-in
            claims = {x.name: x for x in results[h.entry].claims}
            for where, item in ((h.stand_in, c), *((o.stand_in, claims.get(o.claim)) for o in h.others)):
                at = f", {where.split(' (', 1)[0]}" if h.others else ""
                for name, rec in ((getattr(item, "interval", None) or {}).get("items") or {}).items():
                    if not rec or rec.get("low") is None:
                        continue
                    word = judge_claim_record(rec, null=h.null).word
                    if v.word == NOT_TESTABLE:
                        word = NOT_TESTABLE
                    out["pts"].append({"label": _label(f"{i}. {paper_title(h.paper)}: {h.topic}, {name}{at}"),
                                       "estimate": rec["estimate"], "low": rec["low"], "high": rec["high"],
                                       "threshold": _threshold(rec, None), "color": WORD_COLORS[word], "word": word})
            continue
        if iv.get("low") is None:
            continue
        panel = "share" if h.units == "share" else "pts"
        words = stand_in_words(results, h)
        claims = {x.name: x for x in results[h.entry].claims}
        # the row's own stand-in, then each other stand-in's interval in its own colour (the row's word
        # is the one they all say, or "stand-in dependent")
        for where, item in ((h.stand_in, c), *((o.stand_in, claims.get(o.claim)) for o in h.others)):
            rec = getattr(item, "interval", None) or {}
            if item is None or rec.get("low") is None:
                continue
            short = where.split(" (", 1)[0]
            word = words[short].word if short in words else v.word
            named = label if not h.others else _label(f"{i}. {paper_title(h.paper)}: {h.topic}, {short}")
            out[panel].append({"label": named,
                               "estimate": rec["estimate"], "low": rec["low"], "high": rec["high"],
                               "threshold": _threshold(rec, item.threshold), "paper": h.paper_value,
                               "color": WORD_COLORS[word], "word": word, "null": h.null})
    return out


def _threshold(rec: Mapping[str, Any], stored: Any) -> Any:
    """The threshold a stored interval is judged against: an equivalence band as ``(-tol, tol)``."""
    if rec.get("side") == "within":
        tol = float(rec.get("tolerance", abs(rec.get("threshold", 0.0))))
        return (-tol, tol)
    return rec.get("threshold", stored)


def headline_forest(results: Mapping[str, Any], headlines: Sequence[Headline] = HEADLINES) -> Any:
    """The forest plot of the headline effects (a matplotlib Figure; nothing written)."""
    items = forest_items(results, headlines)
    pts, share = items["pts"], items["share"]
    if not pts and not share:
        raise ValueError("no headline claim stores an interval: nothing to draw")
    panels = [(k, v) for k, v in (("pts", pts), ("share", share)) if v]
    fig, axes = new_figure(len(panels), 1, width=8.4, height=1.0, squeeze=False,
                           gridspec_kw={"height_ratios": [max(len(v), 1) for _, v in panels]})
    fig.set_size_inches(8.4, 0.34 * sum(len(v) for _, v in panels) + 2.0)
    for ax, (kind, rows) in zip(axes[:, 0], panels, strict=True):
        nulls = {r.get("null", 0.0) for r in rows}
        forest(ax, rows, null=nulls.pop() if len(nulls) == 1 else None,
               xlabel=("difference in accuracy points (ours: stand-in data; ◇ the paper, on its own data)"
                       if kind == "pts" else "share (of the BN gap closed; of rounds with the lower loss)"))
        ax.tick_params(axis="y", labelsize=7.5)
    words = [w for w in WORD_COLORS if any(r["word"] == w for _, rows in panels for r in rows)]
    handles = [Line2D([], [], color=WORD_COLORS[w], lw=5, alpha=0.7, label=w) for w in words]
    handles += [Line2D([], [], color="black", marker="|", ls="", ms=10, mew=1.6, label="threshold"),
                Line2D([], [], color="black", marker="D", mfc="none", ls="", ms=5.5, label="paper's effect")]
    axes[0, 0].legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=7.5)
    fig.suptitle("Headline effects: 95% intervals over seeds at the quick profile, coloured by verdict", fontsize=10)
    return fig
