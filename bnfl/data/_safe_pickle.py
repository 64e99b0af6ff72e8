"""Read data pickles without running code: only numpy arrays, lists, tuples, dicts, strings,
bytes and numbers are built.

A pickle names the functions that rebuild its objects, and :func:`pickle.load` calls whatever it
names (``os.system`` included). :func:`load` answers only the names that rebuild numpy arrays,
dtypes and scalars (numpy's own reconstruct functions, allow-listed by module and name); any
other name is refused with :class:`UnsafePickleError` before anything is called. Lists, tuples,
dicts, strings, bytes and numbers need no name: the pickle machine builds them itself (bytes in
protocol 2 excepted: ``_codecs.encode(text, "latin1")``, answered by a function that does only that).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

__all__ = ["UnsafePickleError", "load", "loads"]

#: (module, name) pairs a data pickle may ask for: numpy arrays, dtypes and scalars, as numpy 1
#: (``numpy.core``) and numpy 2 (``numpy._core``) write them.
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    [(core + ".multiarray", name) for core in ("numpy.core", "numpy._core") for name in ("_reconstruct", "scalar")]
    + [(core + ".numeric", "_frombuffer") for core in ("numpy.core", "numpy._core")]
    + [("numpy", "ndarray"), ("numpy", "dtype")]
)


class UnsafePickleError(ValueError):
    """A data pickle asked for something other than numpy arrays and plain Python data."""


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise UnsafePickleError(f"a data pickle may encode bytes as latin1 only, not {encoding!r}")
    return text.encode("latin1")


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, *, source: str, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("_codecs", "encode"):  # protocol 2 builds bytes as encode(str, "latin1")
            return _latin1_bytes
        if (module, name) in (("builtins", "bytes"), ("__builtin__", "bytes")):  # protocol 2's empty bytes
            return bytes
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        raise UnsafePickleError(
            f"{self._source}: refused to load: the pickle asks for {module}.{name}, which could run code; "
            f"bnfl reads only numpy arrays, lists, dicts, strings, bytes and numbers from data pickles "
            f"(re-save the data with those, e.g. numpy arrays in a dict)")


def load(path: str | os.PathLike[str], *, encoding: str = "ASCII") -> Any:
    """Unpickle ``path`` safely (see the module docstring); ``encoding`` as in :func:`pickle.load`
    (``"bytes"`` or ``"latin1"`` for Python 2 pickles such as CIFAR's)."""
    with open(path, "rb") as f:
        return _load(f, source=str(Path(path)), encoding=encoding)


def loads(data: bytes, *, encoding: str = "ASCII", source: str = "<bytes>") -> Any:
    """:func:`load` for a bytes object."""
    return _load(io.BytesIO(data), source=source, encoding=encoding)


def _load(f: Any, *, source: str, encoding: str) -> Any:
    try:
        return _Unpickler(f, source=source, encoding=encoding).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError) as err:
        raise ValueError(f"{source}: not a readable data pickle ({type(err).__name__}: {err})") from None
