"""Can a quick proxy resolve the paper's effect? BN-only calibration of the headline claims.

For every headline claim (:data:`bnfl.experiments.headlines.HEADLINES`) this module compares the
paper's effect, scaled to a proxy, with what the proxy can resolve, using FedAvg+BN and centralized
BN runs only (the damage a fix must repair), *before* any fix is run, so no choice below can depend
on a fix's outcome.

**The proxy's damage.** For a setting (:data:`FAMILIES`: the label skew and its iid control,
shards with many local steps, the small-batch Dirichlet skew, the feature shift) on a candidate data set (:data:`CANDIDATES`), the damage is
``D_proxy = mean over seeds of (centralized BN - FedAvg+BN)`` in accuracy points: the same model,
batch size and number of steps, all training data pooled in one client for the centralized run.

**The scaled effect.** A claim's paper effect ``E_paper`` (points) is scaled by the ratio of the
proxy's damage to the paper's own BN damage ``D_paper`` (:data:`EFFECTS` states each one's source):

.. math:: E_\\text{proxy} = E_\\text{paper} \\, D_\\text{proxy} / D_\\text{paper}

so an effect that repairs 90% of the paper's damage is asked to repair 90% of the proxy's. An
equivalence claim ("within 2 pts") keeps its own tolerance, unscaled; a claim whose paper effect
is not an accuracy in points (a loss curve, a figure with no printed number) is not scaled.

**The resolution.** One test sample, ``100 / n_test`` points, and the seed spread of the BN baseline
(the sample std ``s`` of FedAvg+BN over the calibration seeds, standing in for the spread of a
paired difference, which is unknown before the fix runs). With ``S`` seeds
(:data:`HEADLINE_SEEDS` = 5, issue 25's count for headline claims):

.. math:: r(S) = \\max\\big(100 / n_\\text{test},\\ s / \\sqrt{S}\\big)

A proxy *resolves* a claim when ``E_proxy >= 2 r(S)`` (:data:`FACTOR`). The seeds it would need:
the smallest ``S`` with ``s / sqrt(S) <= E_proxy / 2``, none when one test sample already exceeds
``E_proxy / 2``.

**The recommendation** (:func:`recommend`): the first candidate, in the order current proxy, Q-GAUSS
with ``n_test`` = 5,000, MNIST-5K, that resolves the claim at 5 seeds; else the candidate needing
the fewest seeds (with that count); else none.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bnfl.experiments import training
from bnfl.experiments.core import Context, deep_merge
from bnfl.experiments.training import final, mean_over_clients

__all__ = ["BENCH_REPAIR", "CANDIDATES", "DECIDING_SEEDS", "DECIDING_SEED_COUNTS", "EFFECTS", "FACTOR", "FAMILIES", "HEADLINE_SEEDS",
           "HEADLINE_SEED_COUNTS", "HEADLINE_SEED_GROUPS", "ROUNDS", "ClaimEffect", "chance", "headroom_share", "measure", "metric",
           "recommend", "resolution", "resolves", "rule_share", "rule_threshold", "scaled_effect", "score", "seeds_needed",
           "table"]

#: Seeds a headline claim runs (issue 25: 5 for the headline claims).
HEADLINE_SEEDS = 5
#: ``seeds=`` of an entry that holds a headline claim: :data:`HEADLINE_SEEDS` at quick and paper.
HEADLINE_SEED_COUNTS = {"smoke": 1, "quick": HEADLINE_SEEDS, "paper": HEADLINE_SEEDS}
#: Most seeds a headline claim runs to decide (issue 36: where at most 10 would decide an undecided
#: headline claim at its observed spread, it runs them).
DECIDING_SEEDS = 10
#: ``seeds=`` of an entry whose headline claim needed :data:`DECIDING_SEEDS` to be decided.
DECIDING_SEED_COUNTS = {"smoke": 1, "quick": DECIDING_SEEDS, "paper": HEADLINE_SEEDS}
#: ``seed_groups=`` of an entry that went from 3 seeds to :data:`HEADLINE_SEEDS`: seeds 0-2 stay one
#: lock-step group, so they are the same runs, bitwise, as the 3-seed entries sharing them (trained
#: once), and the added seeds train as another group.
HEADLINE_SEED_GROUPS = (3,)
#: A proxy resolves a claim when the scaled effect is at least this many resolutions.
FACTOR = 2.0
#: Rounds of every calibration run at quick (evaluated once, at the end).
ROUNDS = 60
#: Most seeds :func:`seeds_needed` reports (beyond it: "more than this").
MAX_SEEDS = 100

_TRAIN = {"local_steps": 5, "batch_size": 32, "lr": 0.1, "eval_every": ROUNDS}

#: The calibration settings: the BN-only spec without its data set. Every one trains Q-MLP-BN
#: (the quick proxies' cheapest BN model) so that all candidates share one model.
FAMILIES: dict[str, dict[str, Any]] = {
    # FedTAN/FixBN: 5 clients with 2 classes each (fedtan-fig4's quick recipe, bench-bn-fixes' k=2)
    "label skew": {"model": {"name": "q_mlp_bn"}, "rounds": ROUNDS, "train": _TRAIN,
                   "partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5}},
    # the iid control of the label skew (equivalence claims on iid data)
    "iid": {"model": {"name": "q_mlp_bn"}, "rounds": ROUNDS, "train": _TRAIN,
            "partition": {"kind": "iid", "num_clients": 5}},
    # FixBN: McMahan shards (2 label-sorted shards per client), many local steps (E = 20)
    "shards": {"model": {"name": "q_mlp_bn"}, "rounds": ROUNDS // 2, "train": {**_TRAIN, "local_steps": 20,
                                                                                "eval_every": ROUNDS // 2},
               "partition": {"kind": "shards", "shards_per_client": 2, "num_clients": 5}},
    # HBN: 10 Dirichlet(0.1) clients, B = 4 (bench-bn-fixes' small batch + skew)
    "small batch + skew": {"model": {"name": "q_mlp_bn"}, "rounds": ROUNDS,
                           "train": {**_TRAIN, "batch_size": 4, "lr": 0.05},
                           "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 10}},
    # FedBN: one client per styled domain, each domain scored on its own test set
    "feature shift": {"model": {"name": "q_mlp_bn"}, "rounds": ROUNDS, "train": _TRAIN,
                      "partition": {"kind": "by_domain"}},
}

_QDOM = ("clean", "contrast", "blur", "noise", "thick")  # FedBN's quick D0-D4
#: ``{family: {candidate: data spec}}``, the current proxy first. Q-DOM's domains share the 1,797
#: digits, so the feature shift has no larger-test-set candidate: more seeds is its only one.
CANDIDATES: dict[str, dict[str, dict[str, Any]]] = {
    **{f: {"Q-DIG": {"name": "digits", "form": "flat"},
           "Q-GAUSS(10)": {"name": "gaussian_mixture", "num_classes": 10, "n_test": 5000},
           "MNIST-5K": {"name": "mnist5k", "form": "flat"}}
       for f in ("label skew", "iid", "shards", "small batch + skew")},
    "feature shift": {"Q-DOM": {"name": "digit_domains", "form": "flat", "domains": list(_QDOM)}},
}


@dataclass(frozen=True)
class ClaimEffect:
    """A headline claim's effect in the paper and the paper's BN damage it is scaled by.

    Attributes
    ----------
    entry, claim : str
        The headline (:class:`~bnfl.experiments.headlines.Headline`) it calibrates.
    family : str
        A key of :data:`FAMILIES`.
    effect : float or None
        The paper's effect in points (``kind="effect"``), the tolerance (``"equivalence"``), None
        when the paper prints no accuracy effect (``"none"``).
    damage : float or None
        The paper's BN damage (points) the effect is scaled by (``kind="effect"`` only).
    kind : {"effect", "equivalence", "none"}
    source : str
        Where both numbers come from.
    """

    entry: str
    claim: str
    family: str
    effect: float | None
    damage: float | None
    kind: str
    source: str


def _e(entry: str, claim: str, family: str, effect: float | None, damage: float | None, source: str,
       kind: str = "effect") -> ClaimEffect:
    return ClaimEffect(entry, claim, family, effect, damage, kind, source)


_LS, _IID, _SH, _SB, _FS = "label skew", "iid", "shards", "small batch + skew", "feature shift"
#: The common benchmark's rule for every fix it runs (no paper): repair the proxy's whole damage,
#: ratio 1, so :func:`scaled_effect` of it is the damage the entry measures (``bench-bn-fixes``'
#: thresholds, and the two headline rows' EFFECTS).
BENCH_REPAIR = ClaimEffect("bench-bn-fixes", "*", _LS, 1.0, 1.0, "effect",
                           "no paper: the benchmark asks a fix to repair the proxy's whole damage (ratio 1)")
_FT = "FedTAN Table 1: centralized BN 91.53 - FedAvg+BN non-iid 45.90 = 45.63"
_FX = "FixBN Table 1: BN centralized 89.30 - FL 42.93 = 46.37"
_FX4 = "FixBN Table 4: Centralized+BN 91.53 - FedAvg+BN non-iid 45.96 = 45.57"
_FX5 = "FixBN Table 5 (Shards, E=100): Centralized+BN 91.53 (Table 4) - BN 53.97 = 37.56"
_HB = "HBN Table 1, CIFAR-10: BN at phi 0.6 75.82 - at phi 0.1 69.61 = 6.21 (no centralized run printed)"
_HB2 = "HBN Table 2 / Sec. 4.3: BN's drop from B=32 to B=2 at phi 0.6, 5.74"
_FB = ("FedBN Tables 12 and 11 (digits, mean of 5 domains): centralized 86.28 - FedAvg 82.68 = 3.60")

#: Every headline claim's paper effect and paper damage (the numbers are the papers', verbatim
#: or by the arithmetic shown; a figure without printed numbers uses the nearest printed table).
EFFECTS: tuple[ClaimEffect, ...] = (
    _e("fedtan-fig3", "b-fedavg+bn", _LS, 45.63, 45.63, "the damage itself; " + _FT),
    _e("fedtan-tab1", "fair-fedtan-gap", _LS, 41.76, 45.63, "FedTAN 87.66 - FedAvg+BN 45.90; " + _FT),
    _e("fedtan-fig4", "fair-iid-both", _IID, 2.0, None, "equivalence: the entry's tolerance |FedTAN - Central| <= 2 "
       "pts, unscaled (paper, iid: 91.26 vs 91.53)", "equivalence"),
    _e("fedtan-fig4", "fair-fedbn", _LS, 72.07, 45.63, "FedBN's loss vs centralized, 91.53 - 19.46; " + _FT),
    _e("fedtan-tab2", "every-cell", _LS, 5.00, 45.63, "the non-iid with-momentum cell, FedTAN 87.66 - FedAvg+GN "
       "82.66 (the count's other cells are scaled alike); " + _FT),
    _e("hbn-tab1", "hbn-best-Q-DIG phi=0.1", _SB, 1.20, 6.21, "HBN 71.56 - runner-up FixBN 70.36; " + _HB),
    _e("hbn-tab1", "hbn-vs-bn-Q-DIG phi=0.1", _SB, 1.95, 6.21, "HBN 71.56 - BN 69.61; " + _HB),
    _e("hbn-tab2", "drop-0.6", _SB, 3.55, 5.74, "BN's drop 5.74 - HBN's 2.19; " + _HB2),
    _e("hbn-tab2", "hbn-ge-bn-0.6-B2", _SB, 4.97, 5.74, "CIFAR-100, B=2: HBN 48.86 - BN 43.89; " + _HB2),
    _e("hbn-tab4", "gains", _SB, 1.0, 6.21, "the smallest of the 8 solvers' gains (+1.0); " + _HB),
    _e("hbn-tab6", "moving-average-worst", _SB, 4.08, 6.21, "next-worst ablation (4) 76.33 - (1) 72.25; " + _HB),
    _e("fixbn-tab1", "bn-gap", _LS, 46.37, 46.37, "the damage itself; " + _FX),
    _e("fixbn-fig1", "fair-fixbn-closes", _LS, 41.75, 45.57, "FedAvg+FixBN 87.71 - FedAvg+BN 45.96; " + _FX4),
    _e("fixbn-fig1", "star", _LS, None, None, "Fig. 1 prints no number for FixBN* vs FixBN", "none"),
    _e("fixbn-fig4", "fixbn-local-E1", _SH, None, None, "Fig. 4 prints no numbers (curves only)", "none"),
    _e("fixbn-fig3", "conv-every-partition", _SH, 16.87, 37.56,
       "Fig. 3 prints no numbers: Table 5's FixBN 76.56 - GN 59.69 (Shards, E=100); " + _FX5),
    _e("fixbn-tab5", "fixbn-best", _SH, 5.90, 37.56, "FixBN 76.56 - runner-up FixUp 70.66; " + _FX5),
    _e("fedbn-tab11", "fedbn-best-mean", _FS, 2.54, 3.60, "FedBN 85.22 - FedAvg 82.68; " + _FB),
    _e("fedbn-tab1", "office-best-mean", _FS, 7.75, 3.60, "Office-Caltech10 means: FedBN 70.48 - FedAvg 62.73 "
       "(no centralized run on Office); " + _FB),
    _e("fedbn-fig3", "fair-faster", _FS, None, None, "a training-loss curve, not an accuracy", "none"),
    _e("fedbn-fig4", "fair-a-E16", _FS, 2.37, 3.60, "Fig. 4a prints no numbers: Table 13 (B=10, E=16) means FedBN "
       "86.64 - FedAvg 84.27; " + _FB),
    _e("fedbn-tab17", "fedbn-fedprox-thin", _FS, 3.0, None, "equivalence: the entry's tolerance |FedBN - "
       "FedProx| <= 3 pts (paper: 92.45 vs 92.35)", "equivalence"),
    dataclasses.replace(BENCH_REPAIR, claim="label-skew-fedtan", family=_LS),
    dataclasses.replace(BENCH_REPAIR, claim="feature-shift-fedbn", family=_FS),
)


# ------------------------------------------------------------------------------------ arithmetic


def scaled_effect(effect: ClaimEffect, proxy_damage: float) -> float | None:
    """The paper's effect on the proxy, ``E_paper * D_proxy / D_paper`` (module docstring); an
    equivalence's tolerance unscaled; None when the claim has no accuracy effect."""
    if effect.kind == "equivalence":
        return effect.effect
    if effect.kind != "effect" or effect.effect is None or not effect.damage:
        return None
    return float(effect.effect) * float(proxy_damage) / float(effect.damage)


