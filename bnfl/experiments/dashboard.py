"""What a reader sees first: the headline table, claim counts by kind, entries grouped by paper.

Shared by ``REPORT.md`` (:func:`bnfl.experiments.report.write_report`) and the docs' reproductions
index (``docs/_ext/bnfl_docs.py``). Everything here reads stored results and never changes them:
numbers are rounded for display only (:func:`display_number`, :func:`round_numbers`). Titles and
whys as a reader sees them (:func:`split_note`, :func:`stand_in_title`, :func:`why_lines`) are
:mod:`bnfl.experiments.titles`, handed on here.

Claim kinds. A stored claim is ``reproduction``, ``structural`` or ``consistency``
(:data:`bnfl.experiments._claim.KINDS`). A claim declared ``structural`` (arithmetic, counts, constants) is
counted as such wherever it stands, also inside an entry that trains. A ``reproduction`` claim is counted
as ``reproduction`` when it stores an interval over seeds (a seeded measurement, also one trained outside
the FL engine) or its entry records training runs; otherwise (``result.runs`` empty: constants,
parameter counts, arithmetic) as ``structural``; the stored kind is unchanged.
:func:`missing_intervals` lists the counted reproduction claims with a verdict but no interval.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bnfl.display import display_number, display_value, round_numbers
from bnfl.experiments import counting
from bnfl.experiments.headlines import HEADLINES, STAND_INS, Headline, StandIn
from bnfl.experiments.protocols import amendments_markdown, protocol_cell
from bnfl.experiments.titles import (
    _clauses,
    data_names,
    split_note,
    stand_in_title,
    stand_ins_of,
    why_lines,
)
from bnfl.experiments.verdicts import (
    NOT_TESTABLE,
    STAND_IN_DEPENDENT,
    WORDS,
    Verdict,
    across_stand_ins,
)
from bnfl.experiments.vocabulary import PAPER_NAMES, PAPER_ORDER, VERDICT_MARKS, paper_title

__all__ = [
    "COUNT_KINDS",
    "PAPER_NAMES",
    "PAPER_ORDER",
    "claim_kind",
    "counts_markdown",
    "data_names",
    "display_number",
    "display_value",
    "entries_markdown",
    "entry_order",
    "find_claim",
    "headline_markdown",
    "headline_rows",
    "headline_verdict",
    "headline_word_counts",
    "kind_counts",
    "missing_intervals",
    "natural_key",
    "no_interval_claims",
    "paper_pairs",
    "round_numbers",
    "split_note",
    "stand_in_banner",
    "stand_in_title",
    "stand_ins_of",
    "stand_ins_used",
    "why_lines",
]

#: The kinds :func:`claim_kind` counts apart.
COUNT_KINDS: tuple[str, ...] = ("reproduction", "structural", "consistency")
_VERDICTS = ("pass", "fail", "inconclusive", "info")


def natural_key(text: str) -> tuple[tuple[int, Any], ...]:
    """Sort key that orders digit runs by value: ``"fig2" < "fig10"``, ``"tab1" < "tabD"``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in re.split(r"(\d+)", str(text)) if part)


def entry_order(eid: str) -> tuple[Any, ...]:
    """Sort key of an entry id: paper (:data:`PAPER_ORDER`, unknown papers after), then figures before
    tables before anything else, then natural order (``fig2`` before ``fig10``)."""
    paper, _, rest = eid.partition("-")
    rank = PAPER_ORDER.index(paper) if paper in PAPER_ORDER else len(PAPER_ORDER)
    kind = 0 if rest.startswith("fig") else 1 if rest.startswith("tab") else 2
    return (rank, paper, kind, natural_key(rest))


def claim_kind(result: Any, claim: Any) -> str:
    """``"consistency"`` for a paper-vs-paper check; ``"structural"`` for a claim declared so, a
    reproduction claim without an interval in an entry that trains nothing (its result records no
    training runs), or one whose seeds all give the same value (:mod:`bnfl.experiments.counting`);
    else ``"reproduction"`` (a trained claim, or any claim with an interval over seeds)."""
    return counting.standing(result, claim).kind


_JUDGED = ("pass", "fail", "inconclusive")


