"""Headline claims moved onto the proxy that the BN-only calibration recommends (issue 25 item 3).

``bench-calib-proxies`` (:mod:`bnfl.experiments.calibration`, ``docs/calibration.md``) scales each
headline claim's paper effect to every candidate proxy by the ratio of the proxies' BN damage and
compares it with the proxy's resolution, from centralized-BN and FedAvg+BN runs only, before any fix
runs. Where the entry's current proxy cannot resolve the claim, the claim moves to the recommended
proxy: its runs use the calibration's own setting (:data:`bnfl.experiments.calibration.FAMILIES`:
model, partition, rounds, local steps, batch size, learning rate) on the recommended data set, so
the damage the calibration measured is the damage the fix must repair there; the entry adds only
what its claim is about (FedTAN Table 2's momentum column: the momentum recipe).

:data:`CHOICES` records each move with the calibration numbers the choice was made from (what
``bench-calib-proxies`` printed at quick, 5 seeds, before any of these claims ran on the new proxy);
``tests/test_claims_audit.py`` checks that they follow the calibration's rule
(:func:`bnfl.experiments.calibration.recommend`). :func:`proxy_spec` builds the run spec and
:func:`choice_note` the sentence each entry writes into its deviations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bnfl.experiments.calibration import CANDIDATES, FACTOR, FAMILIES, HEADLINE_SEEDS
from bnfl.experiments.core import deep_merge

__all__ = ["CHOICES", "ProxyChoice", "choice_note", "proxy_config", "proxy_spec"]


@dataclass(frozen=True)
class ProxyChoice:
    """One headline claim moved onto a calibrated proxy.

    Attributes
    ----------
    entry, claim : str
        The headline claim (:data:`bnfl.experiments.headlines.HEADLINES`).
    family : str
        The calibration setting (a key of :data:`bnfl.experiments.calibration.FAMILIES`).
    chosen : str
        The recommended candidate (a key of ``CANDIDATES[family]``).
    calibration : tuple of (candidate, scaled effect, resolution at 5 seeds, seeds needed or None)
        What the calibration printed for this claim, the current proxy first (points).
    """

    entry: str
    claim: str
    family: str
    chosen: str
    calibration: tuple[tuple[str, float, float, int | None], ...]


#: bench-calib-proxies at quick, 5 seeds (its committed result.json; recomputed by the lead's run):
#: scaled paper effect vs resolution r(5) = max(100/n_test, sd/sqrt(5)); resolved when effect >= 2 r.
CHOICES: dict[tuple[str, str], ProxyChoice] = {
    ("fedtan-tab2", "with mom.-non-iid"): ProxyChoice(
        "fedtan-tab2", "with mom.-non-iid", "label skew", "Q-GAUSS(10)",
        (("Q-DIG", 2.20, 1.82, 14), ("Q-GAUSS(10)", 1.99, 0.36, 1), ("MNIST-5K", 1.28, 1.10, 15))),
    ("fixbn-tab5", "fixbn-best"): ProxyChoice(
        "fixbn-tab5", "fixbn-best", "shards", "Q-GAUSS(10)",
        (("Q-DIG", 2.58, 1.52, 7), ("Q-GAUSS(10)", 3.29, 0.82, 2), ("MNIST-5K", 2.38, 1.58, 9))),
}


def _choice(entry: str, claim: str) -> ProxyChoice:
    try:
        return CHOICES[(entry, claim)]
    except KeyError:
        raise ValueError(f"no calibrated proxy for {entry} / {claim!r}; known: "
                         f"{', '.join(f'{e} / {c}' for e, c in CHOICES)}") from None


def proxy_spec(entry: str, claim: str, *parts: Mapping[str, Any]) -> dict[str, Any]:
    """The run spec of ``entry``'s ``claim`` on its calibrated proxy: the calibration's setting
    (:data:`~bnfl.experiments.calibration.FAMILIES`) on the chosen data set, then ``parts`` merged in
    order (the method, the entry's own additions, a smoke override)."""
    c = _choice(entry, claim)
    out = deep_merge(FAMILIES[c.family], {"data": dict(CANDIDATES[c.family][c.chosen])})
    for p in parts:
        out = deep_merge(out, p)
    return out


def proxy_config(entry: str, claim: str, *, override: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``"proxy"`` table of an entry's configuration: the chosen data set (so the entry's title
    names the stand-in and its configuration hash changes with the choice) and a run ``override``
    (the smoke profile's few rounds)."""
    c = _choice(entry, claim)
    return {"claim": claim, "data": dict(CANDIDATES[c.family][c.chosen]), "override": dict(override or {})}


def choice_note(entry: str, claim: str, *, recipe: str = "") -> str:
    """One sentence for the entry's deviations: where the claim moved, why, with the calibration
    numbers, and the recipe it runs (``recipe`` adds what the entry changes in the setting)."""
    c = _choice(entry, claim)
    fam = FAMILIES[c.family]
    train = fam["train"]
    nums = "; ".join(f"{cand}: scaled effect {eff:.2f} vs resolution {res:.2f} pts"
                     + (f", {need} seed{'s' if need != 1 else ''} needed" if need is not None
                        else ", no seed count suffices")
                     for cand, eff, res, need in c.calibration)
    current = c.calibration[0][0]
    return (f"claim {claim!r} runs on {c.chosen} (n_test 5,000), not on {current}: bench-calib-proxies (BN-only "
            f"calibration, centralized BN and FedAvg+BN before any fix ran) found that {current} cannot resolve the "
            f"paper's effect at {HEADLINE_SEEDS} seeds and recommends {c.chosen}, the first candidate whose scaled "
            f"effect is >= {FACTOR:g}x its resolution ({nums}). Its runs use the calibration's {c.family} setting: "
            f"Q-MLP-BN (the same MLP with the layer swapped), partition {fam['partition']}, R = {fam['rounds']} "
            f"rounds of E = {train['local_steps']} local steps, B = {train['batch_size']}, lr {train['lr']:g}"
            + (f"; {recipe}" if recipe else "") + f". The entry's other numbers stay on {current}")
