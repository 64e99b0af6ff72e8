"""The settings of ``bench-bn-fixes`` and the FedAvg+BN calibration that chose their scales.

Three settings, each a family of candidate scales (quick profile: the embedded digits, Q-MLP-BN):

* ``label skew``: Q-DIG (flat), 5 clients holding ``k`` of the 10 classes each (B = 32, E = 5
  local steps, lr 0.1: fedtan-fig4's quick recipe), candidates k = 6, 4, 2 (k must be even
  for 10 classes on 5 clients);
* ``feature shift``: Q-DOM (the digits in styled domains, flat), one client per domain, FedBN's
  per-client protocol (each domain scored on its own test set), candidates: three domain sets;
* ``small batch + skew``: Q-DIG (flat), 10 clients with Dirichlet(phi) label shares, batches of
  B = 2 or 4, lr 0.05; candidates (B, phi) = (4, 0.3), (4, 0.1), (2, 0.1).

Each setting's control is the same run with an iid split (same clients, same batch size).

The scale of each setting was chosen *before any fix ran*, from FedAvg+BN alone
(:func:`calibrate`, ``benchmarks/calibrate_bench_bn_fixes.py``): its *damage* is the paired
difference (iid control minus skewed) over 5 seeds, the accuracy the fixes have to repair. The rule
(:func:`choose`): among the candidates whose damage has its 95% t-interval wholly above
:data:`DAMAGE_MIN` points, the one with the smallest damage (a setting where BN is clearly hurt, but
not the most extreme one); if none qualifies, the one with the largest damage. The numbers it saw
are in :data:`CALIBRATION` and in the entry's notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnfl.experiments import training
from bnfl.experiments.calibration import metric, score
from bnfl.experiments.core import Context, deep_merge
from bnfl.intervals import Interval, estimate

__all__ = ["CALIBRATION", "CANDIDATES", "CHOSEN", "DAMAGE_MIN", "SETTINGS", "calibrate", "choose", "metric",
           "setting_spec"]

#: A candidate qualifies when its FedAvg+BN damage's 95% interval lies wholly above this (points).
DAMAGE_MIN = 5.0
#: Rounds of every setting at quick (evaluated once, at the end).
ROUNDS = 100

_DIGITS = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": ROUNDS}
_DOMAINS = {"data": {"name": "digit_domains", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": ROUNDS,
            "partition": {"kind": "by_domain"}}
_TRAIN = {"local_steps": 5, "batch_size": 32, "lr": 0.1, "eval_every": ROUNDS}

#: ``{setting: {candidate name: (skewed spec, iid control spec)}}`` without the method.
CANDIDATES: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {
    "label skew": {
        f"k={k}": (deep_merge(_DIGITS, {"partition": {"kind": "classes_per_client", "k": k, "num_clients": 5},
                                        "train": _TRAIN}),
                   deep_merge(_DIGITS, {"partition": {"kind": "iid", "num_clients": 5}, "train": _TRAIN}))
        for k in (6, 4, 2)
    },
    "feature shift": {
        name: (deep_merge(_DOMAINS, {"data": {"domains": list(doms)}, "train": _TRAIN}),
               deep_merge(_DOMAINS, {"data": {"domains": list(doms)},
                                     "partition": {"kind": "iid", "num_clients": len(doms)}, "train": _TRAIN}))
        for name, doms in (("clean+blur+thick", ("clean", "blur", "thick")),
                           ("clean+contrast+noise", ("clean", "contrast", "noise")),
                           ("D0-D5", ("clean", "contrast", "blur", "noise", "thick", "gain")))
    },
    "small batch + skew": {
        f"B={b}, phi={phi}": (
            deep_merge(_DIGITS, {"partition": {"kind": "dirichlet", "phi": phi, "num_clients": 10},
                                 "train": {**_TRAIN, "batch_size": b, "lr": 0.05}}),
            deep_merge(_DIGITS, {"partition": {"kind": "iid", "num_clients": 10},
                                 "train": {**_TRAIN, "batch_size": b, "lr": 0.05}}))
        for b, phi in ((4, 0.3), (4, 0.1), (2, 0.1))
    },
}
#: The three settings, in the figure's order.
SETTINGS: tuple[str, ...] = tuple(CANDIDATES)


def setting_spec(setting: str, candidate: str, method: str, *, control: bool = False) -> dict[str, Any]:
    """The run spec of ``method`` in ``setting`` at scale ``candidate`` (``control``: its iid split)."""
    skewed, iid = CANDIDATES[setting][candidate]
    return deep_merge(iid if control else skewed, {"method": method})


def damage(ctx: Context, setting: str, candidate: str) -> tuple[Interval, list[float], list[float]]:
    """FedAvg+BN's damage at ``candidate``: the paired t-interval of (iid control - skewed) over
    ``ctx.seeds``, with both per-seed accuracies."""
    skew = [score(setting, r) for r in training.train_seeds(ctx, setting_spec(setting, candidate, "fedavg+bn"))]
    iid = [score(setting, r) for r in training.train_seeds(ctx, setting_spec(setting, candidate, "fedavg+bn", control=True))]
    return estimate(iid, skew, paired=True, method="t"), iid, skew


def choose(damages: Mapping[str, Interval]) -> str:
    """The candidate :func:`calibrate`'s rule picks from ``{candidate: damage interval}`` (module docstring)."""
    if not damages:
        raise ValueError("choose needs at least one candidate")
    ok = {c: iv for c, iv in damages.items() if iv.low > DAMAGE_MIN}
    if ok:
        return min(ok, key=lambda c: ok[c].estimate)
    return max(damages, key=lambda c: damages[c].estimate)


