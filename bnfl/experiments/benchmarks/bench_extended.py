"""The extended benchmark's settings, methods and calibration rule: DECLARED, NOT YET RUN.

This module states the protocol the extended ``bnfl bench`` is to run (issue 51, part 2): five
settings, each the home ground of one fix and each with an iid control, a conv net in every
setting, and 13 methods. Nothing here has been trained: :data:`CALIBRATION` and :data:`CHOSEN`
are empty until :func:`calibrate` has run, and ``bnfl bench`` still runs ``bench-bn-fixes``'
three settings (:mod:`.bench`). ``tests/test_bench_cli.py`` checks that every declared run spec
builds (data, partition, model, algorithm) and that every declared n/a has its reason.

Settings (quick profile: the embedded 8x8 digits as 1x8x8 images, the conv net Q-SCNN; GroupNorm
over channels for FedAvg+GN, as the papers use it):

* ``label skew`` (FedTAN's): 5 clients holding k classes each; candidates k = 4, 2;
* ``feature shift`` (FedBN's): one client per styled domain, each domain scored on its own test set;
* ``many clients, partial participation`` (HBN's): 50 Dirichlet(phi) clients, 20% sampled each
  round, batches of 2-4; candidates (B, phi) = (4, 0.3), (4, 0.1), (2, 0.1);
* ``many local steps`` (FixBN's): 10 Dirichlet(0.1) clients, E local steps per round at a fixed
  budget of 2,000 local steps; candidates E = 20, 50;
* ``unseen client`` (FedBN App. G): trained on three domains, scored on a domain no client holds
  (``thin`` or ``fracture``).

Calibration rule (before any fix runs, as for ``bench-bn-fixes``): FedAvg+BN alone on every
candidate and its iid control over 5 seeds; the damage is the paired 95% t-interval of (iid -
skewed); :func:`bnfl.experiments.benchmarks.bn_fixes_settings.choose` picks the candidate with the
smallest damage among those whose interval lies wholly above 5 points, else the largest damage.
"""

from __future__ import annotations

from typing import Any

from bnfl.experiments.benchmarks.bn_fixes_settings import DAMAGE_MIN, choose
from bnfl.experiments.core import deep_merge

__all__ = ["CALIBRATION", "CANDIDATES", "CHOSEN", "METHODS", "MODEL", "NOT_APPLICABLE", "RULE", "STATUS",
           "calibrate", "run_spec"]

#: Whether anything of this module has run.
STATUS = "declared, not yet run: no calibration, no training"
#: The conv net of every setting (a method's norm picks its layers: BN, GN over channels, LN, ...).
MODEL: dict[str, Any] = {"name": "q_scnn"}
_DIGITS = {"data": {"name": "digits", "form": "image"}, "model": MODEL}
_DOMAINS = {"data": {"name": "digit_domains", "form": "image"}, "model": MODEL, "partition": {"kind": "by_domain"}}
_TRAIN = {"local_steps": 5, "batch_size": 32, "lr": 0.1, "eval_every": 100}


def _pair(base: dict[str, Any], skew: dict[str, Any], clients: int, train: dict[str, Any],
          rounds: int = 100) -> tuple[dict[str, Any], dict[str, Any]]:
    """(skewed spec, iid control spec): the same run but for the partition."""
    t = {**_TRAIN, **train, "eval_every": rounds}
    skewed = deep_merge(base, {"partition": skew, "train": t, "rounds": rounds})
    control = deep_merge(base, {"partition": {"kind": "iid", "num_clients": clients}, "train": t, "rounds": rounds})
    return skewed, control


_SEEN = ("clean", "blur", "thick")

