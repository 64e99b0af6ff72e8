"""Interval estimates over seeds: :mod:`bnfl.intervals`, under the name the experiments' claims
have always imported it by.

The module itself sits at the bottom of bnfl (numpy only, scipy on first use), so that
:mod:`bnfl.runs` can draw a seed band without importing the experiments toolkit.
"""

from __future__ import annotations

from bnfl.intervals import (
    METHODS,
    POWER,
    SIDES,
    Interval,
    bootstrap_interval,
    detectable_effect,
    estimate,
    paired_differences,
    seeds_to_decide,
    t_interval,
    t_quantile,
    verdict,
    welch_interval,
)

__all__ = ["METHODS", "POWER", "SIDES", "Interval", "bootstrap_interval", "detectable_effect", "estimate",
           "paired_differences", "seeds_to_decide", "t_interval", "t_quantile", "verdict", "welch_interval"]