def _effect_of(entry: str, claim: str) -> ClaimEffect:
    found = [e for e in EFFECTS if (e.entry, e.claim) == (entry, claim)]
    if len(found) != 1 or found[0].kind != "effect" or found[0].effect is None or not found[0].damage:
        raise KeyError(f"calibration.EFFECTS has no paper effect and damage for {entry}/{claim}: add it there")
    return found[0]


def rule_threshold(entry: str, claim: str, damage: float) -> float:
    """The threshold of headline claim ``entry``/``claim`` by the calibration's one rule (issue 47,
    part 4): the paper's effect scaled to ``damage``, the BN damage the stand-in shows
    (:func:`scaled_effect`), rounded to 0.1 pt; 0 where the stand-in shows no damage (the claim's
    precondition then says it is not testable); NaN where the damage is not a number (a BN-only run
    diverged), so that the claim is undecided rather than judged against 0.

    FedTAN's repair (Table 1: 41.76 of 45.63 pts) asks a stand-in damaged by 19.8 pts for
    41.76 x 19.8 / 45.63 = 18.1 pts.
    """
    effect = _effect_of(entry, claim)
    if not math.isfinite(float(damage)):
        return math.nan
    scaled = scaled_effect(effect, max(float(damage), 0.0))
    return round(float(scaled), 1) if scaled is not None and math.isfinite(scaled) else 0.0