#: ``{setting: {candidate: (skewed spec, iid control spec)}}`` without the method.
CANDIDATES: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {
    "label skew": {f"k={k}": _pair(_DIGITS, {"kind": "classes_per_client", "k": k, "num_clients": 5}, 5, {})
                   for k in (4, 2)},
    "feature shift": {
        "+".join(d): (deep_merge(_DOMAINS, {"data": {"domains": list(d)}, "train": _TRAIN, "rounds": 100}),
                      deep_merge(_DOMAINS, {"data": {"domains": list(d)}, "train": _TRAIN, "rounds": 100,
                                            "partition": {"kind": "iid", "num_clients": len(d)}}))
        for d in (_SEEN, ("clean", "contrast", "noise"))},
    "many clients, partial participation": {
        f"B={b}, phi={phi}": _pair(_DIGITS, {"kind": "dirichlet", "phi": phi, "num_clients": 50}, 50,
                                   {"batch_size": b, "lr": 0.05, "participation": 0.2})
        for b, phi in ((4, 0.3), (4, 0.1), (2, 0.1))},
    "many local steps": {
        f"E={e}": _pair(_DIGITS, {"kind": "dirichlet", "phi": 0.1, "num_clients": 10}, 10, {"local_steps": e},
                        rounds=2000 // e)
        for e in (20, 50)},
    "unseen client": {
        f"unseen={u}": (deep_merge(_DOMAINS, {"data": {"domains": list(_SEEN)}, "train": _TRAIN, "rounds": 100,
                                              "unseen": [u]}),
                        deep_merge(_DOMAINS, {"data": {"domains": list(_SEEN)}, "train": _TRAIN, "rounds": 100,
                                              "partition": {"kind": "iid", "num_clients": len(_SEEN)},
                                              "unseen": [u]}))
        for u in ("thin", "fracture")},
}

#: The methods, every BN-relevant row of the Method table that applies (FixUp: FedAvg without
#: normalisation on the FixUp-initialised residual net, given as ``(method, model)``).
METHODS: tuple[str, ...] = ("fedavg+bn", "fedavg+gn", "fedavg+ln", "fedtan", "fedtan2", "hbn", "fixbn", "fedbn",
                            "silobn", "fbn", "fedavg+fedfn", "fedavg+gn-ws", "fixup")
#: The model a method trains instead of :data:`MODEL`.
MODEL_OF: dict[str, dict[str, Any]] = {"fixup": {"name": "q_res_fixup"}}
#: The method id a benchmark name trains.
METHOD_OF: dict[str, str] = {"fixup": "fedavg+none"}

#: ``{(setting, method): why}``: the cells that say why a method does not apply.
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("unseen client", "fedbn"): ("FedBN keeps every client's BN statistics and affine parameters local: a client "
                                 "that never trained has none to evaluate with"),
    ("unseen client", "silobn"): ("SiloBN keeps every client's BN statistics local: a client that never trained "
                                  "has none to evaluate with"),
}

#: The calibration rule in words (module docstring).
RULE = (f"FedAvg+BN only, before any fix: per candidate the paired 95% t-interval of (iid control - skewed) over "
        f"5 seeds; the smallest damage among those wholly above {DAMAGE_MIN:g} points, else the largest")
#: What :func:`calibrate` printed: empty, not yet run.
CALIBRATION: dict[str, dict[str, Any]] = {}
#: The candidate the rule picked per setting: empty, not yet run.
CHOSEN: dict[str, str] = {}


def run_spec(setting: str, candidate: str, method: str, *, control: bool = False) -> dict[str, Any]:
    """The declared run spec of ``method`` (a name of :data:`METHODS`) in ``setting`` at ``candidate``
    (the ``unseen`` key names the held-out domain, read by the FedBN-protocol observer, not by the spec)."""
    if (setting, method) in NOT_APPLICABLE:
        raise ValueError(f"{method} does not apply to {setting}: {NOT_APPLICABLE[(setting, method)]}")
    skewed, iid = CANDIDATES[setting][candidate]
    spec = deep_merge(iid if control else skewed, {"method": METHOD_OF.get(method, method)})
    if method in MODEL_OF:
        spec["model"] = dict(MODEL_OF[method])
    return spec


def calibrate(damages: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The rule (:data:`RULE`) applied to measured damage intervals ``{setting: {candidate: Interval}}``."""
    return {setting: choose(ivs) for setting, ivs in damages.items()}
