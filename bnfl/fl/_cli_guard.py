"""How ``bnfl train`` reports what went wrong: one ``bnfl train: error: ...`` line (by
:func:`bnfl.cli.main`, from the :class:`ValueError` raised here), never a traceback, for a bad
config (wrong types too), a run folder that holds another run, an unreadable or foreign checkpoint,
and a run that diverged; ``--resume`` with nothing to resume is a ``bnfl train: warning: ...`` line."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable


def guarded(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``fn(args)`` with its errors as ValueErrors (one line) and resume warnings as lines on stderr."""
    from bnfl.fl._run import DivergenceError
    from bnfl.fl._rundir import ResumeWarning

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
