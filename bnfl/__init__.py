"""bnfl: Batch Normalization in federated learning, measured, verified and repaired.

The core modules are imported eagerly (they are small); heavier subpackages
(``bnfl.fl``, ``bnfl.experiments``, ``bnfl.theory``) are imported on demand.
"""

from __future__ import annotations

from bnfl import fedtan, grads, stats  # the core math; torch only
from bnfl._version import __version__

__all__ = ["__version__", "diagnose", "fedtan", "grads", "load_run", "stats"]


def __getattr__(name: str):  # bnfl.diagnose(model, data, ...) without importing bnfl.fl at startup
    if name == "diagnose":
        # on first use: the diagnosis imports the engine, which `import bnfl` keeps out (startup cost)
        from bnfl.diagnosis import diagnose

        return diagnose
    if name == "load_run":  # bnfl.load_run(folder): a run's History, with .plot() (bnfl.runs)
        # on first use: bnfl.runs imports the engine, which `import bnfl` keeps out (startup cost)
        from bnfl.runs import load_run

        return load_run
    raise AttributeError(f"module 'bnfl' has no attribute {name!r}")