def _counted_trained(results: Iterable[Any]) -> list[tuple[Any, Any]]:
    return [(r, c) for r in results for c in r.claims for s in [counting.standing(r, c)]
            if s.counted and c.verdict in _JUDGED and s.kind == "reproduction"]


def missing_intervals(results: Iterable[Any]) -> list[tuple[str, str]]:
    """``(entry id, claim name)`` of every counted reproduction claim (:func:`claim_kind`) with a
    verdict (pass, fail or inconclusive) that stores no interval: neither a 95% interval over seeds
    nor the record of why none can exist (:func:`bnfl.experiments._claim.no_interval`: a run
    diverged, a target was never reached). Linked claims (``counted_in``), ``info`` claims and
    structural / consistency checks are not asked for one. Issue 25's target: none."""
    return [(r.id, c.name) for r, c in _counted_trained(results) if not getattr(c, "interval", None)]


def no_interval_claims(results: Iterable[Any]) -> list[tuple[str, str, str]]:
    """``(entry id, claim name, reason)`` of every counted reproduction claim whose runs give no
    interval and which says why (``Claim.interval["no_interval"]``: ``"diverged"``, ...)."""
    return [(r.id, c.name, str(c.interval["no_interval"])) for r, c in _counted_trained(results)
            if isinstance(getattr(c, "interval", None), Mapping) and "no_interval" in c.interval]


#: What :func:`kind_counts` counts per kind: the verdict words for reproduction claims (a claim has one
#: stand-in: "stand-in dependent" is a headline row's word), pass/fail for checks.
KIND_KEYS: dict[str, tuple[str, ...]] = {"reproduction": (*(w for w in WORDS if w != STAND_IN_DEPENDENT), "info"),
                                         "structural": _VERDICTS, "consistency": _VERDICTS}


def kind_counts(results: Iterable[Any]) -> dict[str, dict[str, dict[str, int]]]:
    """``{paper: {kind: {word or verdict: count}}}`` over the counted claims of ``results``
    (:mod:`bnfl.experiments.counting`): a reproduction claim by its verdict word
    (:func:`~bnfl.experiments.counting.claim_word`), a structural or consistency check by pass/fail."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in results:
        paper = r.id.split("-", 1)[0]
        per = out.setdefault(paper, {k: dict.fromkeys(KIND_KEYS[k], 0) for k in COUNT_KINDS})
        for c in r.claims:
            s = counting.standing(r, c)
            if s.counted:  # a reported-only claim counts where its measurement counts
                w = counting.claim_word(r, c) if s.kind == "reproduction" else None
                per[s.kind][w.word if w is not None else s.verdict] += 1
    return out


def find_claim(results: Mapping[str, Any], headline: Headline) -> Any | None:
    """The stored claim a headline names, or ``None`` when its entry has no result or no such claim."""
    result = results.get(headline.entry)
    if result is None:
        return None
    return next((c for c in result.claims if c.name == headline.claim), None)


def _unit(headline: Headline | None) -> str:
    units = headline.units if headline is not None else "pts"
    return {"pts": " pts", "share": "", "solvers": " solvers"}.get(units, f" {units}")


def _ours(claim: Any, headline: Headline | None = None) -> str:
    iv = getattr(claim, "interval", None)
    unit = _unit(headline)
    if iv and iv.get("low") is not None:
        n = iv.get("n")
        est = iv.get("estimate", claim.measured)  # signed; an equivalence claim's measured is |difference|
        return (f"{est:+.2f} [{iv['low']:.2f}, {iv['high']:.2f}]{unit} (95% CI"
                + (f", {n} seeds)" if n else ")"))
    if claim.measured is None:
        return "–"
    if iv and "items" in iv:  # a count over items, each judged by its own interval: a whole number
        return f"{int(round(claim.measured))} of {len(iv['items'])}{unit}"
    if claim.noise:
        return f"{display_number(claim.measured)} ± {display_number(claim.noise)}{unit} (noise)"
    return display_number(claim.measured) + unit


def _one_line(text: str) -> str:
    """``text`` on one line with long decimals rounded, whole (never cut)."""
    return " ".join(round_numbers(text, digits=3).split())


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


#: The clauses of a stored why that only restate the interval against the threshold (the verdict
#: word's reason says that now); the rest (what the stand-in does) is kept.
_GENERIC_WHY = re.compile(r"^(the [-+]?\d[^ ]* \[|no step violates|the smallest effect|about \d+ seeds|more than 10,000"
                          r"|\d+ hold by their intervals|\d+ of \d+ hold|\d+ needed$)")


def _own_why(claim: Any) -> str:
    """The clauses of the claim's stored why that explain the stand-in (not the interval arithmetic)."""
    return "; ".join(c for c in _clauses(claim.why or "") if not _GENERIC_WHY.match(c.strip()))


