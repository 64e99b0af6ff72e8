"""Moved to :mod:`bnfl.experiments.drawing` (the names stay importable from here)."""

from bnfl.experiments.drawing import (
    bars_vs_paper,
    curve_panels,
    domains_plot,
    fedtan_ii_plot,
    iid_noniid_plot,
)

__all__ = ["bars_vs_paper", "curve_panels", "domains_plot", "fedtan_ii_plot", "iid_noniid_plot"]
