"""A cache of training runs, keyed by the hash of the full run configuration.

Several entries share runs (FedTAN Fig. 9, Table 2 and Fig. 10 plot the same runs; the
FedTAN curves of Fig. 4 reappear in Fig. 5 and Fig. 12). Within one ``reproduce`` call
the cache holds them in memory; with a folder it also keeps them on disk
(``<folder>/<hash>.json``) so a later call, or a resumed one, reuses them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from bnfl.experiments.core import _jsonable, code_fingerprint, config_hash

__all__ = ["RunBusy", "RunCache"]


class RunBusy(BaseException):
    """Another process is computing a run this one needs, and the cache was told not to wait
    (``RunCache(wait=False)``): ``bnfl reproduce --jobs N`` then puts the entry back and gives
    the worker another one, instead of idling (or computing the run a second time) until the
    run is stored. A ``BaseException``, like ``KeyboardInterrupt``, so that an entry's own
    ``except Exception`` around a training call cannot swallow it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"run {key} is being computed by another process")
        self.key = key


class RunCache:
    """Memoise ``compute(spec)`` by ``config_hash(spec)``, in memory and optionally on disk.

    Parameters
    ----------
    folder : path, optional
        Where ``<hash>.json`` files live; ``None`` keeps the cache in memory only.
    wait : bool, default True
        What to do when another process sharing ``folder`` holds the lock of a run this one needs:
        wait for it and read its value (``True``), or raise :class:`RunBusy` at once (``False``;
        the parallel runner's workers, which then run another entry meanwhile).

    Attributes
    ----------
    hits, misses : int
        How many lookups were answered from the cache / computed.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, wait: bool = True) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.wait = bool(wait)
        self._memory: dict[str, Any] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(spec: Mapping[str, Any]) -> str:
        """The cache key of ``spec``: its configuration and the bnfl code that computes it."""
        return config_hash({"spec": spec, "code": code_fingerprint()})

    def _path(self, key: str) -> Path | None:
        return None if self.folder is None else self.folder / f"{key}.json"

    def get(self, spec: Mapping[str, Any]) -> Any | None:
        """The stored value for ``spec``, or ``None``."""
        key = self.key(spec)
        if key in self._memory:
            return self._memory[key]
        path = self._path(key)
        if path is not None and path.is_file():
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                return None  # a torn write from an interrupted run: recompute
            if record.get("key") == key:
                self._memory[key] = record["value"]
                return record["value"]
        return None

    def put(self, spec: Mapping[str, Any], value: Any) -> None:
        """Store ``value`` for ``spec`` (in memory, and atomically on disk if a folder is set)."""
        key = self.key(spec)
        value = _jsonable(value)
        self._memory[key] = value
        path = self._path(key)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one per process: parallel writers never share it
            tmp.write_text(json.dumps({"key": key, "spec": _jsonable(spec), "value": value}))
            os.replace(tmp, path)  # atomic: a crash never leaves half a file under the key

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        """Hold ``<folder>/<key>.lock`` (an exclusive ``flock``) so that processes sharing the folder
        (``bnfl reproduce --jobs N``) compute a run once: the others wait and read it."""
        if self.folder is None:
            yield
            return
        try:
            import fcntl
        except ImportError:  # no flock (Windows): parallel processes may compute a run twice
            yield
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{key}.lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunBusy(key) from None
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def hold(self, spec: Mapping[str, Any]) -> Iterator[None]:
        """Hold the lock of ``spec`` (a run, or a group of runs computed together) across processes
        sharing the folder: others wait (or raise :class:`RunBusy`) until it is released. Store the
        values with :meth:`put` before leaving, so that the next holder finds them."""
        with self._lock(self.key(spec)):
            yield

    def get_or_compute(self, spec: Mapping[str, Any], compute: Callable[[], Any]) -> Any:
        """``compute()`` once per distinct ``spec``; later calls, in this or another process sharing
        the folder, return the stored value."""
        found = self.get(spec)
        if found is None:
            with self._lock(self.key(spec)):
                found = self.get(spec)  # another process may have computed it while we waited
                if found is None:
                    self.misses += 1
                    self.put(spec, compute())
                    return self._memory[self.key(spec)]
        self.hits += 1
        return found

    def __len__(self) -> int:
        return len(self._memory)
