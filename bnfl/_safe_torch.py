"""Read torch files (checkpoints, weights, messages) without running code: bnfl's one ``torch.load``.

A torch file is a zip of tensors plus a pickle that names the functions rebuilding its objects;
``torch.load(weights_only=False)`` calls whatever that pickle names (``os.system`` included).
:func:`load` always reads with ``weights_only=True``: tensors, numbers, strings, lists, tuples and
dicts are built, anything else is refused before it is called. ``numpy_arrays=True`` also allows
exactly the functions that rebuild a numpy array (checkpoints of older bnfl kept numpy's RNG state
that way). :func:`why` turns a failed load into a few words for a one-line error.

Data pickles go through :mod:`bnfl.data._safe_pickle`; ``tests/test_safe_loading.py`` walks bnfl's
source and fails on any other ``torch.load``, ``pickle.load(s)`` or ``np.load(allow_pickle=True)``.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import re
import warnings
from typing import Any

import numpy as np
import torch

__all__ = ["load", "why"]


def _numpy_rebuilders() -> list[Any]:
    allowed: list[Any] = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    for mod in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            allowed.append(__import__(mod, fromlist=["_reconstruct"])._reconstruct)
            break
        except (ImportError, AttributeError):  # pragma: no cover - numpy 1 vs 2
            continue
    return allowed


def load(source: str | os.PathLike[str] | io.BytesIO, *, map_location: Any = "cpu", mmap: bool = False,
         numpy_arrays: bool = False) -> Any:
    """``torch.load(source, weights_only=True)``: nothing in the file runs as code.

    Parameters
    ----------
    source : path or file-like
    map_location : default "cpu"
    mmap : bool, default False
        Map the file's tensors instead of reading them (a path only).
    numpy_arrays : bool, default False
        Also rebuild numpy arrays and dtypes (and nothing else numpy offers).
    """
    with warnings.catch_warnings():  # a raw pickle: torch warns of its protocol before refusing it
        warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        if not numpy_arrays:
            return torch.load(source, map_location=map_location, weights_only=True, mmap=mmap)
        with torch.serialization.safe_globals(_numpy_rebuilders()):
            return torch.load(source, map_location=map_location, weights_only=True, mmap=mmap)


def why(err: BaseException) -> str:
    """A few words saying why :func:`load` failed: a file that asks to run code, one that is not a
    complete torch file (truncated or garbage), or the first sentence of the error."""
    msg = str(err)
    found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", msg)
    if found:
        return f"it asks to run {found.group(1)}, and a checkpoint never runs code"
    if ("zip archive" in msg or "central directory" in msg or "PytorchStreamReader" in msg
            or (isinstance(err, OSError) and err.errno == errno.EINVAL)):
        return "not a complete zip archive: truncated or corrupt"
    if ("Unsupported operand" in msg or "invalid load key" in msg or "Ran out of input" in msg
            or "Invalid magic number" in msg
            or isinstance(err, EOFError)):
        return "not a torch file: garbage or truncated bytes"
    if isinstance(err, pickle.UnpicklingError):
        return "it holds objects a safe load refuses (a checkpoint never runs code)"
    first = msg.strip().splitlines()[0].split(". ")[0] if msg.strip() else type(err).__name__
    return first[:160]
