"""Seeded claims of the HBN entries that compare two methods run on the same seeds (Tables 4, 5, 8-10,
Fig. 7): a paired 95% t-interval per comparison, a "k of n" count decided by those intervals, and the
treatment of diverged runs (a pair in which both runs diverged is reported, not counted against HBN).

With one seed (the smoke profile) there is no interval: the comparison falls back to the margin
against one test sample (:func:`bnfl.experiments.claims.at_least` with ``noise``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments.claims import Claim, at_least, info, per_seed_claim
from bnfl.experiments.curves import fmt_mean_std
from bnfl.experiments.papers.hbn.setups import acc

__all__ = ["count_of", "fmt", "mean_of", "paired_at_least", "per_seed"]


def per_seed(runs: Sequence[Mapping[str, Any]], of: Any = None) -> list[float]:
    """One number per seed run: ``of(run)`` (default: the final test accuracy, NaN if diverged)."""
    return [float((of or acc)(r)) for r in runs]


def mean_of(values: Sequence[float]) -> float:
    """Mean over seeds; NaN when any seed is NaN (a diverged run is not averaged away)."""
    arr = np.asarray(list(values), dtype=float)
    return float(arr.mean()) if arr.size and np.isfinite(arr).all() else math.nan


def fmt(values: Sequence[float]) -> str:
    """``"96.11 ± 0.42"`` (mean ± sample std over seeds, the shared
    :func:`~bnfl.experiments.curves.fmt_mean_std` format of every HBN table), ``"96.11 (1 seed)"``,
    ``"diverged"`` when every seed diverged, the per-seed list when only some did."""
    arr = np.asarray(list(values), dtype=float)
    if not arr.size or not np.isfinite(arr).all():
        return "diverged" if arr.size and not np.isfinite(arr).any() else f"{[round(v, 2) for v in arr.tolist()]}"
    return fmt_mean_std(float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else math.nan)


def paired_at_least(name: str, statement: str, a: Sequence[float], b: Sequence[float], threshold: float, *,
                    seeds: Sequence[int], n_test: int, detail: str = "", why: str = "",
                    kind: str = "reproduction") -> Claim:
    """Claim ``mean(a - b) >= threshold`` with ``a``, ``b`` per seed (paired by position: the runs share
    seed, initialisation, batches and partition), by its 95% t-interval.

    Diverged seeds: where ``a`` diverged and ``b`` did not, the claim fails (the method of ``a`` broke
    where the baseline trained). Where both diverged (or only ``b``), the comparison has no evidence
    either way: the claim is reported as ``info`` with what diverged, and not counted. With one seed:
    the margin against one test sample decides (``inconclusive`` within it).
    """
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b) or len(a) != len(seeds):
        raise ValueError(f"{name}: {len(a)} and {len(b)} values for {len(seeds)} seeds; give one per seed")
    fa, fb = [math.isfinite(v) for v in a], [math.isfinite(v) for v in b]
    if not all(fa) or not all(fb):
        broke = [s for s, x, y in zip(seeds, fa, fb, strict=True) if not x and y]
        if broke:
            return at_least(name, statement, math.nan, threshold, detail=detail or f"diverged at seed(s) {broke}",
                            why=(why + "; " if why else "") + f"diverged at seed(s) {broke} where the baseline trained",
                            kind=kind)
        both = [s for s, x, y in zip(seeds, fa, fb, strict=True) if not x and not y]
        only_b = [s for s, x, y in zip(seeds, fa, fb, strict=True) if x and not y]
        text = (f"both runs diverged at seed(s) {both}" if both else "") + \
               (("; " if both else "") + f"only the baseline diverged at seed(s) {only_b}" if only_b else "")
        return info(name, statement + f" (not decided: {text})", None,
                    detail=(detail + "; " if detail else "") + text + (f"; {why}" if why else ""), kind=kind)
    return per_seed_claim(name, statement, a, threshold, baseline=b, seeds=seeds, n_test=int(n_test),
                          detail=detail, why=why, kind=kind)


def count_of(name: str, statement: str, items: Mapping[str, Claim], need: int, *,
             kind: str = "reproduction") -> Claim:
    """Claim "at least ``need`` of ``items`` hold", each item an interval (or one-seed) claim.

    ``pass`` when at least ``need`` items pass; ``fail`` when fewer than ``need`` could still pass
    (passing plus inconclusive); ``inconclusive`` otherwise. An ``info`` item (both runs diverged)
    cannot count as a success. The items' intervals are stored in ``Claim.interval``.
    """
    verdicts = {k: c.verdict for k, c in items.items()}
    wins = [k for k, v in verdicts.items() if v == "pass"]
    open_ = [k for k, v in verdicts.items() if v == "inconclusive"]
    detail = ", ".join(f"{k}: {c.detail} ({c.verdict})" for k, c in items.items())
    base = at_least(name, statement, float(len(wins)), float(need), detail=detail, kind=kind)
    if len(wins) >= need:
        v, why = "pass", ""
    elif len(wins) + len(open_) < need:
        v, why = "fail", (f"{len(wins)} of {len(items)} hold by their intervals ({', '.join(wins) or 'none'}); "
                          f"{len(open_)} undecided; {need} needed")
    else:
        v, why = "inconclusive", (f"{len(wins)} hold by their intervals, {len(open_)} undecided "
                                  f"({', '.join(open_)}); {need} needed")
    record = {"method": "count of per-item 95% intervals", "need": int(need), "passing": wins, "undecided": open_,
              "items": {k: c.interval for k, c in items.items()}}
    return dataclasses.replace(base, verdict=v, why=why, interval=record)
