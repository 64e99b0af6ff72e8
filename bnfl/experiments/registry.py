"""The registry of reproductions: one :class:`Entry` per catalog figure or table.

An entry is registered beside the function that computes it (as timm's
``@register_model``), and its plot beside that::

    @entry("fedtan-tab3", title="Communication per iteration", summary="...", kind="exact",
           configs=same_for_all_profiles({...}))
    def compute_tab3(ctx: Context, config: dict) -> dict: ...

    @plotter("fedtan-tab3")
    def plot_tab3(result: Result) -> Figure: ...

Papers live in sub-packages of :mod:`bnfl.experiments.papers`, and entries that no paper has
(common benchmarks, id ``bench-...``, "paper" key ``bench``) in :mod:`bnfl.experiments.benchmarks`;
the registry imports every one of them the first time it is asked for an id, without naming any.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bnfl.experiments.core import PROFILES, Context, Result
from bnfl.registry import Registry

__all__ = [
    "EXPERIMENTS",
    "KINDS",
    "Entry",
    "entries",
    "entry",
    "get",
    "ids",
    "paper_keys",
    "plotter",
    "register",
    "same_for_all_profiles",
]

#: ``exact``: arithmetic from real models and tables; ``schematic``: a diagram; ``training``: FL runs.
KINDS: tuple[str, ...] = ("exact", "schematic", "training")

#: ``compute(ctx, config) -> dict`` with keys of :class:`Result` (rows, paper, claims, ...).
ComputeFn = Callable[[Context, dict[str, Any]], dict[str, Any]]
PlotFn = Callable[[Result], Any]


@dataclass(frozen=True)
class Entry:
    """One registered figure or table.

    Attributes
    ----------
    id : str
        Catalog id, ``"<paper>-<fig|tab><n>"``.
    paper : str
        Paper key (``"fedtan"``), the part of the id before the first ``-``.
    title : str
    summary : str
        What the figure shows and what the paper claims (from the catalog).
    look_for : str
        What a reader should look for in our figure, and why (the notebooks' prose).
    kind : {"exact", "schematic", "training"}
    configs : mapping
        ``{profile: config dict}`` for every profile in :data:`PROFILES`; a config's
        ``"deviations"`` list says where the profile departs from the catalog's recipe.
    compute : callable
        ``compute(ctx, config) -> dict`` of Result fields.
    plot : callable or None
        ``plot(result) -> matplotlib Figure`` (attached by :func:`plotter`).
    default_seeds : mapping
        ``{profile: number of seeds}``.
    seed_groups : tuple of int
        :attr:`bnfl.experiments.core.Context.seed_groups` of the entry's runs (``()``: all seeds
        one lock-step group).
    """

    id: str
    paper: str
    title: str
    summary: str
    kind: str
    configs: Mapping[str, Mapping[str, Any]]
    compute: ComputeFn
    plot: PlotFn | None = None
    look_for: str = ""
    default_seeds: Mapping[str, int] = field(default_factory=lambda: {"smoke": 1, "quick": 1, "paper": 5})
    seed_groups: tuple[int, ...] = ()

    def config(self, profile: str) -> dict[str, Any]:
        if profile not in self.configs:
            raise ValueError(f"{self.id} has no profile {profile!r}; choose one of {sorted(self.configs)}")
        return copy.deepcopy(dict(self.configs[profile]))


#: Every registered entry by id (a :class:`~bnfl.registry.Registry`, filled by :func:`register`).
EXPERIMENTS: Registry[Entry] = Registry("experiment", listing="known", accepts=lambda o: isinstance(o, Entry),
                                       expects="a bnfl.experiments.registry.Entry")


def register(item: Entry) -> Entry:
    """Add ``item`` to the registry (its id must be new and every profile present)."""
    if item.id in EXPERIMENTS:
        raise ValueError(f"experiment {item.id!r} is registered twice")
    missing = [p for p in PROFILES if p not in item.configs]
    if missing:
        raise ValueError(f"experiment {item.id!r} lacks profile(s) {missing}")
    if item.kind not in KINDS:
        raise ValueError(f"experiment {item.id!r}: kind {item.kind!r} is not one of {', '.join(KINDS)}")
    EXPERIMENTS.register(item.id, item)
    return item


def entry(
    experiment_id: str,
    *,
    title: str,
    summary: str,
    kind: str,
    configs: Mapping[str, Mapping[str, Any]],
    look_for: str = "",
    plot: PlotFn | None = None,
    seeds: Mapping[str, int] | None = None,
    seed_groups: tuple[int, ...] = (),
) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator: register the decorated ``compute`` function as ``experiment_id``.

    ``seeds`` defaults to 1 seed at smoke and quick, 5 at paper (the papers' run count) for
    ``kind="training"``, and 1 everywhere for arithmetic and schematic entries. ``seed_groups``:
    :attr:`Entry.seed_groups`.
    """
    if any(int(n) < 1 for n in seed_groups):
        raise ValueError(f"experiment {experiment_id!r}: seed_groups must be sizes >= 1, got {seed_groups}")
    if seeds is None:
        seeds = {"smoke": 1, "quick": 1, "paper": 5 if kind == "training" else 1}

    def decorate(compute: ComputeFn) -> ComputeFn:
        register(Entry(id=experiment_id, paper=experiment_id.split("-", 1)[0], title=title, summary=summary,
                       kind=kind, configs=configs, compute=compute, plot=plot, look_for=look_for,
                       default_seeds=dict(seeds), seed_groups=tuple(int(n) for n in seed_groups)))
        return compute

    return decorate


