"""Per-seed claims for FedTAN's and FixBN's trained entries: every verdict from a 95% interval.

An entry hands each claim its per-seed values (one number per seed of the context, in the order of
``ctx.seeds``); the claim compares them, paired by seed with a baseline where the two settings
share seeds (hence initialisation, batches and partition), by the t-interval of
:mod:`bnfl.experiments.intervals`, and stores the interval (``Claim.interval``). With a single
seed (the smoke profile) there is no interval: the claim falls back to the margin of the mean
against one test sample (``100 / n_test`` points) as noise.

:class:`Seeds` carries what every claim of an entry shares (the seeds and the test-set size):

>>> ev = Seeds(ctx, runs)                                                  # doctest: +SKIP
>>> ev.at_least("gap", "FedTAN - FedAvg+BN >= 8", finals(tan), 8.0, baseline=finals(avg))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments.claims import Claim, monotone, per_seed_claim, within
from bnfl.experiments.curves import rounds_to
from bnfl.experiments.interval_claims import interval_monotone, interval_within
from bnfl.experiments.training import final

__all__ = ["Seeds", "finals", "finite_or", "per_seed", "rounds_to_each"]


def finals(runs: Sequence[Mapping[str, Any]], key: str = "test_acc") -> list[float]:
    """The last evaluated ``key`` of each run (one per seed; NaN for a run that diverged)."""
    return [final(r, key) for r in runs]


def per_seed(runs: Sequence[Mapping[str, Any]], fn: Any) -> list[float]:
    """``fn(run)`` for each run (a per-seed statistic other than the final accuracy)."""
    return [float(fn(r)) for r in runs]


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
        self._check(values, baseline)
        return per_seed_claim(name, statement, values, threshold, baseline=baseline, seeds=self.seeds,
                              n_test=self.n_test, side="above", detail=detail, why=why, kind=kind)

    def at_most(self, name: str, statement: str, values: Sequence[float], threshold: float, *,
                baseline: Sequence[float] | None = None, detail: str = "", why: str = "",
                kind: str = "reproduction") -> Claim:
        """``mean(values) (- mean(baseline)) <= threshold``; paired by seed with ``baseline``."""
        self._check(values, baseline)
        return per_seed_claim(name, statement, values, threshold, baseline=baseline, seeds=self.seeds,
                              n_test=self.n_test, side="below", detail=detail, why=why, kind=kind)

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


def finite_or(values: Sequence[float], cap: float) -> list[float]:
    """``values`` with ``inf`` (never reached) replaced by ``cap`` (e.g. the run's length), so an
    interval can be formed; the claim's detail should say so."""
    return [cap if math.isinf(v) else float(v) for v in values]