def rule_share(entry: str, claim: str) -> float:
    """The threshold of a headline claim whose quantity is the share of the BN damage a fix repairs,
    by the same rule: the paper's effect over the paper's damage (the share the paper's fix repairs),
    rounded to 0.01. FixBN's (Table 4: 41.75 of 45.57 pts) is 0.92."""
    e = _effect_of(entry, claim)
    return round(float(e.effect) / float(e.damage), 2)


def chance(ctx: Context, spec: Mapping[str, Any]) -> float:
    """Chance accuracy (%) of a run spec's data set, ``100 / classes`` (its split, memoised per
    process: :func:`bnfl.experiments.training.load_data`)."""
    return 100.0 / int(training.load_data(spec["data"], data_root=ctx.data_root).num_classes)


def headroom_share(paper_damage: float, paper_top: float, top: float, *, chance: float,
                   paper_chance: float = 10.0, fraction: float = 0.5) -> float:
    """``fraction`` of the paper's damage, as a share of the paper's headroom, on the stand-in's headroom.

    A damage claim ("FedAvg+BN collapses") measures the damage itself, so it cannot be scaled by
    the damage as :func:`scaled_effect` does. Its threshold is the paper's damage as a share of the
    paper's room above chance, ``paper_damage / (paper_top - paper_chance)``, applied to the
    stand-in's room above chance, ``top - chance``, times ``fraction`` (one half: the stand-in shows
    at least half the paper's relative collapse)::

        fraction * paper_damage / (paper_top - paper_chance) * (top - chance)

    FedTAN Table 1's collapse, 91.53 - 45.90 = 45.63 pts over 81.53 pts of headroom (56%), asks a
    10-class stand-in at 97.4% to lose at least 0.5 * 0.56 * 87.4 = 24.5 pts. A stand-in at or
    below chance has no room: 0.
    """
    room, paper_room = max(float(top) - float(chance), 0.0), float(paper_top) - float(paper_chance)
    if not paper_room > 0:
        raise ValueError(f"headroom_share: the paper's top {paper_top} must lie above its chance {paper_chance}")
    if not 0 < fraction <= 1:
        raise ValueError(f"headroom_share: fraction must lie in (0, 1], got {fraction}")
    return float(fraction) * float(paper_damage) / paper_room * room


