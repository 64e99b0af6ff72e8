"""Which bnfl is running: the release (``__version__``) and the git commit of the checkout it is
imported from. The lowest layer (standard library only), so that a run's provenance
(:mod:`bnfl.train._provenance`) and a figure's (:func:`bnfl.plots.save_figure`) can both name it
without importing the package ``bnfl`` or :mod:`bnfl.plots` from below."""

from __future__ import annotations

import subprocess
from pathlib import Path

__version__ = "0.1.0"

__all__ = ["__version__", "git_commit"]


def git_commit() -> str | None:
    """Short hash of the checkout's HEAD commit, or ``None`` outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
