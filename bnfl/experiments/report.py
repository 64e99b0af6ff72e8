"""``REPORT.md``: every entry's figure, our numbers beside the paper's, claim verdicts, command."""

from __future__ import annotations

import datetime as _dt
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bnfl.experiments import counting
from bnfl.experiments.core import Result, labels_first
from bnfl.experiments.dashboard import (
    counts_markdown,
    display_value,
    entries_markdown,
    entry_order,
    headline_markdown,
    headline_rows,
    headline_word_counts,
    missing_intervals,
    no_interval_claims,
    paper_pairs,
    round_numbers,
    stand_in_banner,
    stand_in_title,
    stand_ins_of,
    why_lines,
)
from bnfl.experiments.forest import FOREST_ID, headline_forest
from bnfl.experiments.registry import get
from bnfl.experiments.verdicts import REPRODUCED, WORDS
from bnfl.experiments.vocabulary import VERDICT_MARKS
from bnfl.plots import save_figure

__all__ = ["HEADLINE_INTRO", "claim_counts", "claim_rows", "claims_table", "headline_words_line", "interval_text",
           "machine_line", "markdown_table", "write_report"]

#: What the headline table's verdict words mean (REPORT.md and the dashboard say it above the table).
HEADLINE_INTRO = (
    "The claims a reader of each paper remembers (declared in `bnfl/experiments/headlines.py`): the paper's "
    "effect, ours (the stored estimate and 95% interval over seeds, in the claim's units), the threshold and "
    "why it is what it is, the stand-in data set of the quick profile, the verdict and why. The verdict "
    "words (`bnfl/experiments/verdicts.py`) read the stored interval against the paper's statement: "
    "**reproduced**, the interval lies wholly on the paper's side of the threshold; **contradicted**, it lies "
    "wholly on the other side of no effect (0 unless the row says otherwise), or of a non-inferiority margin, "
    "or wholly outside an equivalence band; **smaller than claimed**, it lies short of a minimum-effect "
    "threshold without reversing the effect; **undecided**, it contains the threshold: which way the estimate "
    "leans (towards or against the paper) and about how many seeds would decide it at the observed per-seed "
    "spread; **not testable here**, the BN-only precondition measured in the same entry (the damage the fix "
    "repairs) is not there, with its interval; **stand-in dependent**, a row measured on several stand-ins "
    "whose testable stand-ins do not say the same word (each one's is listed; where they agree the row says "
    "that word); a row whose seeds all give one value is a **structural check** (pass or fail: no spread over "
    "seeds to judge). Where no claim of the entry measures the precondition, the why says so and the verdict "
    "rests on the interval alone.")


def headline_words_line(results: Mapping[str, Result]) -> str:
    """One sentence: how many headline measurements carry each verdict word, and which rows are
    merged because they read one measurement (so that the counts add up to every row)."""
    counts = headline_word_counts(results)
    if not counts:
        return ""
    rows = headline_rows(results)
    merged = [(i, r["same_as"]) for i, r in enumerate(rows, 1) if "same_as" in r]
    text = (f"Headline rows: {len(rows)} rows, {len(rows) - len(merged)} measurements: "
            + ", ".join(f"{n} {w}" for w, n in counts.items()))
    if merged:
        text += (" (" + " and ".join(f"row {i} reads row {j}'s measurement" for i, j in merged)
                 + ": each counted once, in the earlier row)")
    return text + "."


