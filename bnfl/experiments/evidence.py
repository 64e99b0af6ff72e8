"""Per-seed claims of the trained entries: every verdict from a 95% interval over seeds.

An entry hands each claim its per-seed values (one number per seed of the context, in the order of
``ctx.seeds``); the claim compares them, paired by seed with a baseline where the two settings
share seeds (hence initialisation, batches and partition), by the t-interval of
:mod:`bnfl.experiments.intervals`, and stores the interval (``Claim.interval``). With a single
seed (the smoke profile) there is no interval: the claim falls back to the margin of the mean
against one test sample (``100 / n_test`` points) as noise.

:class:`Seeds` carries what every claim of an entry shares (the seeds and the test-set size):

>>> ev = Seeds(ctx, runs)                                                  # doctest: +SKIP
>>> ev.at_least("gap", "FedTAN - FedAvg+BN >= 8", finals(tan), 8.0, baseline=finals(avg))  # doctest: +SKIP

Comparisons that may meet diverged runs (HBN's Tables 4, 5, 8-10, Fig. 7) use
:func:`paired_at_least` (a pair in which both runs diverged is reported, not counted against the
method) and :func:`count_of` ("k of n" decided by the items' intervals).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments.claims import Claim, at_least, info, monotone, per_seed_claim, within
from bnfl.experiments.curves import final_stats, fmt_mean_std, rounds_to
from bnfl.experiments.interval_claims import interval_monotone, interval_within
from bnfl.experiments.intervals import estimate
from bnfl.experiments.training import final

__all__ = ["Seeds", "count_of", "finals", "finite_or", "first_hits", "fmt", "mean_of", "paired_at_least",
           "per_seed", "rounded", "rounds_to_each"]


def finals(runs: Sequence[Mapping[str, Any]], key: str = "test_acc") -> list[float]:
    """The last evaluated ``key`` of each run (one per seed; NaN for a run that diverged)."""
    return [final(r, key) for r in runs]


def rounds_to_each(runs: Sequence[Mapping[str, Any]], level: float | Sequence[float], *, x: str = "round",
                   key: str = "test_acc") -> list[float]:
    """Per seed: the first ``x`` value (``"round"``, or ``"mib"`` for MiB sent) whose ``key``
    reaches ``level`` (a number, or one per seed); ``inf`` when the run never does."""
    levels = [float(level)] * len(runs) if np.ndim(level) == 0 else [float(v) for v in level]  # type: ignore[arg-type]
    out = []
    for r, lv in zip(runs, levels, strict=True):
        xs = r[x] if x != "mib" else [b / 1024**2 for b in r["bytes_total"]]
        out.append(rounds_to({"x": list(xs), "y": list(r[key])}, lv))
    return out


class Seeds:
    """The seeds and test size of an entry's runs, and its claims judged over them.

    Parameters
    ----------
    seeds : sequence of int
        ``ctx.seeds`` (the order of every per-seed list handed to the claims).
    runs : sequence of run summaries, optional
        Any setting's runs, to read the test-set size ``n_test`` from.
    """

    def __init__(self, seeds: Sequence[int], runs: Sequence[Mapping[str, Any]] = ()) -> None:
        self.seeds = [int(s) for s in seeds]
        n = [int(r["n_test"]) for r in runs if r.get("n_test")]
        self.n_test: int | None = min(n) if n else None

    @property
    def one_sample(self) -> float | None:
        """One test sample in accuracy points, ``100 / n_test`` (``None`` when unknown)."""
        return None if not self.n_test else 100.0 / self.n_test

    def _noise(self) -> dict[str, Any]:
        one = self.one_sample
        return {} if one is None else {"noise": one, "noise_label": f"one test sample of {self.n_test}, 1 seed"}

    def _check(self, values: Sequence[float], baseline: Sequence[float] | None) -> None:
        if len(values) != len(self.seeds) or (baseline is not None and len(baseline) != len(self.seeds)):
            raise ValueError(f"per-seed values must hold one number per seed ({len(self.seeds)}), got "
                             f"{len(values)}" + ("" if baseline is None else f" and {len(baseline)}"))

    def at_least(self, name: str, statement: str, values: Sequence[float], threshold: float, *,
                 baseline: Sequence[float] | None = None, detail: str = "", why: str = "",
                 kind: str = "reproduction") -> Claim:
        """``mean(values) (- mean(baseline)) >= threshold``; paired by seed with ``baseline``."""
        return self._one_sided("above", name, statement, values, threshold, baseline, detail, why, kind)

    def at_most(self, name: str, statement: str, values: Sequence[float], threshold: float, *,
                baseline: Sequence[float] | None = None, detail: str = "", why: str = "",
                kind: str = "reproduction") -> Claim:
        """``mean(values) (- mean(baseline)) <= threshold``; paired by seed with ``baseline``."""
        return self._one_sided("below", name, statement, values, threshold, baseline, detail, why, kind)

    def _one_sided(self, side: str, name: str, statement: str, values: Sequence[float], threshold: float,
                   baseline: Sequence[float] | None, detail: str, why: str, kind: str) -> Claim:
        """:meth:`at_least` (``side="above"``) and :meth:`at_most` (``"below"``) over this entry's seeds."""
        self._check(values, baseline)
        return per_seed_claim(name, statement, values, threshold, baseline=baseline, seeds=self.seeds,
                              n_test=self.n_test, side=side, detail=detail, why=why, kind=kind)

    def within(self, name: str, statement: str, a: Sequence[float], b: Sequence[float], tol: float, *,
               detail: str = "", why: str = "", kind: str = "reproduction") -> Claim:
        """``|mean(a) - mean(b)| <= tol``, the paired difference's interval inside ``[-tol, tol]``."""
        self._check(a, b)
        if len(self.seeds) >= 2:
            return interval_within(name, statement, list(a), list(b), tol, seeds=self.seeds, n_test=self.n_test,
                                   detail=detail, why=why, kind=kind)
        return within(name, statement, float(np.mean(a)), float(np.mean(b)), tol, detail=detail, why=why,
                      kind=kind, **self._noise())

    def monotone(self, name: str, statement: str, columns: Sequence[Sequence[float]], *, increasing: bool = True,
                 tolerance: float = 0.0, allowed_violations: int = 0, labels: Sequence[Any] | None = None,
                 why: str = "") -> Claim:
        """The settings ``columns`` (each per seed) move one way; a step smaller than its interval is
        no violation (:func:`bnfl.experiments.interval_claims.interval_monotone`)."""
        for c in columns:
            self._check(c, None)
        if len(self.seeds) >= 2:
            return interval_monotone(name, statement, [list(c) for c in columns], increasing=increasing,
                                     tolerance=tolerance, allowed_violations=allowed_violations, labels=labels, seeds=self.seeds,
                                     n_test=self.n_test, why=why)
        one = self.one_sample or 0.0
        return monotone(name, statement, [float(np.mean(c)) for c in columns], increasing=increasing,
                        tolerance=max(tolerance, one), allowed_violations=allowed_violations, labels=labels, why=why)

    def versus(self, name: str, statement: str, runs: Sequence[Mapping[str, Any]],
               baseline: Sequence[Mapping[str, Any]], threshold: float = 0.0, *, names: tuple[str, str],
               below: bool = False, why: str = "", kind: str = "reproduction") -> Claim:
        """One method's runs against another's (one run per seed each) by their final test accuracy:
        :meth:`at_least` the paired difference ``runs - baseline`` (:meth:`at_most` with ``below``),
        its detail ``"<names[0]> <mean> vs <names[1]> <mean>"`` (seed means, 2 decimals).

        Parameters
        ----------
        name, statement : str
            As :meth:`at_least`.
        runs, baseline : sequence of run summaries
            One per seed of :attr:`seeds`, in that order.
        threshold : float, default 0.0
            In accuracy points.
        names : (str, str)
            How the detail names ``runs`` and ``baseline``.
        below : bool, default False
            Claim ``<= threshold`` instead of ``>= threshold``.
        why, kind : str
            As :meth:`at_least`.
        """
        judge = self.at_most if below else self.at_least
        detail = f"{names[0]} {final_stats(runs)[0]:.2f} vs {names[1]} {final_stats(baseline)[0]:.2f}"
        return judge(name, statement, finals(runs), threshold, baseline=finals(baseline), detail=detail, why=why,
                     kind=kind)


