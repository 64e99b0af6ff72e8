"""Claims judged by a 95% interval over seeds (:mod:`bnfl.intervals`).

These build the same :class:`~bnfl.experiments.claims.Claim` as :mod:`bnfl.experiments.claims`,
with the verdict taken from an interval instead of a margin against a noise number, and the
interval stored in ``Claim.interval`` (so ``result.json``, ``REPORT.md`` and the notebooks show it):

* :func:`interval_claim`: ``mean(a) >= threshold`` / ``<= threshold``, or the same of
  ``mean(a) - mean(b)`` (paired by seed by default);
* :func:`interval_within`: ``|mean(a) - mean(b)| <= tol``;
* :func:`interval_monotone`: a sequence of settings moves one way; a step whose interval reaches
  the allowed side is no violation.

Fields of ``Claim.interval``: ``estimate``, ``low``, ``high``, ``method`` (``"t"`` or
``"bootstrap"``), ``level``, ``n``, ``sd``, ``se``, ``paired``, ``values`` (per seed; the paired
differences when paired), ``threshold``, ``side``, ``seeds``, ``n_test``, ``detectable_effect``
(the smallest effect these seeds and this test set could detect) and ``seeds_to_decide`` (for an
inconclusive claim, about how many seeds would decide it; ``None`` when more than 10,000).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bnfl.experiments._claim import Claim, _finite, no_interval
from bnfl.intervals import (
    Interval,
    detectable_effect,
    estimate,
    seeds_to_decide,
    verdict,
)

__all__ = ["interval_claim", "interval_monotone", "interval_within"]


def _record(iv: Interval, threshold: float, side: str, seeds: Sequence[int] | None, n_test: int | None,
            decided: bool) -> dict[str, Any]:
    d = iv.to_dict()
    d.update({"threshold": float(threshold), "side": side, "seeds": None if seeds is None else [int(s) for s in seeds],
              "n_test": None if n_test is None else int(n_test),
              "detectable_effect": detectable_effect(iv, n_test=n_test),
              "seeds_to_decide": None if decided else seeds_to_decide(iv, threshold)})
    return d


def _undecided_why(iv: Interval, threshold: float, record: dict[str, Any]) -> str:
    n = record["seeds_to_decide"]
    more = (f"about {n} seeds would decide it at this spread" if n is not None
            else "more than 10,000 seeds would be needed at this spread")
    return (f"the {iv.text()} interval contains the threshold {threshold:g}; the smallest effect these "
            f"{iv.n} seeds could detect is {record['detectable_effect']:.2f}; {more}")


def _diverged(why: str, seeds: Sequence[int] | None = None, *columns: Sequence[float] | None) -> str:
    bad = _bad_seeds(seeds, *columns)
    where = f" on seed(s) {', '.join(map(str, bad))}" if bad else ""
    return f"a value is not finite (a run diverged{where}), so there is no interval" + (f"; {why}" if why else "")


def _bad_seeds(seeds: Sequence[int] | None, *columns: Sequence[float] | None) -> list[int]:
    """The seeds (positions when ``seeds`` is None) where some column holds a non-finite value."""
    cols = [c for c in columns if c is not None]
    n = max((len(c) for c in cols), default=0)
    labels = list(seeds) if seeds is not None and len(seeds) == n else list(range(n))
    return [int(labels[i]) for i in range(n)
            if any(i < len(c) and not math.isfinite(float(c[i])) for c in cols)]


def _diverged_record(seeds: Sequence[int] | None, a: Sequence[float], b: Sequence[float] | None = None,
                     **extra: Any) -> dict[str, Any]:
    """:func:`~bnfl.experiments._claim.no_interval`'s record of a claim whose runs diverged."""
    return no_interval("diverged", seeds=seeds, values=a, baseline=b,
                       diverged_seeds=_bad_seeds(seeds, a, b), **extra)


def _non_finite(values: Sequence[float] | None) -> bool:
    return values is not None and any(not math.isfinite(float(v)) for v in values)


