"""One writer per output folder: an advisory lock on ``<folder>/.bnfl.lock``.

``bnfl train --out``, ``bnfl run --out`` and ``bnfl reproduce --out`` (and
:meth:`bnfl.fl.Simulation.run` with a ``checkpoint_dir``) hold the lock of their folder while
they write to it. A second process that asks for it is refused at once with one line naming the
holder's pid (:class:`FolderBusyError`), before it reads or writes anything there. The lock is
``flock`` on an open file: the operating system releases it when the holder exits, however it
exits (``kill -9`` included), so a stale lock never needs removing by hand. The lock file holds the
holder's pid; a holder that finishes removes it (one killed leaves it, unlocked, for the next).

The lock is re-entrant within a process (a run inside a command that already holds the folder).
``bnfl reproduce --jobs N`` takes it once, in the parent; its workers (spawned processes) never
ask for it, and coordinate among themselves with their own per-run locks
(:mod:`bnfl.experiments.cache`). A process forked by the holder shares the lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK_FILE", "FolderBusyError", "hold", "locked"]

LOCK_FILE = ".bnfl.lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, folders are not locked
    fcntl = None  # type: ignore[assignment]


class FolderBusyError(ValueError):
    """Another process is writing to this folder."""


#: folders this process holds: resolved path -> [file descriptor, depth]
_HELD: dict[str, list[int]] = {}


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def hold(directory: str | os.PathLike[str], *, what: str = "run") -> None:
    """Take ``directory``'s lock for the rest of this process (or until :func:`release`);
    create the folder if needed.

    Raises
    ------
    FolderBusyError
        Another process holds it (the message names its pid).
    OSError
        The folder cannot be created or the lock file cannot be opened (read-only, a file in the way).
    """
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise ValueError(f"output folder {d} is a file; give a folder with --out")
    d.mkdir(parents=True, exist_ok=True)
    key = str(d.resolve())
    if key in _HELD:
        _HELD[key][1] += 1
        return
    path = d / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is None:
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            pid = _holder(fd)
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderBusyError(
                f"{d} is in use by another bnfl {what} (pid {pid}); wait for it to finish, or give another "
                f"--out") from None
        try:  # the holder before us may have removed the file between our open and our lock: open it anew
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = [fd, 1, os.getpid()]


def release(directory: str | os.PathLike[str]) -> None:
    """Give back one :func:`hold` of ``directory`` (the lock goes at the last)."""
    key = str(Path(directory).resolve())
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _HELD[key]
        if held[2] == os.getpid():  # the lock file goes with the lock (a forked child leaves its parent's)
            with contextlib.suppress(OSError):
                os.unlink(Path(key) / LOCK_FILE)
        os.close(held[0])  # closing the descriptor releases the flock


@contextlib.contextmanager
def locked(directory: str | os.PathLike[str] | None, *, what: str = "run") -> Iterator[None]:
    """Hold ``directory``'s lock inside the ``with`` block (``None``: nothing to lock). A block
    that fails leaves no folder it made behind while it stays empty (a config refused after the
    lock was taken: nothing written, no empty ``--out`` folder)."""
    if directory is None:
        yield
        return
    made = [p for p in (Path(directory), *Path(directory).parents) if not p.exists()]
    hold(directory, what=what)
    try:
        yield
    except BaseException:
        release(directory)
        for p in made:  # the folder first, then the parents made for it; each only while empty
            try:
                p.rmdir()
            except OSError:
                break
        raise
    release(directory)
