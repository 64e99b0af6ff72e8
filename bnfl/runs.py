"""A user's own runs: load a run folder, draw its curves, and compare runs side by side.

A run folder is what ``bnfl train --out DIR`` (or :func:`bnfl.fl.run` with ``out``) writes; its
``history.json`` holds one row per round and a meta that says what ran (:mod:`bnfl.train._provenance`).
Computing, plotting and writing stay apart, as in the experiments::

    h = bnfl.load_run("runs/fedtan")         # a History (rows + meta)
    fig = h.plot()                           # accuracy and loss against rounds
    fig = bnfl.runs.plot_runs([h, g])        # several runs; seeds of one configuration as a band
    print(bnfl.runs.format_comparison(bnfl.runs.compare([h, g])))

Runs that differ only in their seed are one *configuration*: their curves are drawn as the mean
over seeds with a band, and their final accuracy is reported with an interval, both the 95%
Student t-interval over seeds the reports use (:func:`bnfl.intervals.t_interval`).
``bnfl plot DIR [DIR ...]`` does all of this from the command line (docs/runs.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bnfl._input_checks import ROWS_FIX, check_history_rows, unreadable
from bnfl._paired import Difference, compare_to, format_differences  # noqa: F401  (re-exported)
from bnfl._run_groups import SEED_FIELDS, Group, group_runs, plot_runs  # noqa: F401  (re-exported)
from bnfl.fl._history_file import read_rows
from bnfl.fl._run import History
from bnfl.intervals import t_interval

__all__ = ["Difference", "Group", "compare", "compare_to", "find_runs", "format_comparison", "format_differences",
           "group_runs", "load_run", "plot_runs"]

HISTORY = "history.json"


def load_run(path: str | os.PathLike[str]) -> History:
    """The :class:`~bnfl.fl.History` of a run folder (or of its ``history.json``).

    A history cut short by a crash gives its complete rows. ``history.meta["source"]`` is set to
    the folder it came from.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        ``path`` holds no run (no ``history.json``), or a ``history.json`` without a round.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist: pass the --out folder of a bnfl train run")
    f = p if p.is_file() else p / HISTORY
    if not f.is_file():
        raise ValueError(f"{p} holds no run (no {HISTORY} in it): pass the --out folder of a bnfl train run")
    try:
        text = f.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
            meta, rows = dict(data.get("meta") or {}), data["rows"]
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            rows = read_rows(f)  # cut short by a crash: its complete rows
            first = text.split("\n", 1)[0].strip().removeprefix('{"meta":').removesuffix(",")
            try:
                meta = dict(json.loads(first))
            except (json.JSONDecodeError, TypeError, ValueError):
                meta = {}
    except (ValueError, RecursionError) as err:  # not UTF-8, nested too deeply, a 5,000-digit number
        raise ValueError(f"{f}: not a readable run history ({unreadable(err)}); {ROWS_FIX}") from None
    rows = check_history_rows(rows, f)  # each row an object with a round >= 0 and numbers: one line if not
    if not rows:
        raise ValueError(f"{f} holds no finished round yet: wait for the run's first round, or pass another folder")
    meta["source"] = str(f.parent)
    return RunHistory(rows=rows, meta=meta)


def find_runs(paths: Sequence[str | os.PathLike[str]]) -> list[History]:
    """:func:`load_run` of each path; a folder without ``history.json`` whose sub-folders hold runs
    (``runs/`` with one folder per seed) stands for those runs, in name order."""
    out = []
    for path in paths:
        p = Path(path)
        if p.is_dir() and not (p / HISTORY).exists():
            subs = sorted(d for d in p.iterdir() if (d / HISTORY).is_file())
            if subs:
                out += [load_run(d) for d in subs]
                continue
        out.append(load_run(p))
    return out


# -- the table --------------------------------------------------------------------------------------
def compare(runs: Sequence[History]) -> list[dict[str, Any]]:
    """One row per configuration: its seeds, rounds, final test accuracy (mean over seeds, with the
    95% t-interval over seeds when there are two or more), bytes communicated and wall time
    (means over seeds)."""
    out = []
    for g in group_runs(runs):
        finals = [next((r["test_acc"] for r in reversed(h.rows) if r.get("test_acc") is not None), None)
                  for h in g.runs]
        accs = [100 * a for a in finals if a is not None]
        iv = t_interval(accs) if len(accs) >= 2 else None

        def mean_last(field: str, g: Group = g) -> float | None:
            vals = [h.rows[-1].get(field) for h in g.runs]
            vals = [v for v in vals if v is not None]
            return sum(vals) / len(vals) if vals else None

        out.append({"run": g.label, "seeds": g.seeds, "rounds": max(int(h.rows[-1]["round"]) for h in g.runs),
                    "accuracy": sum(accs) / len(accs) if accs else None,
                    "accuracy_low": None if iv is None else iv.low, "accuracy_high": None if iv is None else iv.high,
                    "bytes": mean_last("bytes_total"), "wall_time": mean_last("wall_time"),
                    "folders": [h.meta.get("source") for h in g.runs]})
    return out


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "-"  # pragma: no cover


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def _seed_cell(seeds: Sequence[Any]) -> str:
    """``"0 (1 seed)"``, ``"0, 1, 2 (3 seeds)"``: the seed ids and how many (a lone ``0`` read as none)."""
    return f"{', '.join(map(str, seeds))} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''})"


def format_comparison(rows: Sequence[dict[str, Any]]) -> str:
    """:func:`compare`'s rows as an aligned text table."""
    def acc(r: dict[str, Any]) -> str:
        if r["accuracy"] is None:
            return "-"
        if r["accuracy_low"] is None:
            return f"{r['accuracy']:.2f}"
        return f"{r['accuracy']:.2f} [{r['accuracy_low']:.2f}, {r['accuracy_high']:.2f}]"

    head = ["run", "seeds", "rounds", "final test acc. (%)", "communicated", "wall time"]
    body = [[r["run"], _seed_cell(r["seeds"]), str(r["rounds"]), acc(r), _size(r["bytes"]),
             _seconds(r["wall_time"])] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                         strict=True))).rstrip()

    lines = [line(head), line(["-" * w for w in widths]), *map(line, body)]
    if any(len(r["seeds"]) > 1 for r in rows):
        lines.append("(several seeds: mean over seeds [95% t-interval over seeds]; communicated and wall time: means)")
    return "\n".join(lines)


# -- drawing and comparing a run: History.plot and .compare live here, above the engine, beside the other drawings ------------
class RunHistory(History):
    """A :class:`~bnfl.fl.History` read back from a run folder (:func:`load_run`), which draws itself.

    The engine's history holds rows and writes them; drawing is this module's (it reads the method
    table's colours through :mod:`bnfl.plots`), so the engine never imports a plotting module."""

    def plot(self, *others: History, loss: str = "auto"):  # noqa: ANN201 (a matplotlib Figure)
        """Test accuracy and loss against rounds, of this run and ``others`` on one figure (the
        seeds of one configuration as a band: :func:`plot_runs`); returns the Figure, nothing is
        written (``fig.savefig("curves.png")``; ``.svg``, ``.pdf`` too)."""
        return plot_runs([self, *others], loss=loss)

    def compare(self, *others: History, baseline: str) -> list[Difference]:
        """Final test accuracy of each configuration among this run and ``others`` minus the
        ``baseline`` method's, paired by seed, with its 95% interval in points and a verdict
        (:func:`compare_to`: a list of :class:`Difference`)."""
        return compare_to([self, *others], baseline)
