"""``history.json`` written as a run goes: one row appended per round in place, so a checkpoint
every round costs O(R) bytes in total, and the file is always :meth:`History.dumps`'s text.

The file's layout (what :meth:`bnfl.fl.History.dumps` writes, read by any JSON reader)::

    {"meta": {...},
     "rows": [
    {row 1},
    {row 2}
    ]}

Appending row ``k+1`` overwrites the closing ``\\n]}\\n`` with ``,\\n{row k+1}\\n]}\\n``. A write cut
short (a crash mid-append) leaves a file that JSON readers refuse; :func:`read_rows` still reads
its complete rows (one per line), and the checkpoint says how many of them belong to the run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bnfl import _atomic

__all__ = ["HistoryFile", "read_rows"]

_CLOSE = b"\n]}\n"


class _History(Protocol):
    """What is written of a :class:`bnfl.fl.History` (this module sits below :mod:`bnfl.fl._run`)."""

    rows: list[dict[str, Any]]
    meta: dict[str, Any]

    def dumps(self) -> str: ...


@dataclass
class HistoryFile:
    """Keeps ``path`` equal to ``History.dumps()`` of the history it is synced with."""

    path: Path
    _meta: str | None = None
    _rows: int = 0
    _size: int = -1

    def sync(self, history: _History) -> None:
        """Write the rows added since the last sync (the whole file when the meta changed, rows
        were removed, or the file is not the one written last)."""
        meta = json.dumps(history.meta)
        n = len(history.rows)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = -2
        if meta != self._meta or n < self._rows or size != self._size:
            text = history.dumps().encode()
            _atomic.write_bytes(self.path, text, fsync=False)
            self._meta, self._rows, self._size = meta, n, len(text)
            return
        if n == self._rows:
            return
        new = ",\n".join(json.dumps(row) for row in history.rows[self._rows:]).encode()
        piece = (b"" if self._rows == 0 else b",\n") + new + _CLOSE
        with open(self.path, "r+b") as f:
            f.seek(size - len(_CLOSE))
            if f.read(len(_CLOSE)) != _CLOSE:  # not our file after all: rewrite it
                self._size = -1
                return self.sync(history)
            f.seek(size - len(_CLOSE))
            f.write(piece)
        self._rows, self._size = n, size - len(_CLOSE) + len(piece)


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a ``history.json``; of one cut short by a crash, every complete row."""
    text = Path(path).read_text()
    try:
        return list(json.loads(text)["rows"])
    except (json.JSONDecodeError, KeyError, TypeError):
        pass
    rows = []
    for line in text.splitlines()[2:]:  # line 1: meta, line 2: ' "rows": ['
        line = line.rstrip().removesuffix(",")
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(row, dict):
            break
        rows.append(row)
    return rows
