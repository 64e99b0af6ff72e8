"""The layers of bnfl, from the bottom up: a module imports only from its own layer or below.

Data flows one way (the design's ``stats -> grads -> nn -> fl -> experiments``); this table says
where every package and top-level module stands. ``tests/test_layers.py`` reads every import
statement of every module (inside functions and under ``TYPE_CHECKING`` too) and fails on one that
reaches up, and on a module no layer names. A module belongs to the longest name listed that
contains it (``bnfl.experiments.papers.hbn.toy`` to ``bnfl.experiments.papers``).

Why each sits where it does:

* the foundations import nothing of bnfl above them: checks, atomic writes, version, the registry
  helper, the functional BN kernels, interval estimates and how numbers and tables are shown;
* the figure style (:mod:`bnfl._figure`: rcParams, a styled figure, the palette) is low because the
  data package draws with it;
* the engine layer holds :mod:`bnfl.fl` with the method table it runs (:mod:`bnfl.methods`), the
  public plotting module that colours a method as the table says (:mod:`bnfl.plots`) and the run
  folders it writes and reads back (:mod:`bnfl.runs`);
* the run layer (:mod:`bnfl.train`: configs, the builder, accounting by method id, cross-silo,
  ``bnfl train``) stands on the engine and the method table, and reads run folders back;
* the theory package draws methods in their colours, so it stands on the engine layer;
* the diagnosis tool and the demo sit on the engine, below the experiments: ``bnfl diagnose`` needs
  no reproduction toolkit; the live diagnosis widgets (:mod:`bnfl.diagnosis.interactive`) draw the
  demo's model, so they sit above the demo;
* the papers and benchmarks stand on the experiments toolkit, and the command line on everything.
"""

from __future__ import annotations

__all__ = ["LAYERS"]

#: Layers from the bottom up; each is a tuple of module or package names.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bnfl._version", "bnfl._checks", "bnfl._atomic", "bnfl._folder_lock", "bnfl._safe_torch", "bnfl._layers",
     "bnfl._input_checks", "bnfl._progress", "bnfl.display", "bnfl.registry", "bnfl.functional", "bnfl.intervals"),
    ("bnfl._figure",),
    ("bnfl.stats", "bnfl.grads"),
    ("bnfl.fedtan",),
    ("bnfl.nn",),
    ("bnfl.models", "bnfl.data", "bnfl.compat", "bnfl.testing"),
    ("bnfl.fl", "bnfl.methods", "bnfl.plots", "bnfl.runs", "bnfl._run_groups", "bnfl._paired", "bnfl._fit_checks"),
    ("bnfl.train",),
    ("bnfl.theory",),
    ("bnfl.diagnosis",),
    ("bnfl.demo",),
    ("bnfl.diagnosis.interactive", "bnfl.experiments"),
    ("bnfl.experiments.papers", "bnfl.experiments.benchmarks", "bnfl.which_fix"),
    ("bnfl.cli", "bnfl.runs_cli", "bnfl.__main__", "bnfl"),
)
