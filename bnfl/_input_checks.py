"""One clear line for a damaged or hostile input file: its path, the field, and what to do.

The readers of ``result.json``, ``history.json``, run configs and ``.npz`` silos call these
helpers at the point where they parse a file, so that a file that decodes but holds the wrong
shape (a list where an object belongs, a string where an accuracy belongs, a 5,000-digit
integer, nesting 200,000 levels deep, an array of Python objects) ends in a ``ValueError`` that
names the file instead of a traceback or a message about something else
(``tests/test_damaged_files.py`` pins every case).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["ROWS_FIX", "check_history_rows", "check_result", "npz_arrays", "read_json", "unreadable"]


def unreadable(err: BaseException) -> str:
    """What is wrong with a file whose parser raised ``err``, in a few words (no advice to change
    Python's limits: the file is what is wrong)."""
    if isinstance(err, RecursionError):
        return "nested too deeply to read"
    text = " ".join(str(err).split())
    if "integer string conversion" in text:
        digits = next((w for w in text.replace(";", " ").split() if w.isdigit() and w != "4300"), "?")
        return f"an integer with {digits} digits (at most 4300 are read)"
    return text


def read_json(path: str | os.PathLike[str], *, what: str, fix: str) -> Any:
    """The parsed JSON of ``path``; a file that is not JSON, or too deep or too large a number to
    read, raises ``ValueError("<path>: not a readable <what> (<why>); <fix>")``."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.read())
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, int digits
        raise ValueError(f"{os.fspath(path)}: not a readable {what} ({unreadable(err)}); {fix}") from None


def check_result(data: Any, path: str | os.PathLike[str], fix: str) -> Mapping[str, Any]:
    """``data`` (a parsed ``result.json``) if it has the shape of a result: an object whose
    ``claims`` is a list of objects, each ``verdict`` a word."""
    where = os.fspath(path)
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: a result is a JSON object, this file holds {_kind(data)}; {fix}")
    claims = data.get("claims", [])
    if not isinstance(claims, list):
        raise ValueError(f"{where}: field 'claims' must be a list, got {_kind(claims)}; {fix}")
    for i, c in enumerate(claims):
        if not isinstance(c, Mapping):
            raise ValueError(f"{where}: field 'claims[{i}]' must be an object, got {_kind(c)}; {fix}")
        v = c.get("verdict", "info")
        if not isinstance(v, str):
            raise ValueError(f"{where}: field 'claims[{i}].verdict' must be a word such as \"pass\", "
                             f"got {_short(v)}; {fix}")
    return data


#: What to do about a damaged ``history.json``.
ROWS_FIX = "remove the file or run the run again (bnfl train --out DIR --overwrite)"

#: The numeric fields of a history row that ``bnfl plot`` reads.
ROW_NUMBERS = ("test_acc", "test_loss", "train_loss", "bytes_total", "wall_time")


def check_history_rows(rows: Any, path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """``rows`` of a ``history.json`` if each is an object with a round number of 0 or more and
    numbers (or ``null``) in its numeric fields."""
    where, fix = os.fspath(path), ROWS_FIX
    if not isinstance(rows, list):
        raise ValueError(f"{where}: field 'rows' must be a list of rounds, got {_kind(rows)}; {fix}")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}: field 'rows[{i}]' must be an object, got {_short(row)}; {fix}")
        r = row.get("round")
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"{where}: field 'rows[{i}].round' must be a round number of 0 or more, "
                             f"got {_short(r)}; {fix}")
        for key in ROW_NUMBERS:
            v = row.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise ValueError(f"{where}: field 'rows[{i}].{key}' must be a number or null, got {_short(v)}; {fix}")
    return list(rows)


def npz_arrays(f: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every array of an open ``np.load`` archive ``f``; an array of Python objects (which would
    need unpickling, never done) raises a ``ValueError`` naming the file, the array and the fix."""
    out = {}
    for k in f.files:
        try:
            out[k] = f[k]
        except ValueError as err:
            if "allow_pickle" not in str(err):
                raise
            raise ValueError(f"{os.fspath(path)}: array {k!r} holds Python objects (dtype=object), which bnfl "
                             f"never unpickles; save it as numbers, e.g. np.savez(..., {k}=np.asarray({k}, "
                             "dtype=np.float32))") from None
    return out


def _kind(v: Any) -> str:
    return {list: "a list", dict: "an object", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, int | float) else type(v).__name__)


def _short(v: Any) -> str:
    text = json.dumps(v) if isinstance(v, str | int | float | bool | type(None)) else _kind(v)
    return text if len(text) <= 40 else text[:37] + "..."
