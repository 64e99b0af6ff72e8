"""Reproductions of the papers' figures and tables: a shared toolkit, one package per paper.

>>> from bnfl import experiments
>>> experiments.ids("fedtan")[:3]
['fedtan-fig1', 'fedtan-fig2', 'fedtan-fig3']
>>> result = experiments.run("fedtan-tab3", profile="quick")      # numbers + claim verdicts
>>> fig = experiments.plot("fedtan-tab3", result)                  # a Figure, nothing written

The toolkit: :mod:`~bnfl.experiments.registry` (``@entry`` beside each compute function,
``@plotter`` beside its plot), :mod:`~bnfl.experiments.claims` (checks with pass / fail /
inconclusive verdicts), :mod:`~bnfl.experiments.runner` (run, cache, reproduce),
:mod:`~bnfl.experiments.curves` (sweeps and curves over seeds), :mod:`~bnfl.experiments.training`
(one training run from a spec), :mod:`~bnfl.experiments.printed` (the papers' printed numbers),
:mod:`~bnfl.experiments.report` (REPORT.md). Papers live in :mod:`bnfl.experiments.papers`.
``bnfl list``, ``bnfl run <id>`` and ``bnfl reproduce`` (:mod:`bnfl.experiments.cli`) drive the
same functions from the command line.
"""

from __future__ import annotations

from bnfl.experiments.cache import RunCache
from bnfl.experiments.claims import Claim, at_least, at_most, info, monotone, within
from bnfl.experiments.core import PROFILES, Context, Result, config_hash, labels_first
from bnfl.experiments.registry import Entry, entries, entry, get, ids, paper_keys, plotter, register
from bnfl.experiments.report import claims_table, markdown_table, write_report
from bnfl.experiments.runner import load_result, plot, provenance, reproduce, run, save_figures

__all__ = [
    "PROFILES",
    "Claim",
    "Context",
    "Entry",
    "Result",
    "RunCache",
    "at_least",
    "at_most",
    "claims_table",
    "config_hash",
    "entries",
    "entry",
    "get",
    "ids",
    "info",
    "labels_first",
    "load_result",
    "markdown_table",
    "monotone",
    "paper_keys",
    "plot",
    "plotter",
    "provenance",
    "register",
    "reproduce",
    "run",
    "save_figures",
    "within",
    "write_report",
]
