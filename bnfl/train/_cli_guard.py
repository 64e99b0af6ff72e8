"""How ``bnfl train`` reports what went wrong: one ``bnfl train: error: ...`` line (by
:func:`bnfl.cli.main`, from the :class:`ValueError` raised here), never a traceback, for a bad
config (wrong types too), a run folder that holds another run, an unreadable or foreign checkpoint,
a run that diverged, and (under torchrun) a rank that died or hung, named on every other rank; ``--resume`` with nothing to resume is a ``bnfl train: warning: ...`` line."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable

from bnfl.fl._run import DivergenceError
from bnfl.fl._rundir import ResumeWarning
from bnfl.fl.distributed import RankLostError


def guarded(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``fn(args)`` with its errors as ValueErrors (one line) and resume warnings as lines on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", ResumeWarning)
        show = warnings.showwarning

        def _show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001, ANN202
            if issubclass(category, ResumeWarning):
                print(f"bnfl {args.command}: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = _show
        try:
            return fn(args)
        except TypeError as err:  # wrong types in the config: report like the other config errors
            raise ValueError(str(err)) from None
        except DivergenceError as err:  # the completed rounds are in --out's history.json
            raise ValueError(str(err).splitlines()[0]) from None
        except RankLostError as err:  # another rank died or hung: this one stops, naming it
            raise ValueError(str(err)) from None