def headline_verdict(results: Mapping[str, Any], headline: Headline) -> Verdict | None:
    """The verdict word of a headline (:func:`bnfl.experiments.verdicts.judge_claim`) from the stored
    claim, with its precondition's claim of the same entry where the headline names one; with other
    stand-ins (:attr:`Headline.others`), the word they all say, or *stand-in dependent*
    (:func:`bnfl.experiments.verdicts.across_stand_ins`); ``None`` when no stored result has the claim."""
    c = find_claim(results, headline)
    if c is None or c.verdict == "info":
        return None
    words = stand_in_words(results, headline)
    return across_stand_ins(words) if words else counting.claim_word(results[headline.entry], c)


def stand_in_words(results: Mapping[str, Any], headline: Headline) -> dict[str, Verdict]:
    """``{stand-in: its verdict}`` of a headline measured on several stand-ins (the row's own first;
    a stand-in whose claim the stored result lacks is left out); empty for a one-stand-in row."""
    if not headline.others or headline.entry not in results:
        return {}
    r = results[headline.entry]
    claims = {c.name: c for c in r.claims}
    out = {}
    for name, where in ((headline.claim, headline.stand_in), *((o.claim, o.stand_in) for o in headline.others)):
        c = claims.get(name)
        w = counting.claim_word(r, c) if c is not None and c.verdict != "info" else None
        if w is not None:
            out[_short_stand_in(where)] = w
    return out


def _others_note(results: Mapping[str, Any], h: Headline) -> str:
    """The claim on the row's other stand-ins, each with its interval and word (the row's "ours" is
    its first stand-in's)."""
    if not h.others or h.entry not in results:
        return ""
    claims = {c.name: c for c in results[h.entry].claims}
    words = stand_in_words(results, h)
    said = [f"{_short_stand_in(o.stand_in)} {_ours(claims[o.claim], h)}, "
            f"{words[_short_stand_in(o.stand_in)].text if _short_stand_in(o.stand_in) in words else 'no verdict'}"
            for o in h.others if o.claim in claims]
    missing = [_short_stand_in(o.stand_in) for o in h.others if o.claim not in claims]
    text = ("On the other stand-in" + ("s" if len(said) > 1 else "") + ": " + "; ".join(said) + ".") if said else ""
    if missing:
        text += f" The stored result has no claim on {', '.join(missing)}."
    return text.strip()


def _short_stand_in(text: str) -> str:
    """A stand-in's name without its description in brackets (``"MNIST-5K"``)."""
    return text.split(" (", 1)[0]


def _precondition_note(results: Mapping[str, Any], h: Headline, verdict: Verdict) -> str:
    pre = h.precondition
    if pre is None or verdict.word == NOT_TESTABLE:
        return ""
    if pre.claim is None:
        return (f"Precondition not measured with this entry's runs ({pre.what}): the verdict rests on this "
                "claim's numbers alone" + (f"; {pre.elsewhere} measures it" if pre.elsewhere else "") + ".")
    pc = next((x for x in results[h.entry].claims if x.name == pre.claim), None)
    iv = getattr(pc, "interval", None) or {}
    if pc is None:
        return f"Precondition ({pre.what}): {h.entry} has no claim {pre.claim!r} to judge it by."
    if iv.get("low") is None:
        return f"Precondition ({pre.what}): claim {pre.claim!r} of {h.entry} stores no interval to judge it by."
    text = (f"Precondition held: {pre.label} {iv['estimate']:+.2f} [{iv['low']:.2f}, {iv['high']:.2f}] pts "
            f"({pre.claim}).")
    c = find_claim(results, h)
    if h.repair and c is not None and c.measured is not None and iv["estimate"] > 0:
        text += f" The fix repairs {c.measured / iv['estimate']:.0%} of it (ratio of the means)."
    return text