def plotter(experiment_id: str) -> Callable[[PlotFn], PlotFn]:
    """Decorator: the decorated ``plot(result)`` draws the registered entry ``experiment_id``."""

    def decorate(plot: PlotFn) -> PlotFn:
        if experiment_id not in EXPERIMENTS:
            raise ValueError(f"plotter for {experiment_id!r}: register the entry (@entry) before its plot")
        EXPERIMENTS.register(experiment_id, dataclasses.replace(EXPERIMENTS[experiment_id], plot=plot), replace=True)
        return plot

    return decorate


def same_for_all_profiles(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """One configuration for every profile (arithmetic and schematic entries cost nothing)."""
    return {p: copy.deepcopy(dict(config)) for p in PROFILES}


_LOADED = False


def _load_papers() -> None:
    """Import every package under :mod:`bnfl.experiments.papers` and
    :mod:`bnfl.experiments.benchmarks` (importing registers)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for name in ("bnfl.experiments.papers", "bnfl.experiments.benchmarks"):
        pkg = importlib.import_module(name)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    unplotted = [i for i, e in EXPERIMENTS.items() if e.plot is None]
    if unplotted:
        raise RuntimeError(f"registered entries without a plot: {', '.join(sorted(unplotted))}")


def get(experiment_id: str) -> Entry:
    """The registered entry ``experiment_id``; ``KeyError`` names the known ids."""
    _load_papers()
    if experiment_id not in EXPERIMENTS:
        raise KeyError(f"no experiment {experiment_id!r}; known: {', '.join(ids())}")
    return EXPERIMENTS[experiment_id]


def _sort_key(eid: str) -> tuple[str, int, str]:
    paper, _, rest = eid.partition("-")
    kind = "".join(ch for ch in rest if ch.isalpha())
    num = "".join(ch for ch in rest if ch.isdigit())
    order = {"fig": 0, "tab": 1}.get(kind, 2)
    return (paper, order * 1000 + (int(num) if num else 999), rest)


def paper_keys() -> list[str]:
    """Keys of the registered papers (``["fedtan", ...]``)."""
    _load_papers()
    return sorted({e.paper for e in EXPERIMENTS.values()})


def ids(paper: str | None = None) -> list[str]:
    """Registered ids, figures first then tables in numeric order, optionally of one ``paper``."""
    _load_papers()
    if paper is not None and paper not in {e.paper for e in EXPERIMENTS.values()}:
        raise ValueError(f"no paper {paper!r}; registered papers: {', '.join(paper_keys())}")
    out = [e for e, item in EXPERIMENTS.items() if paper is None or item.paper == paper]
    return sorted(out, key=_sort_key)


def entries(paper: str | None = None) -> list[Entry]:
    return [EXPERIMENTS[i] for i in ids(paper)]
