"""Sweep and curve helpers shared by every paper's training entries.

A training entry asks :func:`train_runs` for the runs of one setting (one per seed of the
context), then summarises them: :func:`final_stats` (mean, std of the last evaluation),
:func:`curve` (mean and std of an evaluated curve), :func:`late_loss`, :func:`roughness`,
:func:`rounds_to`, and :func:`noise`, the size below which a difference between two
settings is not evidence (the seed spread, or one test sample).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments import training
from bnfl.experiments.core import Context, deep_merge
from bnfl.experiments.training import final, mean_std

__all__ = [
    "accuracy_row",
    "curve",
    "final_stats",
    "fmt_mean_std",
    "late_loss",
    "loss_curve",
    "merge_specs",
    "noise",
    "rounds_to",
    "roughness",
    "train_runs",
    "upticks",
]

MIB = 1024**2


def merge_specs(base: Mapping[str, Any], *overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with each override deep-merged in, in order (nested tables merge key by key)."""
    out = dict(base)
    for ov in overrides:
        out = deep_merge(out, ov)
    return out


def train_runs(ctx: Context, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One training run of ``spec`` per seed of ``ctx`` (cached; see :mod:`bnfl.experiments.training`)."""
    return training.train_seeds(ctx, spec)


def final_stats(runs: Sequence[Mapping[str, Any]], key: str = "test_acc") -> tuple[float, float]:
    """Mean and sample std over seeds of the last evaluated ``key`` (std NaN for one seed)."""
    return mean_std([final(r, key) for r in runs])


def curve(runs: Sequence[Mapping[str, Any]], key: str = "test_acc", x: str = "round") -> dict[str, Any]:
    """Mean and std over seeds of an evaluated curve (runs that diverged are cut where they stopped)."""
    n = min(len(r.get(key) or []) for r in runs)
    if n == 0:
        return {"x": [], "y": [], "std": [], "diverged": any(r.get("diverged") for r in runs)}
    ys = np.array([r[key][:n] for r in runs], dtype=float)
    return {
        "x": list(runs[0][x][:n]) if x in runs[0] else list(range(1, n + 1)),
        "y": ys.mean(0).round(4).tolist(),
        "std": (ys.std(0, ddof=1) if len(runs) > 1 else np.zeros(n)).round(4).tolist(),
        "comm_rounds": list(runs[0]["comm_rounds"][:n]),
        "mib": [round(b / MIB, 4) for b in runs[0]["bytes_total"][:n]],
        "diverged": any(r.get("diverged") for r in runs),
    }


def loss_curve(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean training loss per round over seeds."""
    n = min(len(r["train_loss"]) for r in runs)
    ys = np.array([r["train_loss"][:n] for r in runs], dtype=float)
    return {"x": list(range(1, n + 1)), "y": ys.mean(0).round(5).tolist()}


def late_loss(runs: Sequence[Mapping[str, Any]], skip: float = 0.2) -> float:
    """Mean training loss after the first ``skip`` fraction of rounds (mean over seeds)."""
    vals = []
    for r in runs:
        loss = [v for v in r["train_loss"] if v is not None]
        vals.append(float(np.mean(loss[int(skip * len(loss)):])) if loss else float("nan"))
    return float(np.mean(vals))


def roughness(runs: Sequence[Mapping[str, Any]]) -> float:
    """Mean absolute change of accuracy between consecutive evaluations (pts), mean over seeds."""
    return float(np.mean([np.mean(np.abs(np.diff(r["test_acc"]))) if len(r["test_acc"]) > 1 else 0.0
                          for r in runs]))


def upticks(curve: Sequence[float]) -> int:
    """Rounds where the loss went up (``curve[t] > curve[t-1]``): what "smoother" counts. (The
    variance of the round-to-round changes would reward a slow descent: a loss that falls fast
    has large early changes.)"""
    c = np.asarray(curve, dtype=float)
    return int(np.sum(np.diff(c) > 0)) if c.size > 1 else 0


def rounds_to(c: Mapping[str, Any], level: float, *, x: str = "x") -> float:
    """First point of curve ``c`` (its ``x`` values, or another key such as ``"mib"``) whose mean
    accuracy reaches ``level`` (inf if never)."""
    for xv, y in zip(c[x], c["y"], strict=True):
        if y >= level:
            return float(xv)
    return math.inf


def fmt_mean_std(m: float, s: float) -> str:
    """``"91.26 ± 0.21"``, ``"97.50 (1 seed)"`` or ``"diverged"``."""
    if not math.isfinite(m):
        return "diverged"
    return f"{m:.2f} (1 seed)" if not math.isfinite(s) else f"{m:.2f} ± {s:.2f}"


def accuracy_row(setting: str, label: str, runs: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """A result row: setting, method label, final test accuracy mean and std, seed count."""
    m, sd = final_stats(runs)
    row = {"setting": setting, "method": label, "test acc (%)": None if not math.isfinite(m) else round(m, 2),
           "std": None if not math.isfinite(sd) else round(sd, 2), "seeds": len(runs)}
    if any(r.get("diverged") for r in runs):
        row["note"] = "diverged (non-finite loss)"
    row.update(extra)
    return row


def noise(*settings: Sequence[Mapping[str, Any]], key: str = "test_acc") -> tuple[float, str]:
    """The noise floor of a comparison between ``settings`` (each a list of runs over seeds), in pts.

    The larger of the seed std of the final ``key`` over any setting (NaN with one seed: not
    counted) and the test set's resolution, one test sample = ``100 / n_test`` points (from the
    runs' ``n_test``). Returns ``(value, label)``; ``(nan, "")`` when neither is known.
    """
    stds = [final_stats(runs, key)[1] for runs in settings]
    stds = [s for s in stds if math.isfinite(s)]
    n_tests = [int(r["n_test"]) for runs in settings for r in runs if r.get("n_test")]
    parts: list[tuple[float, str]] = []
    if stds:
        parts.append((max(stds), f"seed std {max(stds):.2f} pts"))
    if n_tests:
        res = 100.0 / min(n_tests)
        parts.append((res, f"one test sample = {res:.2f} pts of {min(n_tests)}"))
    if not parts:
        return float("nan"), ""
    value = max(v for v, _ in parts)
    return value, "; ".join(label for _, label in parts)