def _paper_note(claim: Any, h: Headline) -> str:
    """Where the paper's own effect (same quantity, the paper's data) lies outside our interval."""
    iv = getattr(claim, "interval", None) or {}
    if h.paper_value is None or iv.get("low") is None or iv.get("side") == "within":
        return ""
    if iv["low"] <= h.paper_value <= iv["high"]:
        return ""
    return (f"The interval excludes the paper's own effect ({h.paper_value:+.2f}{_unit(h)}, on the paper's data)"
            ".")


def headline_rows(results: Mapping[str, Any], headlines: Sequence[Headline] = HEADLINES) -> list[dict[str, str]]:
    """One row per headline: paper, claim, the paper's effect, ours (interval with units),
    threshold (with its reason), stand-in, verdict (:mod:`bnfl.experiments.verdicts`' words:
    reproduced / contradicted / smaller than claimed / undecided / not testable here), entry, and
    the why, whole: the verdict's reason, what the stand-in does (the claim's own why), the
    precondition and, for a repair, the fraction of the damage repaired."""
    rows: list[dict[str, str]] = []
    measured: dict[tuple, int] = {}  # one measurement (the claim that counts it) -> its first row
    for h in headlines:
        c = find_claim(results, h)
        row = {"paper": paper_title(h.paper), "claim": h.topic,
               "paper's effect": h.paper_effect + (f" (tested here: {h.tested})" if h.tested else "")}
        if c is None:
            row.update({"ours": "–", "threshold": "–", "stand-in (quick)": h.stand_in, "verdict": "not run",
                        "word": "not run", "entry": h.entry, "why": f"No stored result has claim {h.claim!r}."})
            rows.append(row)
            continue
        v = headline_verdict(results, h)
        # no word: a claim whose seeds all give one value is a structural check (counting.standing),
        # pass/fail labelled as such, and counted in the summary under that name
        standing = counting.standing(results[h.entry], c)
        checked = v is None and standing.kind == "structural"
        t = "–" if c.threshold is None else f"{display_number(c.threshold)}{_unit(h)}"
        stored = getattr(c, "interval", None) or {}
        plain = not stored.get("low") and "items" not in stored  # no interval: the numbers behind it
        parts = [_sentence(v.reason) if v is not None else "", _sentence(c.detail) if plain else "",
                 _others_note(results, h), _paper_note(c, h), _sentence(_own_why(c)),
                 _precondition_note(results, h, v) if v is not None else "",
                 _sentence(f"A structural check, not a verdict word: {standing.note}") if checked else ""]
        row.update({"ours": _ours(c, h), "threshold": t, "threshold_reason": h.threshold_reason,
                    "stand-in (quick)": "; ".join([h.stand_in, *(o.stand_in for o in h.others)]),
                    "verdict": (v.text.upper() if v is not None else
                                f"{VERDICT_MARKS[c.verdict]} (STRUCTURAL CHECK)" if checked else VERDICT_MARKS[c.verdict]),
                    "word": v.word if v is not None else STRUCTURAL_WORD if checked else c.verdict, "entry": h.entry,
                    "protocol": protocol_cell(h, results.get(h.entry)),
                    "why": _one_line(" ".join(p for p in parts if p))})
        link = standing.link
        key = (link[0] or h.entry, link[1]) if link is not None and link[1] is not None else (h.entry, h.claim)
        if key in measured:  # two statements about one measurement: counted once
            row["same_as"] = str(measured[key] + 1)
            row["why"] = _one_line(f"{row['why']} One measurement with row {measured[key] + 1} "
                                   f"({standing.note}): counted once, there.")
        else:
            measured[key] = len(rows)
        rows.append(row)
    return rows


#: The word of a headline row whose claim is a structural check (every seed gives one value), in the
#: row and in the summary's counts (:func:`headline_word_counts`).
STRUCTURAL_WORD = "structural check"


