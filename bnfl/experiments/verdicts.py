"""Verdicts that say what was found: the words of the headline table and the dashboard.

A stored claim carries ``pass`` / ``fail`` / ``inconclusive`` (:data:`bnfl.experiments._claim.VERDICTS`),
which say whether the interval cleared a threshold, not what it says about the paper. This module
reads the numbers a claim already stores (its estimate, 95% interval, threshold, the side the
paper's statement takes, the seeds and the per-seed spread) and says, without recomputing anything:

``reproduced``
    the interval lies wholly on the paper's side of the threshold;
``contradicted``
    the interval lies wholly on the other side of the *null* (0 for a difference of accuracies,
    or the value a claim names as "no effect", e.g. 0.5 for a share of rounds), or, when the
    threshold is a non-inferiority margin (it sits on the other side of the null), wholly on the
    other side of that margin; an equivalence claim (``|d| <= tol``) is contradicted when its
    interval lies wholly outside ``[-tol, tol]``;
``smaller than claimed``
    the threshold asks for a minimum effect (it sits on the paper's side of the null), and the
    interval lies wholly short of it without lying wholly beyond the null: the effect the paper
    states is excluded, its direction is not (neither of the two words above is true);
``undecided``
    the interval contains the threshold; the verdict says which way the estimate leans (towards the
    paper: it lies on the paper's side of the threshold) and about how many seeds would decide it
    at the observed per-seed spread (:func:`bnfl.intervals.seeds_to_decide`);
``not testable here``
    the claim needs a precondition (the damage a fix repairs, measured with BN-only runs of the same
    entry) and the stored interval of that precondition does not show it: the stand-in lacks what
    the fix repairs, so neither a gain nor a loss of the fix says anything about the paper;
``stand-in dependent``
    a headline claim measured on several pre-declared stand-ins (:func:`across_stand_ins`) whose
    testable stand-ins do not all say the same word: the verdict lists each one's.

The functions are pure: they take numbers (or a claim's stored ``interval`` record) and return a
:class:`Verdict`; nothing is written back to a result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bnfl.intervals import Interval, seeds_to_decide

__all__ = [
    "CONTRADICTED",
    "NOT_TESTABLE",
    "REPRODUCED",
    "SMALLER",
    "STAND_IN_DEPENDENT",
    "UNDECIDED",
    "WORDS",
    "Verdict",
    "across_stand_ins",
    "interval_of",
    "judge",
    "judge_claim",
    "judge_count",
    "precondition_holds",
]

REPRODUCED = "reproduced"
CONTRADICTED = "contradicted"
SMALLER = "smaller than claimed"
UNDECIDED = "undecided"
NOT_TESTABLE = "not testable here"
STAND_IN_DEPENDENT = "stand-in dependent"
#: The verdict words, in the order the dashboard counts them.
WORDS: tuple[str, ...] = (REPRODUCED, CONTRADICTED, SMALLER, UNDECIDED, STAND_IN_DEPENDENT, NOT_TESTABLE)

#: Most seeds :func:`judge` reports as "would decide" (beyond it: "more than 10,000").
_SEED_LIMIT = 10_000


@dataclass(frozen=True)
class Verdict:
    """What a claim's stored interval says about the paper.

    Attributes
    ----------
    word : str
        One of :data:`WORDS`.
    text : str
        The word with what qualifies it, as the headline table shows it:
        ``"undecided (leans against; ~7 seeds would decide)"``,
        ``"not testable here (BN's drop +0.28 [-3.92, 4.48]: no damage to repair)"``.
    leans : {"towards", "against"} or None
        For ``undecided``: whether the estimate lies on the paper's side of the threshold.
    seeds_needed : int or None
        For ``undecided``: about how many seeds would decide it at the observed spread
        (``None`` when more than 10,000 would, or the spread is not stored).
    reason : str
        One whole sentence saying why (the interval against the threshold or the null).
    """

    word: str
    text: str
    leans: str | None = None
    seeds_needed: int | None = None
    reason: str = ""


def _f(x: float) -> str:
    """A number at the stand-ins' resolution: 2 decimals (one test sample of 360 is 0.28 points)."""
    return f"{x:.2f}"


