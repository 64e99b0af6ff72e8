"""Runs grouped by configuration (seeds of one configuration together) and their curves drawn:
the drawing part of :mod:`bnfl.runs` (``load_run(...).plot()``, :class:`bnfl.runs.RunHistory`). It
reads a history's ``rows`` and ``meta`` and never imports :mod:`bnfl.fl`; the engine's history
draws nothing itself. Users import these from :mod:`bnfl.runs`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bnfl import plots
from bnfl.intervals import t_interval

__all__ = ["SEED_FIELDS", "Group", "group_runs", "plot_runs"]

#: Fields of a history's ``meta["run"]`` that vary between the seeds of one configuration.
SEED_FIELDS = ("seed",)


class _Run(Protocol):
    """What grouping and drawing read of a run: a :class:`bnfl.fl.History` (its per-round ``rows``
    and its ``meta``), named by what it has so that this module need not import :mod:`bnfl.fl`."""

    rows: list[dict[str, Any]]
    meta: dict[str, Any]


# -- grouping seeds ---------------------------------------------------------------------------------
def _seed(h: _Run) -> Any:
    run = h.meta.get("run")
    return run.get("seed") if isinstance(run, dict) else (h.meta.get("config") or {}).get("seed")


def _key(h: _Run) -> str:
    """What makes a run's configuration: its ``meta["run"]`` without the seed (older folders: the
    algorithm and training settings without seed and folder)."""
    run = h.meta.get("run")
    if isinstance(run, dict):
        what = {k: v for k, v in run.items() if k not in SEED_FIELDS}
        what["partition"] = {k: v for k, v in (what.get("partition") or {}).items() if k != "seed"}
    else:
        cfg = {k: v for k, v in (h.meta.get("config") or {}).items() if k not in ("seed", "checkpoint_dir", "progress")}
        what = {"algorithm": h.meta.get("algorithm"), "config": cfg}
    return json.dumps(what, sort_keys=True, default=str)


def _name(h: _Run) -> str:
    run = h.meta.get("run")
    if isinstance(run, dict) and run.get("method"):
        return str(run["method"])
    return str(h.meta.get("algorithm") or Path(h.meta.get("source", "run")).name)


@dataclass
class Group:
    """Runs of one configuration (they differ only in their seed).

    Attributes
    ----------
    label : str
        The method id, and the folder of its first run when two configurations share a method.
    method : str
        The method id (or the algorithm's name, for folders of older bnfl).
    runs : list of History
    """

    label: str
    method: str
    runs: list[_Run]

    @property
    def seeds(self) -> list[Any]:
        return [_seed(h) for h in self.runs]


def group_runs(runs: Sequence[_Run]) -> list[Group]:
    """Runs grouped by configuration, in the order each configuration first appears."""
    groups: dict[str, Group] = {}
    for h in runs:
        k = _key(h)
        if k not in groups:
            groups[k] = Group(label=_name(h), method=_name(h), runs=[])
        groups[k].runs.append(h)
    out = list(groups.values())
    for g in out:
        if sum(o.label == g.label for o in out) > 1:
            g.label = f"{g.method} ({Path(g.runs[0].meta.get('source', '?')).name})"
    return out


def _curve(g: Group, field: str) -> tuple[list[int], list[list[float]]]:
    """Rounds at which every run of ``g`` recorded ``field``, and the values (one list per round)."""
    per_run = [{int(r["round"]): float(r[field]) for r in h.rows if r.get(field) is not None} for h in g.runs]
    rounds = sorted(set.intersection(*(set(d) for d in per_run))) if per_run else []
    return rounds, [[d[r] for d in per_run] for r in rounds]


def _band(values: list[float]) -> tuple[float, float, float]:
    """Mean over seeds and the ends of its 95% t-interval (the mean twice for one seed)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    iv = t_interval(values)
    return iv.estimate, iv.low, iv.high


# -- the figure -------------------------------------------------------------------------------------
def plot_runs(runs: Sequence[_Run], *, loss: str = "auto"):
    """Test accuracy and loss against rounds: one line per configuration, the seeds of one
    configuration as their mean with a band (the 95% t-interval over seeds).

    Parameters
    ----------
    runs : sequence of History
        From :func:`load_run` (or any :class:`~bnfl.fl.History`).
    loss : {"auto", "test_loss", "train_loss"}, default "auto"
        The loss panel's field; ``"auto"``: the test loss where it was recorded, else the
        training loss.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels; nothing is written (``fig.savefig(path)``: PNG, SVG or PDF by the suffix).
    """
    if not runs:
        raise ValueError("no runs to plot: pass at least one run folder")
    if loss not in ("auto", "test_loss", "train_loss"):
        raise ValueError(f"loss must be 'auto', 'test_loss' or 'train_loss', got {loss!r}")
    groups = group_runs(runs)
    fig, (ax_acc, ax_loss) = plots.new_figure(1, 2)
    for i, g in enumerate(groups):
        color = plots.color_for(g.method, i)
        n = len(g.runs)
        label = g.label.replace(g.method, plots.label_for(g.method), 1) + (f" ({n} seeds, 95% interval)" if n > 1 else "")
        field = loss
        if loss == "auto":
            field = "test_loss" if all(any(r.get("test_loss") is not None for r in h.rows) for h in g.runs) \
                else "train_loss"
        for ax, name, scale in ((ax_acc, "test_acc", 100.0), (ax_loss, field, 1.0)):
            rounds, values = _curve(g, name)
            if not rounds:
                continue
            mean, low, high = zip(*(_band([scale * v for v in vs]) for vs in values), strict=True)
            ax.plot(rounds, mean, color=color, label=label, marker=plots.marker_for(g.method, i),
                    markevery=max(1, len(rounds) // 8), markersize=4)
            if n > 1:
                ax.fill_between(rounds, low, high, color=color, alpha=0.2, linewidth=0)
        ax_loss.set_ylabel(field.replace("_", " "))
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.set_title("Accuracy")
    ax_loss.set_title("Loss")
    for ax in (ax_acc, ax_loss):
        ax.set_xlabel("round")
    ax_acc.legend(loc="lower right")
    return fig
