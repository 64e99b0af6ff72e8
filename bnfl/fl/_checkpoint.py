"""Checkpoints of a :class:`~bnfl.fl.Simulation`: everything needed to continue a run, written
atomically every round (:mod:`bnfl.fl._rundir`); a resumed run reproduces the uninterrupted one
bitwise on CPU, and a checkpoint of another run is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from bnfl.fl import _rundir
from bnfl.fl._history_file import HistoryFile, read_rows
from bnfl.fl.run_state import RunState


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it (nested in dicts, lists and tuples) on ``device``:
    an algorithm's client or server state as a checkpoint or a message brought it."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_device(v, device) for v in value)
    return value


class CheckpointMixin:
    """``state_dict``/``load_state_dict`` and the checkpoint files of a Simulation: its
    :class:`~bnfl.fl.RunState` (``run_state``), the clients' state, the channel's counters, the
    history's place and the random generators."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the run (plain tensors, dicts, lists and numbers). The
        history's rows are not in it (they are in ``history.json``): only their count."""
        return {
            **self.run_state.to_checkpoint(), **self._clients_state(), "algorithm": self.algorithm.state_dict(),
            "channel": self.channel.counters(), "history_rows": len(self.history.rows),
            # the newest row too: a kill between the checkpoint and history.json's append loses nothing
            "last_row": self.history.rows[-1] if self.history.rows else None,
            "statistics_only_done": any(row.get("statistics_only") for row in self.history.rows),
            "identity": self._identity(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": _rundir.numpy_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
        }

    def _clients_state(self) -> dict[str, Any]:
        """Every client's local state, algorithm state and batch cursor; a process that holds some
        of the clients gathers the others' from theirs (:meth:`Clients.gather_clients
        <bnfl.fl.clients.Clients.gather_clients>`), so any process can resume from the checkpoint."""
        return self.clients.gather_clients({"client_local": self.client_local,
                                            "client_algorithm": self.client_algorithm, "cursors": self.cursors})

    def _identity(self) -> dict[str, Any]:
        meta = json.dumps([self.history.meta, getattr(self, "run_config", None)], sort_keys=True, default=str)
        cached = getattr(self, "_identity_cache", None)
        if cached is None or cached[0] != meta:
            cached = (meta, _rundir.identity(self))
            self._identity_cache = cached
        return cached[1]

    def load_state_dict(self, s: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the history's rows: :meth:`load_checkpoint`, or ``s["history"]``
        in checkpoints of older bnfl)."""
        self._adopt(RunState.from_checkpoint(s))
        self.client_local = {int(k): v for k, v in s["client_local"].items()}
        # the algorithm's state: each client's (ClientContext.state) and the server's (in the RunState);
        # momentum buffers are part of them (the algorithm's momentum policy)
        self.client_algorithm = {int(k): dict(v) for k, v in s.get("client_algorithm", {}).items()}
        for k, v in s.get("client_momentum", {}).items():  # checkpoints of older bnfl kept them apart
            self.client_algorithm.setdefault(int(k), {})["optimizer.momentum"] = v
        self.cursors = {int(k): list(v) for k, v in s["cursors"].items()}
        self.algorithm.load_state_dict(s["algorithm"])
        self.channel.load_counters(s["channel"])
        if "history" in s:
            h = s["history"]
            h = json.loads(h) if isinstance(h, str) else h  # a JSON string; a dict before
            self.history = type(self.history)(rows=h["rows"], meta=self.history.meta)
        torch.set_rng_state(s["torch_rng"])
        _rundir.set_numpy_rng_state(s["numpy_rng"])
        if s.get("cuda_rng") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state_all(s["cuda_rng"])

    def save_checkpoint(self, directory: str | os.PathLike) -> Path:
        """Atomically write ``checkpoint.pt`` (the previous one kept as ``checkpoint.prev.pt``), then
        append the new history rows to ``history.json``. The checkpoint holds the newest row, so a
        kill between the two leaves nothing that a resume cannot complete (:meth:`load_checkpoint`).
        Before the checkpoint, ``history.json`` is made to hold every row but the newest: after a
        resume restored a row from the checkpoint, that row is on disk before the next checkpoint."""
        d = Path(directory)
        s = self.state_dict()  # on every process (a gather when the clients are spread over several)
        if self.clients.writes:
            d.mkdir(parents=True, exist_ok=True)
            if len(self.history.rows) > 1:  # a no-op unless a resume restored rows the file lacks (never a
                # header-only file before the first checkpoint: a folder with a history and no checkpoint is refused)
                self._sync_history(d, type(self.history)(rows=self.history.rows[:-1], meta=self.history.meta))
            _rundir.save(d, s)
            self._sync_history(d)
        self.clients.after_save()
        return d / _rundir.CHECKPOINT

    def _sync_history(self, d: Path, history: Any = None) -> None:
        f = getattr(self, "_history_file", None)
        if f is None or f.path != d / "history.json":
            f = self._history_file = HistoryFile(d / "history.json")
        f.sync(self.history if history is None else history)

    def load_checkpoint(self, directory: str | os.PathLike) -> bool:
        """Load ``directory/checkpoint.pt`` if present; return whether it was. A checkpoint of
        another run, or one this config's rounds cannot continue, raises
        :class:`~bnfl.fl._rundir.CheckpointError` before anything changes."""
        d = Path(directory)
        s = _rundir.load(d)
        if s is None:
            return False
        _rundir.check_resumable(d / _rundir.CHECKPOINT, s, self._identity(), self.config.rounds)
        rows = None
        if "history" not in s:
            n = int(s["history_rows"])
            rows = read_rows(d / "history.json") if (d / "history.json").exists() else []
            last = s.get("last_row")
            if len(rows) == n - 1 and isinstance(last, dict) and last.get("round") == s["round"]:
                rows.append(last)  # killed after the checkpoint, before its row reached history.json
            if len(rows) < n:
                raise _rundir.CheckpointError(f"{d / 'history.json'} holds {len(rows)} rounds but {d / 'checkpoint.pt'} "
                                              f"is at row {n}: the history was cut; start again with --overwrite")
        self.load_state_dict(s)
        if rows is not None:
            self.history = type(self.history)(rows=rows[:n], meta=self.history.meta)
        state = self.run_state
        self._adopt(dataclasses.replace(state, global_state={k: v.to(self.device) for k, v in state.global_state.items()},
                                        server_state=to_device(state.server_state, self.device)))
        self.client_local = {c: {k: v.to(self.device) for k, v in s.items()} for c, s in self.client_local.items()}
        self.history.meta.update(self.clients.meta())
        self.client_algorithm = {c: to_device(v, self.device) for c, v in self.client_algorithm.items()}
        return True

    def _start(self, *, resume: bool, overwrite: bool) -> bool:
        """Check the run folder (:func:`bnfl.fl._rundir.prepare`) and load its checkpoint when
        resuming; return whether one was loaded."""
        d = self.config.checkpoint_dir
        if resume and not d:
            raise ValueError("resume=True needs config.checkpoint_dir")
        if self.round > 0 or self.history.rows:  # this object's own run continues: its folder is its own
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("always", _rundir.ResumeWarning)
            found = _rundir.prepare(d, resume=resume, overwrite=overwrite, remove=self.clients.writes)
            if d and self.clients.writes:  # this process holds the folder's lock (Simulation.run)
                _rundir.remove_stale_temps(d)
            return found and self.load_checkpoint(d)

    def write_history(self) -> None:
        if self.config.checkpoint_dir and self.clients.writes:
            d = Path(self.config.checkpoint_dir)
            d.mkdir(parents=True, exist_ok=True)
            self._sync_history(d)