def interval_claim(name: str, statement: str, a: Sequence[float], b: Sequence[float] | None = None, *,
                   threshold: float = 0.0, side: str = "above", paired: bool = True, method: str = "t",
                   level: float = 0.95, seeds: Sequence[int] | None = None, n_test: int | None = None,
                   detail: str = "", why: str = "", kind: str = "reproduction") -> Claim:
    """Claim ``mean(a) (- mean(b)) >= threshold`` (``side="above"``) or ``<= threshold`` (``"below"``).

    ``a``, ``b``: per-seed values in the order of ``seeds`` (paired by position when ``paired``).
    The verdict is :func:`bnfl.intervals.verdict` of the ``level`` interval by ``method``;
    the margin is the near end's distance to the threshold (``>= 0`` exactly when it passes), the
    noise the interval's half width. ``n_test``: the test set's size (one sample = ``100/n_test``
    points floors the detectable effect). ``why``: prefixed to the reason of a fail.
    """
    if _non_finite(a) or _non_finite(b):
        return Claim(name, statement, "fail", None, float(threshold), None, detail or "a run diverged",
                     _diverged(why, seeds, a, b), None, kind, _diverged_record(seeds, a, b))
    iv = estimate(a, b, paired=paired, method=method, level=level)
    v = verdict(iv, threshold, side=side)
    margin = iv.low - threshold if side == "above" else threshold - iv.high
    record = _record(iv, threshold, side, seeds, n_test, decided=v != "inconclusive")
    text = detail or f"{'difference' if b is not None else 'mean'} {iv.text()} vs threshold {threshold:g}"
    reason = ""
    if v == "fail":
        wrong = "below" if side == "above" else "above"
        reason = (why + "; " if why else "") + (f"the {iv.text()} interval lies wholly {wrong} the threshold "
                                                f"{threshold:g}")
    elif v == "inconclusive":
        reason = _undecided_why(iv, threshold, record)
    return Claim(name, statement, v, iv.estimate, float(threshold), margin, text, reason, iv.half_width, kind,
                 record)


def interval_within(name: str, statement: str, a: Sequence[float], b: Sequence[float], tol: float, *,
                    paired: bool = True, method: str = "t", level: float = 0.95,
                    seeds: Sequence[int] | None = None, n_test: int | None = None, detail: str = "",
                    why: str = "", kind: str = "reproduction") -> Claim:
    """Claim ``|mean(a) - mean(b)| <= tol``: pass when the difference's interval lies in
    ``[-tol, tol]``, fail when it lies wholly outside it, inconclusive otherwise."""
    if _non_finite(a) or _non_finite(b):
        return Claim(name, statement, "fail", None, float(tol), None, detail or "a run diverged",
                     _diverged(why, seeds, a, b), None, kind, _diverged_record(seeds, a, b))
    iv = estimate(a, b, paired=paired, method=method, level=level)
    tol = float(tol)
    if -tol <= iv.low and iv.high <= tol:
        v = "pass"
    elif iv.low > tol or iv.high < -tol:
        v = "fail"
    else:
        v = "inconclusive"
    margin = min(tol - iv.high, iv.low + tol) if v != "fail" else -(iv.low - tol if iv.low > tol else -tol - iv.high)
    nearest = tol if iv.estimate >= 0 else -tol
    record = _record(iv, nearest, "within", seeds, n_test, decided=v != "inconclusive")
    record["tolerance"] = tol
    text = detail or f"difference {iv.text()} vs +-{tol:g}"
    reason = ""
    if v == "fail":
        reason = (why + "; " if why else "") + f"the {iv.text()} interval lies wholly outside +-{tol:g}"
    elif v == "inconclusive":
        reason = _undecided_why(iv, nearest, record)
    return Claim(name, statement, v, abs(iv.estimate), tol, margin, text, reason, iv.half_width, kind, record)