def calibrate(ctx: Context, settings: Sequence[str] = SETTINGS) -> dict[str, dict[str, Any]]:
    """Run FedAvg+BN (only) on every candidate of ``settings``; ``{setting: {"chosen": name,
    "candidates": {name: {"damage": [low, est, high], "iid": mean, "skewed": mean}}}}``."""
    out: dict[str, dict[str, Any]] = {}
    for setting in settings:
        ivs, rows = {}, {}
        for cand in CANDIDATES[setting]:
            iv, iid, skew = damage(ctx, setting, cand)
            ivs[cand] = iv
            rows[cand] = {"damage": [round(iv.low, 2), round(iv.estimate, 2), round(iv.high, 2)],
                          "iid": round(float(np.mean(iid)), 2), "skewed": round(float(np.mean(skew)), 2)}
        out[setting] = {"chosen": choose(ivs), "candidates": rows}
    return out


#: What :func:`calibrate` printed at the quick profile, 5 seeds (0-4), batched engine, on the
#: 2-core AVX-512 machine in 84 s, before any fix was run: FedAvg+BN's accuracy with the iid split and the
#: skewed one, and the damage (iid - skewed) as [95% low, mean, 95% high] in points.
CALIBRATION: dict[str, dict[str, Any]] = {
    "label skew": {"candidates": {
        "k=6": {"damage": [-1.05, -0.22, 0.6], "iid": 97.22, "skewed": 97.44},
        "k=4": {"damage": [-0.01, 1.22, 2.46], "iid": 97.22, "skewed": 96.0},
        "k=2": {"damage": [16.44, 20.61, 24.78], "iid": 97.22, "skewed": 76.61},
    }},
    "feature shift": {"candidates": {
        "clean+blur+thick": {"damage": [6.87, 9.06, 11.25], "iid": 93.44, "skewed": 84.39},
        "clean+contrast+noise": {"damage": [9.17, 15.72, 22.28], "iid": 95.33, "skewed": 79.61},
        "D0-D5": {"damage": [5.97, 10.17, 14.37], "iid": 93.61, "skewed": 83.44},
    }},
    "small batch + skew": {"candidates": {
        "B=4, phi=0.3": {"damage": [0.37, 1.0, 1.63], "iid": 94.5, "skewed": 93.5},
        "B=4, phi=0.1": {"damage": [6.86, 9.89, 12.92], "iid": 94.5, "skewed": 84.61},
        "B=2, phi=0.1": {"damage": [3.89, 13.94, 24.0], "iid": 63.22, "skewed": 49.28},
    }},
}

#: The scale :func:`choose` picked for each setting from :data:`CALIBRATION`.
CHOSEN: dict[str, str] = {"label skew": "k=2", "feature shift": "clean+blur+thick", "small batch + skew": "B=4, phi=0.1"}
