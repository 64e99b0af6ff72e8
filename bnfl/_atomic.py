"""Atomic file writes: a reader (or a run resumed after Ctrl-C, a full disk or a crash) sees the old
file or the new one, never half of one.

Each write goes to a temporary file beside the target (same folder, so the same file system),
is flushed to disk, and is then renamed over the target with :func:`os.replace` (atomic on POSIX
and Windows). An interrupted write leaves the target untouched and removes its temporary file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "write_bytes", "write_text"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s new content to; on a normal exit it replaces
    ``path``, on any exception (``KeyboardInterrupt`` included) it is removed and ``path`` is
    left as it was.

    Example::

        with atomic_path("out/fig.png") as tmp:
            fig.savefig(tmp, format="png")
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # one name per process and target: parallel writers (``bnfl reproduce --jobs``) never share it
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if fsync:
            _fsync(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> Path:
    """Atomically write ``data`` to ``path``; return ``path``."""
    with atomic_path(path, fsync=fsync) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str, *, fsync: bool = True) -> Path:
    """Atomically write ``text`` (UTF-8) to ``path``; return ``path``."""
    return write_bytes(path, text.encode("utf-8"), fsync=fsync)


def write_with(path: str | os.PathLike[str], writer: Callable[[Path], Any], *, fsync: bool = True) -> Path:
    """Atomically write ``path`` with ``writer(tmp_path)`` (e.g. ``lambda p: torch.save(obj, p)``)."""
    with atomic_path(path, fsync=fsync) as tmp:
        writer(tmp)
    return Path(path)