def machine_line(results: Sequence[Result]) -> str:
    """Where the stored numbers were computed: each distinct ``Result.machine`` (CPU, instruction set,
    Python, torch, numpy) with its entry count, entries without the record named as not recorded,
    and that another CPU gives other digits."""
    seen: dict[str, int] = {}
    missing = 0
    for r in results:
        m = getattr(r, "machine", None) or {}
        if not m:
            missing += 1
            continue
        key = ", ".join(f"{k} {m[k]}" for k in ("cpu", "torch_cpu_capability", "python", "torch", "numpy") if k in m)
        if "python" not in m:
            key += ", python not recorded"
        seen[key] = seen.get(key, 0) + 1
    parts = [f"{key} ({n} entr{'y' if n == 1 else 'ies'})" for key, n in seen.items()]
    if missing:
        parts.append(f"not recorded ({missing} entr{'y' if missing == 1 else 'ies'})")
    return ("**Machine.** The stored numbers were computed on: " + "; ".join(parts) + ". Training is bitwise "
            "reproducible on the same kind of machine; another CPU (another instruction set or vendor) rounds "
            "differently and gives other digits, now and then another verdict near a threshold. "
            "`bnfl compare <yours> <these>` says per claim whether two results folders agree within their "
            "intervals.")


#: The key of the claim counts by kind (REPORT.md, the dashboard, the paper pages).
COUNTS_KEY = ("Key: a reproduction cell counts its claims by verdict word, *reproduced/contradicted/smaller than "
              "claimed/undecided/not testable here/info*; a structural or consistency cell its checks as "
              "*pass/fail/inconclusive/info*. Each claim is counted once, in the entry that measures it (a claim "
              "that re-reads another's measurement, a common-rate twin of a tuned claim, a second threshold on the "
              "same per-seed values is shown and counted there: `bnfl/experiments/counting.py`); *repro.*, "
              "*struc.* and *consi.* in the entry tables are the reproduction, structural and consistency kinds. "
              "An entry's verdict counts the words of its counted reproduction claims.")


def _write_forest(results: Mapping[str, Result], out: Path) -> list[str]:
    """Write the headline forest plot beside REPORT.md; the markdown lines that show it (none when no
    headline claim stores an interval)."""
    try:
        fig = headline_forest(results)
    except ValueError:
        return []

    save_figure(fig, FOREST_ID, out_dir=out, provenance={"what": "headline forest plot, read from result.json"})
    plt.close(fig)
    return [f"![Headline effects: 95% intervals coloured by verdict]({FOREST_ID}.png)", ""]

_COUNTED = ("pass", "fail", "inconclusive", "info")


