"""Claim checks: one "Check" line of the catalog, its measured number, threshold and verdict.

A claim's *margin* is its signed distance to failing (``>= 0`` passes). A margin is only
evidence when it is larger than the noise of what it measures: the spread over seeds, or
the resolution of the test set (one test sample = ``100 / n_test`` accuracy points). A
claim built with ``noise=`` whose margin is not larger than that noise gets the verdict
``"inconclusive"``, never pass or fail. Every ``fail`` and ``inconclusive`` claim carries a
one-line ``why`` that the report prints.

``kind`` tells a *reproduction* (the paper's number or effect, measured anew) from a
*structural* check (a constant, a count or arithmetic, e.g. the communication rounds the engine's
counters add up to, declared so even inside an entry that trains) and a *consistency* check
(arithmetic whose expected value was itself inferred from the same paper, e.g. the FedTAN
iteration counts inferred from Table 5's percentages).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "KINDS",
    "VERDICTS",
    "Claim",
    "at_least",
    "at_most",
    "info",
    "linked",
    "monotone",
    "no_interval",
    "per_seed_claim",
    "within",
]

from bnfl.experiments._claim import _ROUNDING, KINDS, VERDICTS, Claim, _finite, no_interval
from bnfl.experiments.interval_claims import interval_claim, interval_monotone


def _judge(
    name: str, statement: str, measured: float | None, threshold: float | None, margin: float | None,
    detail: str, *, soft: bool, noise: float | None, noise_label: str, why: str, kind: str,
) -> Claim:
    """The verdict of ``margin`` against ``noise``, with a ``why`` for every fail / inconclusive."""
    nz = _finite(noise)
    if soft:
        return Claim(name, statement, "info", measured, threshold, margin, detail, "", nz, kind)
    if margin is None:  # NaN or a missing measurement cannot show the effect
        return Claim(name, statement, "fail", measured, threshold, None, detail,
                     why or "the measurement is not finite (a run diverged or produced no value)", nz, kind)
    # A margin no larger than the noise (up to the 3-decimal rounding of stored accuracies) is no
    # evidence either way: one test sample more or less would flip it.
    if nz is not None and nz > 0 and abs(margin) <= nz + _ROUNDING:
        reason = (f"margin {margin:+.3g} is not larger than the noise {nz:.3g}"
                  + (f" ({noise_label})" if noise_label else ""))
        return Claim(name, statement, "inconclusive", measured, threshold, margin, detail,
                     reason + (f"; {why}" if why and margin < 0 else ""), nz, kind)
    if margin >= 0:
        return Claim(name, statement, "pass", measured, threshold, margin, detail, "", nz, kind)
    return Claim(name, statement, "fail", measured, threshold, margin, detail,
                 why or f"measured {measured:.4g} misses the threshold {threshold:.4g} by {-margin:.3g}", nz, kind)


def _per_seed(measured: Any) -> bool:
    """Whether ``measured`` holds one value per seed (a sequence), not one number."""
    return isinstance(measured, Sequence) or (hasattr(measured, "ndim") and getattr(measured, "ndim", 0) == 1)


def _by_interval(name: str, statement: str, measured: Any, threshold: float, side: str, *, detail: str, why: str,
                 kind: str, interval: Mapping[str, Any] | None) -> Claim:
    opts = dict(interval or {})
    return interval_claim(name, statement, list(measured), opts.pop("baseline", None), threshold=threshold,
                          side=side, detail=detail, why=why, kind=kind, **opts)


def at_least(name: str, statement: str, measured: float | Sequence[float], threshold: float, *, detail: str = "",
             soft: bool = False, noise: float | None = None, noise_label: str = "", why: str = "",
             kind: str = "reproduction", interval: Mapping[str, Any] | None = None) -> Claim:
    """Claim ``measured >= threshold``; margin ``measured - threshold``.

    ``soft=True`` records the margin but reports verdict ``"info"`` (the catalog says "report
    it rather than fail hard" for uncalibrated checks). ``noise``: a margin smaller than it in
    absolute value is ``"inconclusive"``. ``why``: the one-line reason printed if it fails.

    ``measured`` given per seed (a sequence) makes the verdict an interval's
    (:func:`bnfl.experiments.interval_claims.interval_claim`): ``interval`` holds its options,
    e.g. ``{"baseline": bn_per_seed, "seeds": [0, 1, 2], "n_test": 360, "method": "t"}`` for the
    paired difference ``measured - baseline``; ``soft`` and ``noise`` do not apply then.
    """
    return _bound("above", name, statement, measured, threshold, detail=detail, soft=soft, noise=noise,
                  noise_label=noise_label, why=why, kind=kind, interval=interval)


def at_most(name: str, statement: str, measured: float | Sequence[float], threshold: float, *, detail: str = "",
            soft: bool = False, noise: float | None = None, noise_label: str = "", why: str = "",
            kind: str = "reproduction", interval: Mapping[str, Any] | None = None) -> Claim:
    """Claim ``measured <= threshold``; margin ``threshold - measured`` (options, and ``measured``
    per seed: see :func:`at_least`)."""
    return _bound("below", name, statement, measured, threshold, detail=detail, soft=soft, noise=noise,
                  noise_label=noise_label, why=why, kind=kind, interval=interval)


def _bound(side: str, name: str, statement: str, measured: float | Sequence[float], threshold: float, *,
           detail: str, soft: bool, noise: float | None, noise_label: str, why: str, kind: str,
           interval: Mapping[str, Any] | None) -> Claim:
    """:func:`at_least` (``side="above"``) and :func:`at_most` (``"below"``)."""
    if _per_seed(measured):
        return _by_interval(name, statement, measured, threshold, side, detail=detail, why=why, kind=kind,
                            interval=interval)
    m, t = _finite(measured), float(threshold)
    margin = None if m is None else (m - t if side == "above" else t - m)
    text = detail or f"measured {m if m is None else round(m, 4)} {'>=' if side == 'above' else '<='} {round(t, 4)}"
    return _judge(name, statement, m, t, margin, text, soft=soft, noise=noise, noise_label=noise_label,
                  why=why, kind=kind)


def within(name: str, statement: str, a: float, b: float, tol: float, *, detail: str = "",
           noise: float | None = None, noise_label: str = "", why: str = "",
           kind: str = "reproduction") -> Claim:
    """Claim ``|a - b| <= tol``; measured ``|a - b|``, margin ``tol - |a - b|`` (options: see :func:`at_least`)."""
    fa, fb = _finite(a), _finite(b)
    d = None if fa is None or fb is None else abs(fa - fb)
    margin = None if d is None else float(tol) - d
    text = detail or f"|{fa} - {fb}| = {d if d is None else round(d, 4)} <= {tol}"
    return _judge(name, statement, d, float(tol), margin, text, soft=False, noise=noise,
                  noise_label=noise_label, why=why, kind=kind)


def monotone(
    name: str,
    statement: str,
    values: Sequence[float],
    *,
    increasing: bool = True,
    tolerance: float = 0.0,
    allowed_violations: int = 0,
    max_violation: float = math.inf,
    labels: Sequence[Any] | None = None,
    noise: float | None = None,
    noise_label: str = "",
    why: str = "",
    interval: Mapping[str, Any] | None = None,
) -> Claim:
    """Claim a sequence is monotone up to ``tolerance`` per step, forgiving a few small violations.

    ``values`` given per seed (one sequence of per-seed values per setting) makes the verdict the
    intervals' (:func:`bnfl.experiments.interval_claims.interval_monotone`: a step violates only when
    its interval lies wholly the wrong way; the end-to-end change's interval passes, fails or leaves
    it inconclusive); ``interval`` holds its options (``{"seeds": [...], "n_test": 360}``), and
    ``max_violation``, ``noise`` do not apply then. Otherwise, with one number per setting:

    A step ``v[j] -> v[j+1]`` *violates* when it moves the wrong way by more than ``tolerance``.
    Up to ``allowed_violations`` violations of size at most ``max_violation`` are forgiven
    (the catalog's "non-decreasing in k, with one 1-pt violation allowed" is
    ``tolerance=0, allowed_violations=1, max_violation=1``). The margin is the smallest slack
    left: ``tolerance - worst remaining step`` and, if any step was forgiven,
    ``max_violation - largest forgiven step``.
    """
    if values and all(_per_seed(v) for v in values):
        cols = [[float(x) for x in v] for v in values]
        if len({len(c) for c in cols}) != 1:
            raise ValueError(f"{name}: give one value per seed in every setting, got {[len(c) for c in cols]}")
        return interval_monotone(name, statement, cols, increasing=increasing, tolerance=tolerance,
                                 allowed_violations=allowed_violations, labels=labels, why=why,
                                 **dict(interval or {}))
    vals = [_finite(v) for v in values]
    labels = list(labels) if labels is not None else list(range(len(vals)))
    if len(labels) != len(vals):
        raise ValueError(f"{len(labels)} labels for {len(vals)} values; give one label per value")
    if any(v is None for v in vals):
        return Claim(name, statement, "fail", None, tolerance, None, f"non-finite value in {list(values)}",
                     why or "a value is not finite (a run diverged)")
    sign = 1.0 if increasing else -1.0
    # Wrong-way size of each step (positive = moves against the claimed direction).
    steps = [sign * (vals[j] - vals[j + 1]) for j in range(len(vals) - 1)]  # type: ignore[operator]
    violations = sorted((d for d in steps if d > tolerance), reverse=True)
    forgivable = [d for d in violations if d <= max_violation]
    forgiven = sorted(forgivable)[: allowed_violations]  # forgive the smallest ones that qualify
    rest = list(steps)
    for d in forgiven:
        rest.remove(d)
    # Slack of the worst remaining step (a strictly monotone sequence has positive slack).
    margin = tolerance - max(rest) if rest else tolerance
    if forgiven:
        margin = min(margin, max_violation - max(forgiven))
    shown = ", ".join(f"{lab}: {v:.2f}" for lab, v in zip(labels, vals, strict=True))
    direction = "non-decreasing" if increasing else "non-increasing"
    detail = (
        f"{shown}; {direction} up to {tolerance} per step; {len(violations)} wrong-way step(s) "
        f"beyond that ({len(forgiven)} forgiven, at most {allowed_violations} of size <= {max_violation})"
    )
    measured = max(violations) if violations else 0.0
    return _judge(name, statement, measured, tolerance, margin, detail, soft=False, noise=noise,
                  noise_label=noise_label, why=why, kind="reproduction")


def info(name: str, statement: str, measured: float | None, *, detail: str = "",
         kind: str = "reproduction") -> Claim:
    """A number the catalog asks to report, not to assert (verdict ``"info"``)."""
    return Claim(name, statement, "info", _finite(measured), None, None, detail, "", None, kind)


def linked(claim: Claim, entry: str) -> Claim:
    """``claim`` marked as a re-reading of a measurement that entry ``entry`` already counts.

    Use it where two entries show the same runs (FedBN's Fig. 8 and Table 13, say): the claim is
    kept, with its verdict, and the report links it to ``entry`` but counts it there only, so no
    measurement is counted twice.
    """
    if not entry or not isinstance(entry, str):
        raise ValueError(f"linked: entry must be an entry id such as 'fedbn-tab11', got {entry!r}")
    return dataclasses.replace(claim, counted_in=entry)


def per_seed_claim(name: str, statement: str, values: Sequence[float], threshold: float, *,
                   baseline: Sequence[float] | None = None, seeds: Sequence[int], n_test: int | None = None,
                   side: str = "above", detail: str = "", why: str = "", kind: str = "reproduction") -> Claim:
    """``mean(values) [- mean(baseline)] >= threshold`` (``side="below"``: ``<=``) over the seeds of an
    entry: with 2 or more seeds the 95% t-interval, paired by seed with ``baseline`` (the compared runs
    share seeds and partitions), stored in ``Claim.interval``; with one seed (the smoke profile, or
    ``--seeds 1``) the single value against one test sample (``100 / n_test``) as its noise floor.
    The one place the papers' entries turn per-seed values into a claim."""
    fn = {"above": at_least, "below": at_most}[side]
    vals = [float(v) for v in values]
    if len(vals) != len(seeds) or (baseline is not None and len(baseline) != len(vals)):
        raise ValueError(f"{name}: {len(vals)} values, {len(seeds)} seeds and "
                         f"{None if baseline is None else len(baseline)} baseline values must agree: one per seed")
    if len(vals) >= 2:
        return fn(name, statement, vals, threshold, detail=detail, why=why, kind=kind,
                  interval={"baseline": None if baseline is None else [float(b) for b in baseline],
                            "seeds": [int(s) for s in seeds], "n_test": n_test})
    one = vals[0] - (float(baseline[0]) if baseline is not None else 0.0)
    noise = 100.0 / n_test if n_test else None
    return fn(name, statement, one, threshold, detail=detail, why=why, kind=kind, noise=noise,
              noise_label=f"one test sample = {noise:.2f} pts of {n_test}; 1 seed" if noise else "")
