"""``bnfl plot``: draw and compare a user's runs (:mod:`bnfl.runs`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bnfl import runs

FORMATS = (".png", ".svg", ".pdf")


def default_out(dirs: Sequence[str | os.PathLike[str]]) -> Path:
    """Where ``bnfl plot`` writes without ``--out``: next to the runs, never into the current
    folder unless the runs are there: ``curves.png`` in the folder that holds all of them (a run
    folder itself: beside it, as ``<name>-curves.png``, so that the run folder stays the run's)."""
    try:  # relative when the paths are (the line "wrote ..." then reads as they were given)
        common = Path(os.path.commonpath([os.path.normpath(d) for d in dirs]))
    except ValueError:  # absolute and relative paths mixed
        common = Path(os.path.commonpath([os.path.abspath(d) for d in dirs]))
    if common.is_file():  # a history.json given as the path
        common = common.parent
    if (common / runs.HISTORY).is_file():
        return common.parent / f"{common.name}-curves.png"
    return common / "curves.png"


def _plot(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out is not None else default_out(args.dirs)
    if out.suffix.lower() not in FORMATS:
        raise ValueError(f"--out {out}: the figure's format comes from its suffix, one of {', '.join(FORMATS)}")
    histories = runs.find_runs(args.dirs)
    print(runs.format_comparison(runs.compare(histories)))
    if args.baseline is not None:
        print()
        print(runs.format_differences(runs.compare_to(histories, args.baseline), args.baseline))
    fig = runs.plot_runs(histories, loss=args.loss)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    print(f"wrote {out}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``bnfl plot`` to the ``bnfl`` command line."""
    p = subparsers.add_parser(
        "plot", help="draw and compare runs: accuracy and loss against rounds, a side-by-side table, and with "
                     "--baseline which is better",
        description="Draw the test accuracy and loss of one or more bnfl train runs against rounds, and print "
                    "them side by side (final test accuracy, bytes communicated, wall time). Runs that differ "
                    "only in their seed are one configuration: drawn as the mean with a band, their final "
                    "accuracy given with an interval (both the 95% t-interval over seeds). With --baseline, "
                    "each configuration's final accuracy minus the baseline's, paired by seed, with its 95% "
                    "interval in points and a verdict (better, worse, inconclusive). docs/runs.md")
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a bnfl train --out folder, or a folder of such folders (one per seed, say)")
    p.add_argument("--baseline", metavar="METHOD",
                   help="compare every other configuration with this method's runs (an id such as fedavg+bn, "
                        "or its label), paired by seed")
    p.add_argument("--out", "-o", default=None,
                   help="figure file; .png, .svg or .pdf (default: curves.png in the folder that holds the runs, "
                        "<run>-curves.png beside a single run folder)")
    p.add_argument("--loss", choices=("auto", "test_loss", "train_loss"), default="auto",
                   help="the loss panel's field (default auto: the test loss where recorded, else the training loss)")
    p.set_defaults(func=_plot)