def _fmt(v: Any) -> str:
    """One table cell: numbers as a reader compares them (:func:`~bnfl.experiments.dashboard.display_value`),
    long decimals inside text rounded, lists joined."""
    if v is None or isinstance(v, float):
        return display_value(v)
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    return round_numbers(str(v)).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A GitHub-markdown table of ``rows`` (columns: union of keys, first-seen order)."""
    if not rows:
        return "_(none)_\n"
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def claims_table(result: Result, *, link: Callable[[str], str] | None = None) -> str:
    """The claim checks of ``result`` as a markdown table (numbered checks: verdict, measured,
    threshold, margin, noise, the numbers), and under it the checks' whys, one line each
    (:func:`~bnfl.experiments.dashboard.why_lines`). ``link`` as in :func:`claim_rows`."""
    rows = claim_rows(result, link=link)
    whys = [row.pop("why") for row in rows]
    for i, row in enumerate(rows, 1):
        row["check"] = f"{i}. {row['check']}"
    text = markdown_table(rows)
    lines = why_lines(whys)
    if lines:
        text += "\nWhy, by check:\n\n" + "".join(f"- {_fmt(line)}\n" for line in lines)
    return text


def interval_text(c: Any) -> str | None:
    """A claim's stored interval as ``"[low, high] (95% t, paired, 5 seeds; detects >= 0.9)"``, or
    ``None`` for a claim without one (:mod:`bnfl.experiments.interval_claims`)."""
    iv = getattr(c, "interval", None)
    if not iv:
        return None
    if "no_interval" in iv:  # no interval can exist (bnfl.experiments._claim.no_interval)
        bad = iv.get("diverged_seeds")
        return (f"none: {iv['no_interval']}" + (f" on seed(s) {', '.join(map(str, bad))}" if bad else "")
                + f" ({iv.get('finite', 0)} of {len(iv.get('values') or [])} seeds gave a number)")
    if "low" not in iv:  # a count over items, each judged by its own interval (evidence.count_of)
        items = iv.get("items") or {}
        return (f"{len(iv.get('passing') or [])} of {len(items)} hold by their own 95% intervals, "
                f"{len(iv.get('undecided') or [])} undecided ({iv.get('need')} needed)")
    kind = {True: "paired", False: "unpaired"}.get(iv.get("paired"), "one sample")
    text = (f"[{iv['low']:.2f}, {iv['high']:.2f}] ({round(100 * iv['level'])}% {iv['method']}, {kind}, "
            f"{iv['n']} seeds; detects >= {iv['detectable_effect']:.2f}")
    if c.verdict == "inconclusive":
        n = iv.get("seeds_to_decide")
        text += f"; ~{n} seeds to decide" if n is not None else "; > 10,000 seeds to decide"
    return text + ")"


def claim_rows(result: Result, *, link: Callable[[str], str] | None = None) -> list[dict[str, Any]]:
    """One row per claim of ``result`` (what :func:`claims_table` renders). A result with interval
    claims gets a ``95% interval`` column (results without keep their columns as they were).

    A claim that re-reads another entry's measurement (``Claim.counted_in``) says so and links that
    entry: ``link(entry id)`` gives the markdown of the link; default ``[id](#id)``, the entry's
    section in ``REPORT.md``."""
    link = link or (lambda eid: f"[{eid}](#{eid.lower()})")
    intervals = any(getattr(c, "interval", None) for c in result.claims)
    rows = []
    for c in result.claims:
        s = counting.standing(result, c)
        word = counting.claim_word(result, c)
        row = {
            "check": c.statement + ({"consistency": " *(consistency check)*", "structural": " *(structural check)*"}
                                    .get(s.kind, "")) + _standing_note(result, s, link),
            "verdict": word.text.upper() if word is not None else VERDICT_MARKS[s.verdict],
            "measured": c.measured,
            "threshold": c.threshold,
            "margin": c.margin,
            "noise": c.noise,
        }
        if intervals:
            row["95% interval"] = interval_text(c)
        row.update({"numbers": c.detail, "why": c.why})
        rows.append(row)
    return rows


def _standing_note(result: Result, s: counting.Standing, link: Callable[[str], str]) -> str:
    """What a claims table says after a claim's statement: where a reported-only claim counts, why a
    claim was re-kinded (:mod:`bnfl.experiments.counting`)."""
    if not s.note:
        return ""
    if s.link is not None and s.link[1] is None:  # re-reads another entry's measurement
        return f" *(re-reads {link(s.link[0])}; counted there)*"
    where = f", {link(s.link[0])}" if s.link is not None and s.link[0] != result.id else ""
    return f" *({'reported only: ' if not s.counted else ''}{s.note}{where})*"


def claim_counts(results: Sequence[Result]) -> dict[str, int]:
    """``{word or verdict: number of counted claims}`` over ``results``: the verdict words of the
    reproduction claims (:func:`bnfl.experiments.counting.claim_word`), then the checks' pass / fail /
    inconclusive and the ``info`` claims; a reported-only claim (:mod:`bnfl.experiments.counting`) is
    counted where its measurement is."""
    out = dict.fromkeys((*WORDS, *_COUNTED), 0)
    for r in results:
        for c in r.claims:
            s = counting.standing(r, c)
            if s.counted:
                w = counting.claim_word(r, c) if s.kind == "reproduction" else None
                out[w.word if w is not None else s.verdict] += 1
    return out


def _interval_line(results: Sequence[Result]) -> str:
    """How many counted reproduction claims store no interval (named), and which could have none."""
    missing, none = missing_intervals(results), no_interval_claims(results)
    text = (f"Counted reproduction claims with a verdict but no 95% interval: {len(missing)}"
            + (" (" + ", ".join(f"{e} `{n}`" for e, n in missing) + ")" if missing else "") + ".")
    if none:
        text += (f" {len(none)} more could have none and say why (counted as failed): "
                 + ", ".join(f"{e} `{n}` ({why})" for e, n, why in none) + ".")
    return text


def _anchor(eid: str) -> str:
    return f"[{eid}](#{eid.lower()})"


def _open_claims(results: Sequence[Result]) -> list[tuple[Result, Any, counting.Standing, str]]:
    """The counted claims the failing-claims list shows: reproduction claims whose word is not
    *reproduced*, checks that fail or are inconclusive; with the word or mark they show."""
    out = []
    for r in results:
        for c in r.claims:
            s = counting.standing(r, c)
            word = counting.claim_word(r, c) if s.counted else None
            if word is not None and word.word != REPRODUCED:
                out.append((r, c, s, word.text.upper()))
            elif s.counted and word is None and s.verdict in ("fail", "inconclusive"):
                out.append((r, c, s, f"{VERDICT_MARKS[s.verdict]} ({s.kind} check)"))
    return out


def _entry_title(result: Result, entry: Any) -> str:
    """The entry's title, naming the stand-in data its numbers come from (not at the paper profile)."""
    return result.title if result.profile == "paper" else stand_in_title(result.title, stand_ins_of(entry))


def _command(result: Result, out: str, device: str, seeds: int | None) -> str:
    paper = result.id.split("-")[0]
    cmd = (
        f"bnfl reproduce --paper {paper} --profile {result.profile} --out {shlex.quote(out)} "
        f"--only {result.id} --force"
    )
    if device != "cpu":
        cmd += f" --device {device}"
    if seeds is not None:
        cmd += f" --seeds {seeds}"
    return cmd


def write_report(
    results: Sequence[Result],
    path: str | os.PathLike[str],
    *,
    out: str = "figures",
    timings: Mapping[str, float] | None = None,
    device: str = "cpu",
    seeds: int | None = None,
) -> Path:
    """Write the reproduction report for ``results`` to ``path`` and return it.

    Parameters
    ----------
    results : sequence of Result
    path : path
        Usually ``<out>/REPORT.md``; figures are linked relative to it.
    out : str, default ``"figures"``
        The output folder as the user typed it (used in the remake commands).
    timings : mapping, optional
        ``{id: seconds}`` this invocation spent per entry (0 for reused results).
    """
    timings = dict(timings or {})
    path = Path(path)
    profiles = sorted({r.profile for r in results})
    total_compute = sum(r.duration_s for r in results)
    distinct_runs: dict[str, float] = {}
    for r in results:
        distinct_runs.update(r.runs)
    run_seconds = sum(distinct_runs.values())
    counts = claim_counts(results)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    results = sorted(results, key=lambda r: entry_order(r.id))
    by_id = {r.id: r for r in results}
    forest_line = _write_forest(by_id, path.parent)
    lines: list[str] = [
        "# Reproduction report",
        "",
        "## Headline claims",
        "",
        *forest_line,
        HEADLINE_INTRO,
        "",
        headline_words_line(by_id),
        "",
        headline_markdown(by_id, why="column", link=lambda eid: f"[{eid}](#{eid.lower()})"),
        stand_in_banner(results),
        machine_line(results),
        "",
        "## Claims by paper and kind",
        "",
        "*Reproduction*: measured by training; *structural*: constants, counts and arithmetic (in entries "
        "that train nothing, or declared so inside one that trains); *consistency*: the paper compared with "
        "itself.",
        "",
        counts_markdown(results),
        COUNTS_KEY,
        "",
        _interval_line(results),
        "",
        f"Generated {now} by `bnfl reproduce` (profile{'s' if len(profiles) > 1 else ''}: "
        f"{', '.join(profiles)}). {len(distinct_runs)} distinct training runs, {run_seconds:.0f} s of "
        f"compute when they ran; entry compute time of the stored results: {total_compute:.0f} s"
        + (f"; this invocation: {sum(timings.values()):.0f} s." if timings else "."),
        "",
        "Counted reproduction claims: " + (", ".join(f"{counts[w]} {w}" for w in WORDS if counts[w]) or "none")
        + f"; structural and consistency checks: {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['inconclusive']} inconclusive; {counts['info']} numbers reported only (info). "
        "A claim encodes one \"Check\" line of `papers/CATALOG.md` for the profile that ran. A reproduction "
        "claim reads as the headline's words (its stored interval against its threshold, with the entry's own "
        "precondition); a check passes when `margin >= 0`. A claim that is not reproduced is a finding about "
        "the proxy (or the paper), reported with its numbers and a one-line why, never tuned away. "
        "*Consistency checks* compare with values that were themselves inferred from the same paper.",
        "",
        "## Entries by paper",
        "",
        "In figure order; claims by kind as pass/fail/inconclusive/info; `paper / ours` is the first of "
        "the paper's numbers the entry stores beside ours (all of them are in the entry's section).",
        "",
        entries_markdown(results, link=lambda eid: f"[{eid}](#{eid.lower()})"),
    ]
    open_claims = _open_claims(results)
    if open_claims:
        lines += ["## Claims not reproduced and checks that fail, and why", "",
                  "Reproduction claims by their verdict word (every word but *reproduced*), checks that fail or are "
                  "inconclusive; reported-only claims are listed under the entry that counts them.", "",
                  "| id | check | verdict | why |", "|---|---|---|---|"]
        lines += [f"| [{r.id}](#{r.id.lower()}) | {_fmt(c.statement)}{_standing_note(r, s, _anchor)}"
                  f" | {mark} | {_fmt(c.why)} |" for r, c, s, mark in open_claims]
        lines.append("")
    for r in results:
        entry = get(r.id)
        lines += [
            f"## {r.id}",
            "",
            f"**{_entry_title(r, entry)}** — verdict: **{counting.entry_verdict(r)}** (profile `{r.profile}`, "
            f"{len(r.seeds)} seed{'s' if len(r.seeds) != 1 else ''}, device `{r.device}`, "
            f"{r.duration_s:.1f} s, commit `{r.git_commit}`"
            + (f", {r.machine.get('cpu')} / {r.machine.get('torch_cpu_capability')}" if r.machine else "") + ")",
            "",
            entry.summary,
            "",
            f"![{r.id}]({r.id}.png)",
            "",
        ]
        if r.deviations:
            lines += ["**Deviations from the catalog recipe:**", ""]
            lines += [f"- {round_numbers(d)}" for d in r.deviations] + [""]
        lines += ["**Our numbers:**", "", markdown_table(labels_first(r.rows))]
        pairs = paper_pairs(r)
        if pairs and not any(k.endswith(" paper") for row in r.rows for k in row):  # else side by side already
            lines += ["**The paper beside ours:**", "",
                      markdown_table([{"row": a, "column": b, "paper": p, "ours": o} for a, b, p, o in pairs])]
        if r.paper:
            lines += ["**The paper's numbers (verbatim):**", "", markdown_table(labels_first(r.paper))]
        elif entry.paper == "bench":
            lines += ["**The paper's numbers:** none: no paper has this benchmark.", ""]
        else:
            lines += ["**The paper's numbers:** none printed (figure only).", ""]
        lines += ["**Claim checks:**", "", claims_table(r)]
        if r.notes:
            lines += ["**Notes:**", ""] + [f"- {round_numbers(n)}" for n in r.notes] + [""]
        lines += ["Remake:", "", "```bash", _command(r, out, device, seeds), "```", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
