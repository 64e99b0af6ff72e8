"""Which stored claims count, and the words an entry's verdict reads as (issue 47, parts 5 and 6).

Decided when a result is read, in this one place, from declared rules; nothing in a result.json
is rewritten. Every surface (REPORT.md, the dashboard, ``bnfl list``, the docs' paper pages,
which-fix) reads :func:`standing`, :func:`claim_word` and :func:`entry_verdict`.

Counted once. A stored claim is *reported only* (shown, linked to the claim that counts in its
place, and left out of every total) when

1. it re-reads another entry's measurement (``Claim.counted_in``);
2. a tuned version of it exists, ``fair-<name>`` in the same entry: each method at its own tuned
   rate counts, the common-rate twin is reported only;
3. it is declared one measurement with another claim (:data:`ONE_MEASUREMENT`: the same runs,
   values that differ by a small term, e.g. headline rows 8 and 9), or it stores the very
   per-seed vector (same seeds, same values) of an earlier counted claim of the same entry, or of
   another entry that shares its runs (:data:`LINKED_ACROSS`: declared, so that one result read
   alone counts as it does among all of them; ``tests/test_counting.py`` fails on an undeclared
   pair). The first in the entry's order counts. Identical vectors of entries that share no
   training run are two measurements whose accuracies (multiples of one test sample) coincide.

Not reproduction claims. A reproduction claim whose per-seed values are all equal (n >= 2: a
zero-width interval, no spread over seeds, e.g. the same number of loss spikes on every seed) is a
*structural* check: pass/fail, not a verdict word. A consistency check counts as it was stored:
its entry declares the precision (a printed mean against the mean of printed values, one unit of
the last digit, :data:`bnfl.experiments.printed.PRINTED_PRECISION`; one number printed twice, half
a unit), so what a reader sees is what the result holds.

Words. Every counted reproduction claim gets :func:`bnfl.experiments.verdicts.judge_claim`'s word,
the headline's, with the precondition the entry's own BN-only runs measure (:data:`GATES`: the
headline table's and those declared here): where it does not show the damage the word is *not
testable here*. An entry's verdict is the count of its words (``"3 reproduced, 1 undecided"``);
structural and consistency checks keep pass/fail and are named as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from bnfl.experiments.headlines import HEADLINES, Headline
from bnfl.experiments.verdicts import WORDS, Verdict, judge_claim
from bnfl.intervals import t_interval

__all__ = ["GATES", "LINKED_ACROSS", "ONE_MEASUREMENT", "Gate", "Standing", "checks_text",
           "claim_word", "entry_verdict", "entry_words", "headline_of", "same_vector", "standing", "standings",
           "word_text"]


@dataclass(frozen=True)
class Standing:
    """How a stored claim counts. ``kind``: reproduction / structural / consistency, as counted;
    ``counted``: in totals and the entry's verdict; ``verdict``: pass / fail / inconclusive / info;
    ``note``: why it is reported only or re-kinded (empty when counted as stored); ``link``: the
    ``(entry, claim)`` that counts in its place."""

    kind: str
    counted: bool
    verdict: str
    note: str = ""
    link: tuple[str, str | None] | None = None


@dataclass(frozen=True)
class Gate:
    """Claims of ``entry`` that compare a fix with BN and need the damage the entry's BN-only runs
    measure: the stored claim ``precondition``, or (``derive``) the per-seed sum of stored claims'
    values with signs, when no claim stores it."""

    entry: str
    claims: tuple[str, ...]
    label: str
    precondition: str | None = None
    derive: tuple[tuple[str, float], ...] = ()


#: (entry, counted claim, reported-only claim, why): one measurement, not identical per-seed vectors.
ONE_MEASUREMENT: tuple[tuple[str, str, str, str], ...] = tuple(
    ("hbn-tab2", f"drop-{phi}", f"hbn-ge-bn-{phi}-B2",
     f"HBN's smaller drop (phi = {phi}) is (HBN - BN at B = 2) - (HBN - BN at B = 32): the same B = 2 runs, "
     "whose BN collapse makes nearly all of both") for phi in ("0.6", "0.3")) + tuple(
    ("hbn-tab2", f"drop-0.6 {at}", f"hbn-ge-bn-0.6-B2 {at}",
     f"on {at} as on the entry's own stand-in: HBN's smaller drop is (HBN - BN at B = 2) - (HBN - BN at B = 32), "
     "the same B = 2 runs") for at in ("Q-DIG", "MNIST-5K"))

#: (entry, claim) -> the entry that counts the same per-seed vector (it shares the BN-only runs).
LINKED_ACROSS: dict[tuple[str, str], str] = {("hbn-tab6", "bn-damage"): "hbn-tab4",
                                             ("hbn-tab6", "bn-damage MNIST-5K"): "hbn-tab4",  # the same BN-only runs
                                             # the digits' FedAvg runs and their iid control, 5 seeds
                                             ("fedbn-tab17", "shift-damage"): "fedbn-fig3"}

#: The headline table's preconditions, and those of entries no headline reads.
GATES: tuple[Gate, ...] = (
    *(Gate(h.entry, (h.claim,), h.precondition.label, h.precondition.claim)
      for h in HEADLINES if h.precondition is not None and h.precondition.claim is not None),
    *(Gate(h.entry, (o.claim,), h.precondition.label, o.precondition)
      for h in HEADLINES for o in h.others if h.precondition is not None and o.precondition is not None),
    Gate("hbn-fig1", ("drop-b",), "BN's drop from B = 32 to 2", "bn-drop-b"),
    *(Gate("fedbn-tab1", (f"{g}-best-mean",), "the feature shift's damage", f"{g}-shift-damage")
      for g in ("domainnet", "abide")),
    Gate("fedtan-fig7", ("fedtan-noniid", "fedavg-noniid"), "BN's damage (centralized - FedAvg+BN, non-iid)",
         derive=(("fedtan-noniid", -1.0), ("fedavg-noniid", -1.0))),
)


def _values(claim: Any) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
    iv = getattr(claim, "interval", None) or {}
    vals = iv.get("values")
    if not vals or "no_interval" in iv or any(v is None for v in vals):
        return None
    return tuple(int(s) for s in iv.get("seeds") or ()), tuple(round(float(v), 9) for v in vals)


def same_vector(a: Any, b: Any) -> bool:
    """Whether two claims store the same seeds and the same per-seed values (to 9 decimals)."""
    va, vb = _values(a), _values(b)
    return va is not None and va == vb


def _stored_kind(result: Any, claim: Any) -> str:
    if claim.kind in ("consistency", "structural"):
        return claim.kind
    return "reproduction" if getattr(result, "runs", None) or getattr(claim, "interval", None) else "structural"


def standing(result: Any, claim: Any) -> Standing:
    """How ``claim`` of ``result`` counts (the module's rules; needs no other result)."""
    kind = _stored_kind(result, claim)
    if kind == "consistency":
        return Standing(kind, claim.counted_in is None, claim.verdict, "", (claim.counted_in, None)
                        if claim.counted_in else None)
    if claim.counted_in:
        return Standing(kind, False, claim.verdict, f"re-reads {claim.counted_in}; counted there",
                        (claim.counted_in, None))
    if kind != "reproduction" or claim.verdict == "info":
        return Standing(kind, True, claim.verdict)
    vec = _values(claim)
    if vec is not None and len(vec[1]) >= 2 and len(set(vec[1])) == 1:
        return Standing("structural", True, claim.verdict,
                        f"every seed gives {vec[1][0]:g}: no spread over seeds, a fixed property of the stand-in, "
                        "checked (pass/fail), not a measurement with an interval")
    names, rid = {c.name: c for c in result.claims}, getattr(result, "id", "")
    fair = names.get(f"fair-{claim.name}")
    if fair is not None and fair.counted_in is None:
        return Standing(kind, False, claim.verdict, f"the common-rate twin of fair-{claim.name} (each method at its "
                        "own tuned rate), which counts", (rid, fair.name))
    for eid, keep, drop, why in ONE_MEASUREMENT:
        if rid == eid and claim.name == drop and keep in names:
            return Standing(kind, False, claim.verdict, f"one measurement with {keep}: {why}; counted there",
                            (eid, keep))
    across = LINKED_ACROSS.get((rid, claim.name))
    if across is not None:
        return Standing(kind, False, claim.verdict, f"the same per-seed values as {across}'s {claim.name} (the same "
                        "BN-only runs); counted there", (across, claim.name))
    for other in result.claims:
        if other is claim:
            break
        if same_vector(other, claim) and _counted_reproduction(result, other):
            return Standing(kind, False, claim.verdict, f"the same per-seed values as {other.name}, another "
                            "threshold; counted there", (rid, other.name))
    return Standing(kind, True, claim.verdict)


def _counted_reproduction(result: Any, claim: Any) -> bool:
    s = standing(result, claim)
    return s.counted and s.kind == "reproduction" and claim.verdict != "info"


def standings(result: Any) -> dict[str, Standing]:
    """``{claim name: Standing}`` of every claim of ``result`` (names are unique in a stored result)."""
    return {c.name: standing(result, c) for c in result.claims}


def headline_of(entry: str, claim: str) -> Headline | None:
    """The headline that reads ``claim`` of ``entry``, or ``None``."""
    return next((h for h in HEADLINES if h.entry == entry and h.claim == claim), None)


def _precondition(result: Any, name: str) -> tuple[Any, str] | None:
    for g in GATES:
        if g.entry != getattr(result, "id", "") or name not in g.claims:
            continue
        if g.precondition is not None:
            pre = next((c for c in result.claims if c.name == g.precondition), None)
            return (pre, g.label) if pre is not None else None
        parts = [(_values(next((c for c in result.claims if c.name == n), None)), s) for n, s in g.derive]
        if any(v is None for v, _ in parts) or len({v[0] for v, _ in parts}) != 1:
            return None
        vals = [sum(s * v[1][i] for v, s in parts) for i in range(len(parts[0][0][1]))]
        if len(vals) < 2:
            return None
        record = {**t_interval(vals, paired=True).to_dict(), "side": "above", "seeds": list(parts[0][0][0])}
        return SimpleNamespace(name="derived", interval=record), g.label
    return None


def claim_word(result: Any, claim: Any) -> Verdict | None:
    """The verdict word of a reproduction claim (counted or reported only), with its entry's
    precondition (:data:`GATES`) and its headline's null; ``None`` for a check or an ``info`` claim."""
    if claim.verdict == "info" or standing(result, claim).kind != "reproduction":
        return None
    h = headline_of(getattr(result, "id", ""), claim.name)
    pre = _precondition(result, claim.name)
    return judge_claim(claim, null=h.null if h is not None else 0.0,
                       precondition=pre[0] if pre else None, precondition_label=pre[1] if pre else "the precondition")


def entry_words(result: Any) -> dict[str, int]:
    """``{word: counted reproduction claims}`` of ``result``, in :data:`~bnfl.experiments.verdicts.WORDS`
    order (words no claim has are left out)."""
    words = [claim_word(result, c) for c in result.claims if _counted_reproduction(result, c)]
    found = [w.word for w in words if w is not None]
    return {w: found.count(w) for w in WORDS if w in found}


def word_text(counts: Mapping[str, int]) -> str:
    """``{word: n}`` as ``"3 reproduced, 1 undecided"``."""
    return ", ".join(f"{n} {w}" for w, n in counts.items() if n)


def checks_text(result: Any) -> str:
    """The counted structural and consistency checks as ``"structural checks: 3 pass; consistency
    checks: 1 fail"`` (empty when there are none)."""
    parts = []
    for kind in ("structural", "consistency"):
        got = [s.verdict for c in result.claims for s in [standing(result, c)]
               if s.counted and s.kind == kind and s.verdict != "info"]
        if got:
            parts.append(f"{kind} checks: " + ", ".join(f"{got.count(v)} {v}" for v in ("pass", "fail", "inconclusive")
                                                        if got.count(v)))
    return "; ".join(parts)


def entry_verdict(result: Any) -> str:
    """An entry's verdict: the count of its counted reproduction claims' words; an entry without
    one reads as its checks (``"structural checks: 4 pass"``), or, when every claim it shows is
    counted elsewhere, says where (``"3 claims reported only, counted in fedbn-fig5"``); ``"n/a"``
    without any."""
    text = word_text(entry_words(result)) or checks_text(result)
    if text:
        return text
    elsewhere = [s for c in result.claims for s in [standing(result, c)] if not s.counted and s.link is not None]
    if elsewhere:
        where = sorted({s.link[0] for s in elsewhere if s.link[0]})
        return (f"{len(elsewhere)} claim{'s' if len(elsewhere) != 1 else ''} reported only, counted in "
                + ", ".join(where))
    info = sum(c.verdict == "info" for c in result.claims)
    return f"{info} number{'s' if info != 1 else ''} reported (info), no claim" if info else "n/a"


def reported_only(results: Iterable[Any]) -> list[tuple[str, str, Standing]]:
    """``(entry, claim, Standing)`` of every reproduction claim that is not counted."""
    return [(r.id, c.name, s) for r in results for c in r.claims
            for s in [standing(r, c)] if not s.counted and s.kind == "reproduction"]