def first_hits(ev: Seeds, runs: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]], *,
               x: str = "round") -> tuple[list[float], list[float], list[float], float]:
    """When ``runs`` and ``baseline`` first reach the baseline's final accuracy, up to its noise, per seed.

    The target of a seed is the final accuracy of its ``baseline`` run; a curve has reached it once it
    comes within ``tol`` of it, ``tol`` the larger of one test sample and the half width of the 95%
    interval of the baseline's final accuracy over the seeds (a curve 0.18 pts under the target at its
    end has reached it, up to this noise; with one seed, one test sample).

    Parameters
    ----------
    ev : Seeds
        The entry's seeds and test size.
    runs, baseline : sequence of run summaries
        One run per seed each, in the order of ``ev.seeds``.
    x : str, default ``"round"``
        What the first hit is counted in (``"mib"``: the MiB sent so far), as :func:`rounds_to_each`.

    Returns
    -------
    hits, baseline_hits, targets : list of float
        Per seed (``inf`` where a curve never comes that close).
    tol : float
    """
    targets = finals(baseline)
    tol = ev.one_sample or 0.0
    if len(targets) >= 2 and all(math.isfinite(v) for v in targets):
        tol = max(tol, estimate(targets).half_width)
    level = [t - tol for t in targets]
    return rounds_to_each(runs, level, x=x), rounds_to_each(baseline, level, x=x), targets, tol


def rounded(value: float) -> float | None:
    """A table cell: ``value`` to 2 decimals, ``None`` (stored as null) when it is not finite."""
    return None if not math.isfinite(value) else round(value, 2)


def finite_or(values: Sequence[float], cap: float) -> list[float]:
    """``values`` with ``inf`` (never reached) replaced by ``cap`` (e.g. the run's length), so an
    interval can be formed; the claim's detail should say so."""
    return [cap if math.isinf(v) else float(v) for v in values]


def per_seed(runs: Sequence[Mapping[str, Any]], of: Any = None) -> list[float]:
    """One number per seed run: ``of(run)`` (default: the final test accuracy, NaN if diverged)."""
    return [float((of or final)(r)) for r in runs]


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