def headline_word_counts(results: Mapping[str, Any], headlines: Sequence[Headline] = HEADLINES) -> dict[str, int]:
    """``{verdict word: rows}`` of the headline table, in :data:`bnfl.experiments.verdicts.WORDS` order
    (words no row has are left out; ``"not run"`` for a headline without a stored claim). A row that
    re-reads another row's measurement (``same_as``: the same entry, seeds and per-seed values under
    another threshold) is not counted again."""
    words = [r["word"] for r in headline_rows(results, headlines) if "same_as" not in r]
    return {w: words.count(w) for w in (*WORDS, STRUCTURAL_WORD, "not run") if w in words}


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(rows: Sequence[Mapping[str, Any]], cols: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return lines


def headline_markdown(results: Mapping[str, Any], *, why: str = "column",
                      link: Callable[[str], str] | None = None,
                      headlines: Sequence[Headline] = HEADLINES) -> str:
    """The headline table as markdown. ``why="column"`` puts the one-line why in the table (REPORT.md);
    ``why="below"`` (the docs) lists the whys under a six-column table (the entry inside the claim
    cell, the threshold beside ours, the stand-in by its short name). ``link(entry id)``
    gives the markdown of the entry cell (a link; the bare id when ``None``)."""
    if why not in ("column", "below"):
        raise ValueError(f"why must be 'column' or 'below', got {why!r}")
    rows = headline_rows(results, headlines)
    for i, r in enumerate(rows, 1):
        r["#"] = str(i)
        r["verdict"] = f"**{r['verdict']}**" if r["word"] not in ("reproduced", "pass", "not run", "info") else r["verdict"]
        if r.get("threshold_reason"):  # the reason starts with the threshold itself
            r["threshold"] = r["threshold_reason"]
        if link is not None:
            r["entry"] = link(r["entry"])
    cols = ["#", "paper", "claim", "paper's effect", "ours", "threshold", "stand-in (quick)", "verdict", "entry"]
    amended = amendments_markdown([(n, h) for n, h in enumerate(headlines, 1)])
    amended = ["", "Protocol amendments (`figures/PROTOCOL-LOG.json`; the protocol column names the hash of each "
               "row's declaration, `bnfl.experiments.protocols`):", "", amended] if amended else []
    if why == "column":
        return "\n".join(_table(rows, [*cols, "protocol", "why"]) + amended) + "\n"
    for r in rows:  # narrow pages: six columns, the stand-in by its short name (the banner explains it)
        r["claim"] = f"**{r['paper']}**: {r['claim']} ({r['entry']})"
        r["ours (threshold)"] = f"{r['ours']}; threshold {r['threshold']}"
        r["stand-in"] = r["stand-in (quick)"].split(" (")[0]
    lines = _table(rows, ["#", "claim", "paper's effect", "ours (threshold)", "stand-in", "verdict"])
    lines += ["", "Why, row by row:", ""]
    lines += [f"{r['#']}. {r['why']} Protocol: {r.get('protocol', '–')}." for r in rows]
    return "\n".join(lines + amended) + "\n"


def counts_markdown(results: Iterable[Any]) -> str:
    """Counted claims per paper and kind: reproduction claims by their verdict words
    (reproduced/contradicted/smaller than claimed/undecided/not testable here/info), structural and
    consistency checks as pass/fail/inconclusive/info."""
    counts = kind_counts(results)
    heads = {"reproduction": "reproduction (reproduced/contradicted/smaller/undecided/not testable/info)",
             "structural": "structural checks (pass/fail/inconcl./info)",
             "consistency": "consistency checks (pass/fail/inconcl./info)"}
    lines = ["| paper | " + " | ".join(heads[k] for k in COUNT_KINDS) + " |",
             "|---|" + "---|" * len(COUNT_KINDS)]
    for paper in sorted(counts, key=lambda p: entry_order(p + "-")):
        cells = ["/".join(str(counts[paper][k][v]) for v in KIND_KEYS[k]) for k in COUNT_KINDS]
        lines.append(f"| {paper_title(paper)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_NUMBER = re.compile(r"\s*[-+]?\d+(?:\.\d+)?")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) or (isinstance(v, str) and bool(_NUMBER.match(v)))


def _show(v: Any) -> str:
    return display_number(v) if isinstance(v, float) else round_numbers(str(v))


def paper_pairs(result: Any) -> list[tuple[str, str, str, str]]:
    """The paper's numbers beside ours, where the result stores both: ``(row label, column, paper,
    ours)``. Rows that carry ``"<col> paper"`` beside ``"<col> ours"`` give those pairs; otherwise a
    paper row is matched to our row with the same text labels (method, setting, ...) and every column
    both hold a number in is paired."""
    pairs: list[tuple[str, str, str, str]] = []
    for r in result.rows:
        label = ", ".join(str(v) for k, v in r.items() if isinstance(v, str) and v.strip() and not _is_number(v)
                          and not k.endswith((" paper", " ours")))
        for k, v in r.items():
            if k.endswith(" paper") and k[:-6] + " ours" in r and _is_number(v) and _is_number(r[k[:-6] + " ours"]):
                pairs.append((label, k[:-6], _show(v), _show(r[k[:-6] + " ours"])))
    if pairs:
        return pairs
    for p in result.paper:
        for r in result.rows:
            labels = [k for k, v in p.items() if k in r and isinstance(v, str) and v.strip() and not _is_number(v)
                      and isinstance(r[k], str) and not _is_number(r[k])]
            if not labels or any(p[k] != r[k] for k in labels):
                continue
            label = ", ".join(str(p[k]) for k in labels)
            pairs += [(label, k, _show(v), _show(r[k])) for k, v in p.items()
                      if k not in labels and k in r and _is_number(v) and _is_number(r[k])]
            break
    return pairs


def _counts_cell(result: Any) -> str:
    per = kind_counts([result]).get(result.id.split("-", 1)[0], {})
    parts = []
    for k in COUNT_KINDS:
        n = per.get(k, {})
        if sum(n.values()):
            parts.append(f"{k[:5]}. " + "/".join(str(n[v]) for v in KIND_KEYS[k]))
    return "; ".join(parts) or "–"


def entries_markdown(results: Iterable[Any], *, link: Callable[[str], str] | None = None,
                     heading: str | None = "###") -> str:
    """The entries grouped by paper (:data:`PAPER_ORDER`), in figure order (figures then tables,
    natural order), one table per paper: verdict, claims by kind (pass/fail/inconclusive/info),
    seeds, and the first of the paper's numbers beside ours (:func:`paper_pairs`). ``link(id)`` gives
    the markdown of an entry cell; ``heading`` the markdown heading level of each paper's name
    (``None``: no heading, for one paper's page)."""
    by_paper: dict[str, list[Any]] = {}
    for r in sorted(results, key=lambda r: entry_order(r.id)):
        by_paper.setdefault(r.id.split("-", 1)[0], []).append(r)
    lines: list[str] = []
    for paper, group in by_paper.items():
        if heading:
            lines += [f"{heading} {paper_title(paper)}", ""]
        rows = []
        for r in group:
            pairs = paper_pairs(r)
            first = (f"{pairs[0][2]} / {pairs[0][3]} ({pairs[0][0]}{', ' if pairs[0][0] else ''}{pairs[0][1]})"
                     if pairs else "–")
            rows.append({"entry": link(r.id) if link else r.id, "title": r.title,
                         "verdict": counting.entry_verdict(r), "claims by kind": _counts_cell(r),
                         "seeds": str(len(r.seeds)), "paper / ours": first})
        lines += _table(rows, ["entry", "title", "verdict", "claims by kind", "seeds", "paper / ours"]) + [""]
    return "\n".join(lines)


def stand_ins_used(results: Iterable[Any], table: Sequence[StandIn] = STAND_INS) -> list[StandIn]:
    """The stand-ins of ``table`` that some result names (in its deviations, notes, rows or config)."""
    text = " ".join(str([r.deviations, r.notes, r.config, r.rows]) for r in results)
    return [s for s in table if re.search(re.escape(s.name.split("(")[0]) + r"(?![A-Z])", text)]


def stand_in_banner(results: Iterable[Any]) -> str:
    """A one-paragraph notice that quick numbers come from stand-in data, naming each stand-in."""
    used = stand_ins_used(list(results))
    if not used:
        return ""
    items = "; ".join(f"**{s.name}**, {s.what}, for {s.replaces}" for s in used)
    return ("**The quick profile trains on stand-in data, not on the papers' data sets.** Titles name the "
            "paper's setting and, in brackets, the stand-in its quick numbers come from: "
            f"{items}. Compare directions and gaps with the paper's, not absolute accuracies.\n")