def _iv_text(estimate: float, low: float, high: float) -> str:
    return f"{estimate:+.2f} [{_f(low)}, {_f(high)}]"


def interval_of(record: Mapping[str, Any]) -> Interval | None:
    """The :class:`~bnfl.intervals.Interval` a claim's stored ``interval`` record holds
    (``None`` for a record without one: a count over items, :func:`bnfl.experiments._claim.no_interval`)."""
    if not record or "low" not in record or record.get("low") is None:
        return None
    n = int(record.get("n") or len(record.get("values") or ()) or 0)
    return Interval(float(record["estimate"]), float(record["low"]), float(record["high"]),
                    str(record.get("method", "t")), float(record.get("level", 0.95)), n,
                    float(record.get("sd") or 0.0), float(record.get("se") or 0.0), record.get("paired"),
                    tuple(float(v) for v in record.get("values") or ()))


def _seeds(iv: Interval | None, target: float) -> int | None:
    if iv is None or iv.n < 2 or not math.isfinite(iv.se):
        return None
    return seeds_to_decide(iv, target, limit=_SEED_LIMIT)


def _undecided(iv: Interval | None, leans_towards: bool, target: float, reason: str) -> Verdict:
    n = _seeds(iv, target)
    more = f"~{n} seeds would decide" if n is not None else "more than 10,000 seeds would be needed"
    leans = "towards" if leans_towards else "against"
    return Verdict(UNDECIDED, f"{UNDECIDED} (leans {leans}; {more})", leans, n, reason)


def judge(estimate: float, low: float, high: float, *, threshold: float, side: str = "above",
          null: float = 0.0, interval: Interval | None = None) -> Verdict:
    """The verdict of a claim ``x >= threshold`` (``side="above"``), ``x <= threshold`` (``"below"``)
    or ``|x| <= threshold`` (``"within"``: an equivalence claim, ``threshold`` the tolerance) whose
    95% interval of ``x`` is ``[low, high]`` around ``estimate``.

    Parameters
    ----------
    estimate, low, high : float
        The stored estimate and interval (points, or the claim's own units).
    threshold : float
        The claim's threshold (for ``"within"``: the tolerance, >= 0).
    side : {"above", "below", "within"}, default ``"above"``
        The side of the threshold the paper's statement takes.
    null : float, default 0.0
        "No effect" in the claim's units (0 for a difference of accuracies). A threshold on the
        paper's side of ``null`` asks for a minimum effect (contradiction is then judged against
        ``null``); one on the other side is a non-inferiority margin (judged against itself).
    interval : Interval, optional
        The stored interval (its ``n`` and ``se``), to say how many seeds would decide an
        undecided claim; without it that count is left out.

    Returns
    -------
    Verdict
    """
    low, high, estimate, t = float(low), float(high), float(estimate), float(threshold)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"judge needs a finite interval with low <= high, got [{low}, {high}]")
    shown = _iv_text(estimate, low, high)
    if side == "within":
        if t < 0:
            raise ValueError(f"an equivalence tolerance must be >= 0, got {t}")
        if -t <= low and high <= t:
            return Verdict(REPRODUCED, REPRODUCED, reason=f"the interval {shown} lies within ±{t:g}.")
        if low > t or high < -t:
            return Verdict(CONTRADICTED, CONTRADICTED, reason=f"the interval {shown} lies wholly outside ±{t:g}.")
        nearest = t if estimate >= 0 else -t
        return _undecided(interval, abs(estimate) <= t, nearest,
                          f"the interval {shown} reaches past ±{t:g} and is not wholly outside it.")
    if side not in ("above", "below"):
        raise ValueError(f"side must be 'above', 'below' or 'within', got {side!r}")
    # Orient so that the paper's side is "above": x -> -x for a "below" claim.
    s = 1.0 if side == "above" else -1.0
    lo, hi = (low, high) if s > 0 else (-high, -low)
    est, tt, z = s * estimate, s * t, s * float(null)
    word_side = "above" if s > 0 else "below"
    if lo >= tt:
        return Verdict(REPRODUCED, REPRODUCED, reason=f"the interval {shown} lies wholly {word_side} {t:g}.")
    other = "below" if s > 0 else "above"
    if tt <= z:  # a non-inferiority margin (or the null itself): the threshold is the line
        if hi < tt:
            return Verdict(CONTRADICTED, CONTRADICTED, reason=f"the interval {shown} lies wholly {other} {t:g}.")
        return _undecided(interval, est >= tt, t, f"the interval {shown} contains {t:g}.")
    if hi < z:  # a minimum effect, and the interval lies beyond the null: the effect is reversed
        return Verdict(CONTRADICTED, CONTRADICTED,
                       reason=f"the interval {shown} lies wholly {other} {float(null):g} (no effect).")
    if hi < tt:
        beyond = (f"; it also excludes {float(null):g} (no effect)" if lo > z
                  else f"; whether there is any effect ({float(null):g} is inside) is not decided")
        return Verdict(SMALLER, SMALLER,
                       reason=f"the interval {shown} lies wholly {other} the threshold {t:g}{beyond}.")
    return _undecided(interval, est >= tt, t, f"the interval {shown} contains {t:g}.")


