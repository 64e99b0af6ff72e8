"""The ``bnfl`` command line.

Each sub-command lives next to the code it drives and registers itself through a
``register(subparsers)`` function that adds its parser and sets ``func``
(a callable taking the parsed ``argparse.Namespace`` and returning an exit code).
To add a command, append its module to :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import torch

from bnfl._version import __version__

#: Modules that contribute sub-commands, in the order ``bnfl --help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "bnfl.demo",
    "bnfl.diagnosis.cli",
    "bnfl.train.config",
    "bnfl.experiments.cli",
    "bnfl.experiments.compare",
    "bnfl.experiments.benchmarks.bench_cli",
    "bnfl.train._flwr_cli",
    "bnfl.runs_cli",
    "bnfl.train.evaluate_run",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="bnfl",
        description="Batch Normalization in federated learning: analyse, train, reproduce.",
    )
    parser.add_argument("--version", action="version", version=f"bnfl {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of its one line (bnfl --debug COMMAND ...)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bnfl`` console script."""
    # A tiny training step on a busy 2-core machine was measured 350x slower with
    # two threads than with one; default to one unless the user chose otherwise.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's final flush
        return code
    except BrokenPipeError:
        return _broken_pipe()
    except (ValueError, OSError, RecursionError) as err:
        if args.debug:
            raise
        print(f"bnfl {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: every file bnfl writes is atomic, so what is finished is kept
        print(f"bnfl {args.command}: interrupted; finished work is kept: run the same command to resume "
              f"(bnfl train: add --resume)", file=sys.stderr)
        return 130


def _one_line(err: BaseException) -> str:
    """The error line of ``err``: a bnfl error's own message; an operating-system error (a read-only
    or full disk, a file where a folder should be) named by its path and what to do."""
    if isinstance(err, RecursionError):
        return "the input is nested too deeply to read (bnfl's files go a few levels deep at most); check the file you gave"
    if not isinstance(err, OSError) or err.strerror is None or isinstance(err, FileNotFoundError) and not err.filename:
        return " ".join(str(err).split())
    import errno

    where = f"{err.filename}: " if err.filename else ""
    hint = {errno.ENOSPC: "the disk is full; free some space and run the same command again (add --resume to "
                          "continue a bnfl train run)",
            errno.EDQUOT: "the disk quota is exceeded; free some space and run the same command again",
            errno.EROFS: "the file system is read-only; choose another --out",
            errno.EACCES: "no permission; choose a folder you can write to, or fix its permissions",
            errno.EPERM: "not permitted; choose a folder you can write to",
            errno.ENOTDIR: "a part of this path is a file, not a folder; choose another path",
            errno.EISDIR: "this is a folder; give a file",
            errno.EEXIST: "a file is in the way of a folder; choose another path"}.get(err.errno, "")
    return f"{where}{err.strerror.lower()}" + (f" ({hint})" if hint else "")


def _broken_pipe() -> int:
    """The reader of stdout went away (``bnfl demo | head``): exit quietly like other tools.

    Python's recipe (docs, "Note on SIGPIPE"): point stdout at devnull so that the interpreter's
    final flush of the dead pipe raises nothing, then exit with 128 + SIGPIPE = 141.
    """
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # no file descriptor (e.g. captured): nothing to flush
        return 141
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return 141


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
