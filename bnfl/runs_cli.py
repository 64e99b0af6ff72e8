"""``bnfl plot``: draw and compare a user's runs (:mod:`bnfl.runs`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bnfl import runs

FORMATS = (".png", ".svg", ".pdf")


def _plot(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() not in FORMATS:
        raise ValueError(f"--out {out}: the figure's format comes from its suffix, one of {', '.join(FORMATS)}")
    histories = runs.find_runs(args.dirs)
    print(runs.format_comparison(runs.compare(histories)))
    fig = runs.plot_runs(histories, loss=args.loss)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    print(f"wrote {out}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``bnfl plot`` to the ``bnfl`` command line."""
    p = subparsers.add_parser(
        "plot", help="draw and compare runs: accuracy and loss against rounds, and a side-by-side table",
        description="Draw the test accuracy and loss of one or more bnfl train runs against rounds, and print "
                    "them side by side (final test accuracy, bytes communicated, wall time). Runs that differ "
                    "only in their seed are one configuration: drawn as the mean with a band, their final "
                    "accuracy given with an interval (both the 95% t-interval over seeds). docs/runs.md")
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a bnfl train --out folder, or a folder of such folders (one per seed, say)")
    p.add_argument("--out", "-o", default="curves.png",
                   help="figure file; .png, .svg or .pdf (default curves.png)")
    p.add_argument("--loss", choices=("auto", "test_loss", "train_loss"), default="auto",
                   help="the loss panel's field (default auto: the test loss where recorded, else the training loss)")
    p.set_defaults(func=_plot)