def precondition_holds(record: Mapping[str, Any]) -> bool | None:
    """Whether a precondition claim's stored interval shows its damage: ``True`` when the interval
    lies wholly beyond 0 on its claimed side (``"above"``: a damage ``> 0``; ``"below"``: ``< 0``),
    ``False`` when it does not, ``None`` when the record has no interval. The precondition claim's
    own threshold (e.g. fixbn-tab1's "gap >= 15 pts") is not the test: any damage is something to
    repair."""
    iv = interval_of(record)
    if iv is None:
        return None
    side = record.get("side", "above")
    if side not in ("above", "below"):
        return None
    return iv.low > 0 if side == "above" else iv.high < 0


def judge_count(record: Mapping[str, Any], *, null: float = 0.0) -> Verdict:
    """The verdict of "at least ``need`` of these items hold" from the stored per-item intervals
    (:func:`bnfl.experiments.evidence.count_of`'s record): ``reproduced`` when ``need``
    items are reproduced, ``contradicted`` when fewer than ``need`` could still be (the rest are
    contradicted or smaller than claimed), else ``undecided`` with the seeds the slowest of the
    undecided items that must still hold would need."""
    items = record.get("items") or {}
    need = int(record.get("need") or 0)
    # an item with no interval (one seed: the smoke profile) is undecided, and no seed count decides it
    words = {k: judge_claim_record(v, null=null) if v else Verdict(UNDECIDED, f"{UNDECIDED} (no interval)", None, None,
                                                                    "no interval stored")
             for k, v in items.items()}
    hold = [k for k, v in words.items() if v.word == REPRODUCED]
    open_ = sorted((k for k, v in words.items() if v.word == UNDECIDED),
                   key=lambda k: words[k].seeds_needed if words[k].seeds_needed is not None else _SEED_LIMIT + 1)
    lost = [f"{k} {words[k].word}" for k in words if k not in hold and k not in open_]
    summary = (f"{len(hold)} of {len(items)} items reproduced ({', '.join(hold) or 'none'}), {need} needed"
               + (f"; {', '.join(lost)}" if lost else ""))
    if len(hold) >= need:
        return Verdict(REPRODUCED, REPRODUCED, reason=summary + ".")
    if len(hold) + len(open_) < need:
        return Verdict(CONTRADICTED, CONTRADICTED, reason=summary + "; too few can still hold.")
    must = open_[: need - len(hold)]  # the cheapest items to decide
    counts = [words[k].seeds_needed for k in must]
    n = None if any(c is None for c in counts) else max(counts, default=None)
    towards = sum(words[k].leans == "towards" for k in must) == len(must)
    more = f"~{n} seeds would decide" if n is not None else "more than 10,000 seeds would be needed"
    return Verdict(UNDECIDED, f"{UNDECIDED} (leans {'towards' if towards else 'against'}; {more})",
                   "towards" if towards else "against", n,
                   summary + f"; {', '.join(must)} must still hold ("
                   + ", ".join(f"{k} {words[k].text}" for k in must) + ").")


