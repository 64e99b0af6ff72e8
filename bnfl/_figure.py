"""bnfl's figure style, below everything that draws: the rcParams, a styled figure, the palette.

:mod:`bnfl.plots` is the public face (it adds a method's own colour and marker from the method
table, and writing figures to disk); the data and theory packages, which sit below the method
table, draw with this module.
"""

from __future__ import annotations

import os
from typing import Any

import matplotlib

if not os.environ.get("MPLBACKEND") and matplotlib.get_backend().lower() not in {"agg"}:
    # Headless by default (CI, CLI); notebooks set their own inline backend.
    try:  # pragma: no cover - depends on the environment
        import IPython  # noqa: F401

        if IPython.get_ipython() is None:
            matplotlib.use("Agg")
    except ImportError:  # pragma: no cover
        matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["PALETTE", "STYLE", "new_figure", "palette_color", "palette_marker", "style"]

#: rcParams applied by :func:`style` and :func:`new_figure`.
STYLE: dict[str, Any] = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": 9,
    "lines.linewidth": 1.8,
    "svg.fonttype": "none",
    "svg.hashsalt": "bnfl",
}

#: Colours of things that are not methods (clients, classes), in order; a method's own colour is
#: in the method table (:func:`bnfl.plots.color_for`).
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


MARKERS = "osD^v<>ph"


def palette_color(index: int) -> str:
    """Palette colour ``index`` (cycling)."""
    return PALETTE[index % len(PALETTE)]


def palette_marker(index: int) -> str:
    """Palette marker ``index`` (cycling)."""
    return MARKERS[index % len(MARKERS)]


def style() -> None:
    """Apply bnfl's figure style to matplotlib's global rcParams."""
    plt.rcParams.update(STYLE)


def new_figure(
    nrows: int = 1, ncols: int = 1, *, width: float = 4.2, height: float = 3.2, **kwargs: Any
) -> tuple[Figure, Any]:
    """A styled figure with ``nrows x ncols`` panels of ``width x height`` inches each.

    Returns ``(fig, axes)`` as :func:`matplotlib.pyplot.subplots` does.
    """
    style()
    kwargs.setdefault("squeeze", True)
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), **kwargs)