def _check(sd: float, n_test: int, seeds: int) -> None:
    if not (math.isfinite(sd) and sd >= 0):
        raise ValueError(f"the seed std must be a finite number >= 0, got {sd}")
    if int(n_test) < 1:
        raise ValueError(f"n_test must be >= 1 (one test sample is 100/n_test points), got {n_test}")
    if int(seeds) < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")


def resolution(sd: float, n_test: int, seeds: int = HEADLINE_SEEDS) -> float:
    """``max(100 / n_test, sd / sqrt(seeds))`` in points: the smaller of one test sample and the
    standard error of a ``seeds``-seed mean cannot be resolved."""
    _check(sd, n_test, seeds)
    return max(100.0 / int(n_test), float(sd) / math.sqrt(int(seeds)))


def resolves(effect: float | None, sd: float, n_test: int, seeds: int = HEADLINE_SEEDS) -> bool | None:
    """``effect >= FACTOR * resolution(sd, n_test, seeds)`` (None when there is no effect to resolve;
    an effect <= 0, from a proxy with no damage, is never resolved)."""
    if effect is None:
        return None
    return float(effect) >= FACTOR * resolution(sd, n_test, seeds)


def seeds_needed(effect: float | None, sd: float, n_test: int) -> int | None:
    """The fewest seeds ``S`` with ``effect >= FACTOR * resolution(sd, n_test, S)``; None when no
    count does (one test sample is already more than ``effect / FACTOR``, or it needs more than
    :data:`MAX_SEEDS`)."""
    _check(sd, n_test, 1)
    if effect is None or float(effect) < FACTOR * 100.0 / int(n_test):
        return None
    need = max(1, math.ceil((FACTOR * float(sd) / float(effect)) ** 2 - 1e-12))
    return need if need <= MAX_SEEDS else None