def judge_claim_record(record: Mapping[str, Any], *, null: float = 0.0) -> Verdict:
    """:func:`judge` of a stored ``Claim.interval`` record (its estimate, interval, threshold and side;
    an equivalence claim's ``tolerance``), or :func:`judge_count` of a count over items."""
    if "items" in record and "low" not in record:
        return judge_count(record, null=null)
    iv = interval_of(record)
    if iv is None:
        raise ValueError("the record stores no interval (no 'low'/'high'): no verdict word can be read from it")
    side = record.get("side", "above")
    threshold = float(record["tolerance"]) if side == "within" else float(record.get("threshold", 0.0))
    return judge(iv.estimate, iv.low, iv.high, threshold=threshold, side=side, null=null, interval=iv)


def judge_claim(claim: Any, *, null: float = 0.0, precondition: Any = None,
                precondition_label: str = "the precondition") -> Verdict:
    """The verdict word of a stored :class:`~bnfl.experiments._claim.Claim`.

    ``precondition``: the stored claim that measures what the claim needs (e.g. BN's damage with
    BN-only runs of the same entry), or ``None`` when no entry measures it. When its interval does
    not show it, the verdict is ``not testable here`` with that interval
    (``"not testable here (BN's drop +0.28 [-3.92, 4.48]: no damage to repair)"``).

    A claim without an interval (a margin against noise, or a run that diverged) keeps the
    meaning of its stored verdict: ``pass`` -> reproduced, ``fail`` -> contradicted, with a reason
    saying that no interval is stored; ``inconclusive`` -> undecided, with no seed count.
    """
    if precondition is not None:
        pre = getattr(precondition, "interval", None) or {}
        held = precondition_holds(pre)
        if held is False:
            iv = interval_of(pre)
            assert iv is not None
            shown = _iv_text(iv.estimate, iv.low, iv.high)
            return Verdict(NOT_TESTABLE, f"{NOT_TESTABLE} ({precondition_label} {shown}: no damage to repair)",
                           reason=f"{precondition_label} is {shown}, not wholly {pre.get('side', 'above')} 0: "
                                  "the stand-in lacks the damage the fix repairs, so the comparison says nothing "
                                  "about the paper.")
    record = getattr(claim, "interval", None) or {}
    if record and ("low" in record or "items" in record):
        return judge_claim_record(record, null=null)
    why = record.get("no_interval") if record else None
    tail = f" (no interval: {why})" if why else " (no interval stored: the verdict is the stored margin's)"
    word = {"pass": REPRODUCED, "fail": CONTRADICTED, "inconclusive": UNDECIDED}.get(claim.verdict)
    if word is None:
        raise ValueError(f"claim {claim.name!r} is {claim.verdict!r}: it reports a number and has no verdict word")
    return Verdict(word, word, reason=f"the stored verdict is {claim.verdict}{tail}.")


def across_stand_ins(words: Mapping[str, Verdict]) -> Verdict:
    """One headline claim measured on several stand-ins (``{stand-in: its verdict}``, the first the
    row's own): the word every testable stand-in says (a stand-in whose precondition fails is *not
    testable here* and says nothing), else ``stand-in dependent`` with each stand-in's word; *not
    testable here* when none is testable. One stand-in: its verdict, unchanged."""
    if not words:
        raise ValueError("across_stand_ins needs at least one stand-in's verdict")
    if len(words) == 1:
        return next(iter(words.values()))
    each = "; ".join(f"{k}: {v.text}" for k, v in words.items())
    testable = {k: v for k, v in words.items() if v.word != NOT_TESTABLE}
    if not testable:
        first = next(iter(words.values()))
        return Verdict(NOT_TESTABLE, first.text, reason=f"No stand-in shows the precondition ({each}).")
    said = {v.word for v in testable.values()}
    if len(said) == 1:
        first = next(iter(testable.values()))
        return Verdict(first.word, first.text, first.leans, first.seeds_needed,
                       f"{first.reason} Every testable stand-in agrees ({each}).".strip())
    return Verdict(STAND_IN_DEPENDENT, f"{STAND_IN_DEPENDENT} ({each})",
                   reason=f"The testable stand-ins do not agree: {each}.")
