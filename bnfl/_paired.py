"""Which run is better: the paired difference of final test accuracy against a baseline method.

Runs of two configurations that share seeds (the same partition and initialisation per seed)
are compared seed by seed: the difference of final test accuracy, in percentage points, with
the 95% Student t-interval of the per-seed differences (:func:`bnfl.intervals.t_interval`, as
the reports use) and a verdict word: ``better`` or ``worse`` when the interval lies on one side
of 0, ``inconclusive`` when it holds 0 (with the seeds that would decide, as the reports say).
``bnfl plot DIR... --baseline METHOD`` prints it; :func:`bnfl.runs.compare_to` returns it::

    for d in bnfl.runs.compare_to(bnfl.runs.find_runs(["runs"]), "fedavg+bn"):
        print(d)        # fedtan vs FedAvg+BN: +13.5 [6.6, 20.4] pts, better (3 seeds)
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bnfl import plots
from bnfl._run_groups import Group, _Run, group_runs
from bnfl.intervals import Interval, seeds_to_decide, t_interval

__all__ = ["Difference", "compare_to", "format_differences"]


@dataclass(frozen=True)
class Difference:
    """The paired difference of one configuration's final test accuracy against the baseline's.

    Attributes
    ----------
    run, baseline : str
        The configurations' labels (method ids, with a folder when two share a method).
    seeds : list
        The seeds both ran (the pairs).
    points : float or None
        Mean difference in percentage points (``None``: no shared seed).
    interval : Interval or None
        The 95% t-interval of the per-seed differences, in points (two or more shared seeds).
    word : str
        ``better``, ``worse``, ``inconclusive`` or why there is no interval.
    """

    run: str
    baseline: str
    seeds: list[Any]
    points: float | None
    interval: Interval | None
    word: str

    def __str__(self) -> str:
        return f"{self.run} vs {self.baseline}: {self.text()}"

    def text(self) -> str:
        """``"+13.5 [6.6, 20.4] pts, better (3 seeds)"``."""
        if self.points is None:
            return self.word
        n = len(self.seeds)
        if self.interval is None:
            return f"{self.points:+.1f} pts, {self.word}"
        return f"{self.interval}, {self.word} ({n} seeds)"


def _finals(g: Group) -> dict[Any, float]:
    """``{seed: final test accuracy in %}`` of the runs of ``g`` that recorded one."""
    out = {}
    for h in g.runs:
        acc = next((r["test_acc"] for r in reversed(h.rows) if r.get("test_acc") is not None), None)
        if acc is not None:
            seed = (h.meta.get("run") or {}).get("seed") if isinstance(h.meta.get("run"), dict) else None
            out[seed if seed is not None else len(out)] = 100.0 * float(acc)
    return out


def _pick(groups: list[Group], baseline: str) -> Group:
    key = baseline.lower()
    m = plots._method(baseline)
    for g in groups:
        if g.label.lower() == key or g.method.lower() == key or (m is not None and g.method == m.id):
            return g
    names = sorted({g.method for g in groups})
    near = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ValueError(f"--baseline {baseline!r}: no run of that method among the runs given{hint}; "
                     f"their methods: {', '.join(names)}")


def compare_to(runs: Sequence[_Run], baseline: str) -> list[Difference]:
    """One :class:`Difference` per configuration other than ``baseline`` (a method id or label,
    or a configuration's label as :func:`bnfl.runs.compare` shows it)."""
    groups = group_runs(runs)
    base = _pick(groups, baseline)
    b = _finals(base)
    out = []
    for g in groups:
        if g is base:
            continue
        a = _finals(g)
        shared = [s for s in a if s in b]
        if not shared:
            out.append(Difference(g.label, base.label, [], None, None,
                                  f"no seed in common with {base.label}: train both with the same --seed"))
            continue
        diffs = [a[s] - b[s] for s in shared]
        if len(shared) == 1:
            out.append(Difference(g.label, base.label, shared, diffs[0], None,
                                  "one shared seed, no interval: train both with two or more seeds (--seed 1, 2)"))
            continue
        iv = t_interval(diffs, paired=True, unit="%")
        if iv.low > 0 or iv.high < 0:
            word = "better" if iv.low > 0 else "worse"
        else:
            need = seeds_to_decide(iv, 0.0) if iv.sd > 0 else None
            word = "inconclusive" + (f": about {need} seeds would decide" if need else "")
        out.append(Difference(g.label, base.label, shared, iv.estimate, iv, word))
    return out


def format_differences(diffs: Sequence[Difference], baseline: str) -> str:
    """The differences as aligned lines under a one-line heading."""
    if not diffs:
        return f"(no other configuration to compare with {baseline})"
    width = max(len(d.run) for d in diffs)
    lines = [f"final test acc. minus {diffs[0].baseline}'s, paired by seed [95% t-interval], in pts:"]
    lines += [f"  {d.run.ljust(width)}  {d.text()}" for d in diffs]
    return "\n".join(lines)