def recommend(options: Sequence[Mapping[str, Any]]) -> str:
    """The proxy to use for one claim, from its candidates' rows in preference order (each with
    ``candidate``, ``resolves`` and ``seeds needed``): the first that resolves it at
    :data:`HEADLINE_SEEDS` seeds, else the one needing the fewest seeds, else none."""
    if not options:
        raise ValueError("recommend needs at least one candidate row")
    for o in options:
        if o["resolves"]:
            return str(o["candidate"])
    if all(o["resolves"] is None for o in options):
        return "not calibrated (no accuracy effect)"
    counted = [o for o in options if o["seeds needed"] is not None]
    if counted:
        best = min(counted, key=lambda o: o["seeds needed"])
        return f"{best['candidate']} with {best['seeds needed']} seeds"
    return "none resolves it"


# ------------------------------------------------------------------------------------ measuring


def metric(setting: str) -> str:
    """``"own domain"`` for the feature-shift setting (FedBN's protocol: each client's model, or the
    global model, on each domain's own test set, equal weights), else ``"global test set"`` (the
    global model on the whole test set; a per-client method, FedBN: its client models' mean there,
    FedTAN's protocol)."""
    return "own domain" if setting == "feature shift" else "global test set"


def score(setting: str, run: Mapping[str, Any]) -> float:
    """A run's final accuracy (%) under :func:`metric` (NaN when it diverged)."""
    if run.get("diverged"):
        return float("nan")
    return mean_over_clients(run) if metric(setting) == "own domain" else final(run)


