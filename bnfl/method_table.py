"""The method table as :mod:`bnfl.fl` sees it: a slot that the package above the engine fills.

A *method* names an algorithm with its options and the model's normalisation (``"fedavg+gn"``,
``"fixbn-local"``). The table of bnfl's methods, :data:`bnfl.methods.METHODS`, lives above the
engine (it names algorithms, colours, costs); ``bnfl.fl`` resolves a method id through
:func:`get_method` and never imports ``bnfl.methods`` (tests/test_fl_exchange.py reads every module
under ``bnfl/fl``). ``import bnfl`` (which every ``import bnfl.fl`` runs first) installs bnfl's table
here, one that imports :mod:`bnfl.methods` on its first lookup, so the engine stays importable
without it; a program may :func:`install` its own. This module imports nothing of bnfl.

A table is any object with ``get(name)`` (a method: ``.id``, ``.algorithm_name``, ``.options``,
``.norm``, ``.comm``, ``.local_state``, ``.algorithm(**options)``; an unknown name raises a
``ValueError`` listing the valid ones), ``available()`` (the ids) and ``values()`` (the methods).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["MethodTable", "get_method", "install", "method_table"]


class MethodTable(Protocol):
    """What :mod:`bnfl.fl` asks of a method table (module docstring)."""

    def get(self, name: Any) -> Any: ...

    def available(self) -> list[str]: ...

    def values(self) -> Iterable[Any]: ...


_TABLE: list[MethodTable] = []  # at most one: the installed table


def install(table: MethodTable) -> None:
    """Make ``table`` the one :mod:`bnfl.fl` resolves method ids with (``import bnfl`` installs
    bnfl's); a later call replaces it."""
    for name in ("get", "available", "values"):
        if not callable(getattr(table, name, None)):
            raise TypeError(f"a method table needs a {name}() method; {type(table).__name__} has none")
    _TABLE[:] = [table]


def method_table() -> MethodTable:
    """The installed table; a ``LookupError`` that says what to import when there is none."""
    if not _TABLE:
        raise LookupError("no method table is installed in bnfl.fl: `import bnfl` installs bnfl's methods; "
                          "a program that replaced them calls bnfl.method_table.install(table))")
    return _TABLE[0]


def get_method(name: Any) -> Any:
    """The method ``name`` (an id, an import string, or a method object) of the installed table."""
    return method_table().get(name)
