"""One figure style for all of bnfl, and the one way figures are written to disk.

Experiments keep computing, plotting and writing apart::

    result = run(config)                 # numbers only
    fig = plots.curves(...)              # a Figure, nothing written
    save_figure(fig, "fedtan-fig4", provenance={...})   # figures/fedtan-fig4.{png,svg,json}
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from bnfl import _atomic
from bnfl._figure import STYLE, new_figure, palette_color, palette_marker, style
from bnfl._version import __version__, git_commit
from bnfl.methods import METHODS

__all__ = [
    "STYLE",
    "color_for",
    "marker_for",
    "git_commit",
    "figures_dir",
    "forest",
    "label_for",
    "new_figure",
    "save_figure",
    "style",
]

def _method(name: str) -> Any:
    """The :class:`~bnfl.methods.Method` named by an id or a label (case-insensitive); ``None``
    when none matches."""
    methods = list(METHODS.values())
    key = name.lower()
    by_id = {m.id: m for m in methods}
    if key in by_id:
        return by_id[key]
    by_label = {m.label.lower(): m for m in methods}
    return by_label.get(key)


def label_for(method: str) -> str:
    """The label of a method (id or label of :data:`bnfl.methods.METHODS`), else ``method`` itself."""
    m = _method(method)
    return m.label if m is not None else method


def color_for(method: str, index: int = 0) -> str:
    """Colour of a method (id or label of :data:`bnfl.methods.METHODS`), else palette colour ``index``."""
    m = _method(method)
    return m.color if m is not None else palette_color(index)


def marker_for(method: str, index: int = 0) -> str:
    """Marker of a method (id or label of :data:`bnfl.methods.METHODS`), else a marker by ``index``."""
    m = _method(method)
    return m.marker if m is not None else palette_marker(index)


def forest(ax: Any, items: Sequence[Mapping[str, Any]], *, xlabel: str = "", null: float | None = 0.0) -> None:
    """Draw a forest plot on ``ax``: one row per item, top to bottom, each its interval as a thick
    horizontal bar with the estimate as a dot (as rliable draws intervals), its threshold as a
    black tick and, where given, a second reference value (the paper's effect) as a hollow diamond.

    Parameters
    ----------
    ax : matplotlib Axes
    items : sequence of mapping
        Each with ``label``, ``estimate``, ``low``, ``high`` and ``color``; optional ``threshold``
        (a number, or ``(-tol, tol)`` for an equivalence band, drawn as two ticks) and ``paper``.
    xlabel : str
        The x axis' label (the items' units).
    null : float or None, default 0.0
        Where "no effect" is: a thin vertical line (``None``: none).
    """
    n = len(items)
    for i, it in enumerate(items):
        y = n - 1 - i
        ax.plot([it["low"], it["high"]], [y, y], color=it["color"], lw=5, alpha=0.55, solid_capstyle="butt")
        ax.plot([it["estimate"]], [y], "o", color=it["color"], ms=5, zorder=3)
        thr = it.get("threshold")
        for t in (thr if isinstance(thr, (tuple, list)) else [thr] if thr is not None else []):
            ax.plot([t], [y], marker="|", color="black", ms=11, mew=1.6, zorder=4)
        if it.get("paper") is not None:
            ax.plot([it["paper"]], [y], "D", mfc="none", mec="black", ms=5.5, mew=1.0, zorder=4)
    if null is not None:
        ax.axvline(null, color="0.4", lw=0.8, zorder=0)
    ax.set_yticks(range(n), [it["label"] for it in reversed(items)])
    ax.set_ylim(-0.7, n - 0.3)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(xlabel)


def figures_dir() -> Path:
    """Where notebooks write figures: ``$BNFL_FIGURES_DIR`` if set, else ``figures/`` at the
    repository root (the checkout bnfl is imported from), else ``./figures``.

    CI sets ``BNFL_FIGURES_DIR`` to a temporary folder so executing notebooks leaves the tree clean.
    """
    env = os.environ.get("BNFL_FIGURES_DIR")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parent.parent
    return root / "figures" if (root / "pyproject.toml").exists() else Path("figures")


def save_figure(
    fig: Figure,
    figure_id: str,
    *,
    out_dir: str | os.PathLike[str] = "figures",
    provenance: Mapping[str, Any] | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> dict[str, Path]:
    """Write ``fig`` as ``out_dir/<figure_id>.<fmt>`` plus ``<figure_id>.json`` provenance.

    Parameters
    ----------
    fig : Figure
        The figure to write; it is not closed (the caller decides).
    figure_id : str
        File stem, usually a catalog id such as ``"fedtan-fig4"``.
    out_dir : path, default ``"figures"``
        Created if missing.
    provenance : mapping, optional
        Extra facts to record (profile, seed, duration, command ...). JSON-serialisable.
    formats : sequence of str, default ``("png", "svg")``

    Returns
    -------
    dict
        ``{format: path}`` of every file written, including ``"json"``.
    """
    if not figure_id or any(c in figure_id for c in "/\\ "):
        raise ValueError(f"figure_id {figure_id!r} must be a non-empty file stem without slashes or spaces")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for fmt in formats:
        path = out / f"{figure_id}.{fmt}"
        # A fixed date in the metadata keeps the files identical for identical figures.
        metadata = {"Date": None} if fmt == "svg" else {"Software": "bnfl"}
        with _atomic.atomic_path(path) as tmp:  # an interrupted write leaves the previous file, never half
            fig.savefig(tmp, format=fmt, metadata=metadata)
        written[fmt] = path
    record = {
        "id": figure_id,
        "bnfl_version": __version__,
        "git_commit": git_commit(),
        "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "files": sorted(p.name for p in written.values()),
        **dict(provenance or {}),
    }
    json_path = out / f"{figure_id}.json"
    _atomic.write_text(json_path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")  # last: it
    # records which result the figure files show, so a figure is current only once all are written
    written["json"] = json_path
    return written