def _score(family: str, run: Mapping[str, Any]) -> float:
    return score("feature shift" if family == "feature shift" else "label skew", run)


def measure(ctx: Context, family: str, candidate: str, *, override: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """Centralized BN and FedAvg+BN on ``candidate`` in ``family``, ``ctx.seeds`` in lock-step:
    per-seed accuracies, the damage (mean of centralized - federated), the federated seed std and
    the test size behind one sample (per domain for the feature shift)."""
    if family not in FAMILIES or candidate not in CANDIDATES.get(family, {}):
        raise ValueError(f"unknown calibration {family!r} / {candidate!r}; families: {', '.join(FAMILIES)}")
    base = deep_merge(deep_merge(FAMILIES[family], {"data": CANDIDATES[family][candidate]}), override or {})
    fed = training.train_seeds(ctx, {**base, "method": "fedavg+bn"})
    central = training.train_seeds(ctx, {**base, "method": "centralized"})
    a, b = [_score(family, r) for r in central], [_score(family, r) for r in fed]
    n_test = int(fed[0].get("n_test") or 0)
    if family == "feature shift":
        n_test //= len(CANDIDATES[family][candidate].get("domains") or [1])
    sd = float(np.std(b, ddof=1)) if len(b) > 1 else float("nan")
    return {"centralized": a, "federated": b, "damage": float(np.mean(a) - np.mean(b)), "sd": sd,
            "n_test": n_test}


def table(measured: Mapping[str, Mapping[str, Mapping[str, Any]]], effects: Sequence[ClaimEffect] = EFFECTS,
          ) -> list[dict[str, Any]]:
    """One row per (claim, candidate) from ``measured[family][candidate]`` (:func:`measure`'s
    dicts; a candidate missing there is skipped), with the claim's recommendation on each row."""
    rows: list[dict[str, Any]] = []
    for e in effects:
        cands = [c for c in CANDIDATES[e.family] if c in measured.get(e.family, {})]
        claim_rows = []
        for c in cands:
            m = measured[e.family][c]
            sd, n = float(m["sd"]), int(m["n_test"])
            ok = math.isfinite(sd) and n > 0
            eff = scaled_effect(e, m["damage"])
            res = resolution(sd, n) if ok else float("nan")
            claim_rows.append({
                "entry": e.entry, "claim": e.claim, "candidate": c, "current": c == next(iter(CANDIDATES[e.family])),
                "damage (pts)": round(m["damage"], 2), "BN seed std": round(sd, 2) if ok else None,
                "one test sample": round(100.0 / n, 2) if n else None,
                f"resolution at {HEADLINE_SEEDS} seeds": round(res, 2) if ok else None,
                "paper effect": e.effect, "paper damage": e.damage,
                "scaled effect": None if eff is None else round(eff, 2),
                "resolves": resolves(eff, sd, n) if ok else None,
                "seeds needed": seeds_needed(eff, sd, n) if ok else None,
                "how scaled": e.source})
        if not claim_rows:
            continue
        spread = all(r["BN seed std"] is not None for r in claim_rows)
        choice = recommend(claim_rows) if spread else "not calibrated (needs >= 2 seeds)"
        for r in claim_rows:
            r["recommended"] = choice
        rows += claim_rows
    return rows