def interval_monotone(name: str, statement: str, columns: Sequence[Sequence[float]], *, increasing: bool = True,
                      tolerance: float = 0.0, allowed_violations: int = 0, paired: bool = True, method: str = "t",
                      level: float = 0.95, labels: Sequence[Any] | None = None, seeds: Sequence[int] | None = None,
                      n_test: int | None = None, why: str = "", kind: str = "reproduction") -> Claim:
    """Claim the settings ``columns[0], columns[1], ...`` (each: per-seed values) move one way.

    A step *violates* only when its interval lies wholly on the wrong side of ``-tolerance`` (a
    wrong-way step smaller than its interval is no violation). Verdict: ``fail`` when more than
    ``allowed_violations`` steps violate, or when the end-to-end change (last minus first) has its
    interval wholly on the wrong side of ``-tolerance`` (the settings move the wrong way overall,
    even where no single step resolves it); ``pass`` when neither holds and the end-to-end interval
    lies on the claimed side of 0; ``inconclusive`` otherwise (the trend is not resolved, or it
    goes the wrong way by less than the tolerance). ``Claim.interval`` holds the end-to-end
    interval and each step's.
    """
    if len(columns) < 2:
        raise ValueError(f"a monotone claim needs at least 2 settings, got {len(columns)}")
    labels = list(labels) if labels is not None else list(range(len(columns)))
    if len(labels) != len(columns):
        raise ValueError(f"{len(labels)} labels for {len(columns)} settings; give one label per setting")
    if any(_non_finite(c) for c in columns):
        return Claim(name, statement, "fail", None, tolerance, None, "a value is not finite",
                     _diverged(why, seeds, *columns), None, kind,
                     _diverged_record(seeds, columns[-1], columns[0], columns=[[_finite(v) for v in c] for c in columns],
                                      labels=[str(x) for x in labels]))
    sign = 1.0 if increasing else -1.0
    oriented = [[sign * float(v) for v in c] for c in columns]
    steps = [estimate(oriented[j + 1], oriented[j], paired=paired, method=method, level=level)
             for j in range(len(columns) - 1)]
    violations = [j for j, s in enumerate(steps) if s.high < -tolerance]
    total = estimate(oriented[-1], oriented[0], paired=paired, method=method, level=level)
    wrong_total = total.high < -tolerance  # the whole change lies the wrong way, beyond the allowance
    if len(violations) > allowed_violations or wrong_total:
        v = "fail"
        margins = [total.high + tolerance] if wrong_total else []  # < 0
        if len(violations) > allowed_violations:
            margins.append(max(steps[j].high for j in violations) + tolerance)  # < 0
        margin = min(margins)
    else:
        v = verdict(total, 0.0, side="above")
        v = "inconclusive" if v == "fail" else v  # wrong way by less than the tolerance: unresolved
        margin = total.low
    record = _record(total, 0.0, "above", seeds, n_test, decided=v != "inconclusive")
    record["steps"] = [{"from": str(labels[j]), "to": str(labels[j + 1]), "estimate": sign * s.estimate,
                        "low": sign * (s.low if sign > 0 else s.high), "high": sign * (s.high if sign > 0 else s.low),
                        "violation": j in violations} for j, s in enumerate(steps)]
    direction = "non-decreasing" if increasing else "non-increasing"
    shown = "; ".join(f"{labels[j]}->{labels[j + 1]}: {sign * s.estimate:+.2f} "
                      f"[{sign * (s.low if sign > 0 else s.high):.2f}, {sign * (s.high if sign > 0 else s.low):.2f}]"
                      for j, s in enumerate(steps))
    detail = (f"{direction}; steps {shown}; {len(violations)} step(s) whose interval lies wholly the wrong way "
              f"(beyond {tolerance:g}; {allowed_violations} allowed); end to end {total.text()}")
    reason = ""
    if v == "fail":
        parts = []
        if len(violations) > allowed_violations:
            bad = ", ".join(f"{labels[j]}->{labels[j + 1]}" for j in violations)
            parts.append(f"step(s) {bad} move the wrong way by more than their interval")
        if wrong_total:
            parts.append(f"end to end ({labels[0]}->{labels[-1]}) the {total.text()} interval of the change lies "
                         f"wholly on the wrong side of {-tolerance:g}")
        reason = (why + "; " if why else "") + "; ".join(parts)
    elif v == "inconclusive":
        reason = ("no step violates, but the end-to-end change is not resolved: "
                  + _undecided_why(total, 0.0, record))
    return Claim(name, statement, v, sign * total.estimate, tolerance, margin, detail, reason, total.half_width,
                 kind, record)
