"""A run's folder (``checkpoint_dir``, ``bnfl train --out``): what is in it, whose it is, and the
checkpoint files, written so that nothing a run did is lost or mixed with another run.

Files of a run folder:

``checkpoint.pt``
    Everything needed to continue (written every round), plain tensors, dicts, lists and numbers
    only: it loads with ``torch.load(weights_only=True)``, so nothing in it runs as code. It
    records the run's *identity* (method and options, model, data, partition, seed, training
    configuration, engine); resuming with another identity is refused (:func:`identity_diff`).
``checkpoint.prev.pt``
    The checkpoint before it. A new checkpoint is written to a temporary file, synced and read
    back; the current one is linked to ``checkpoint.prev.pt`` and only then is the new one renamed
    over ``checkpoint.pt``, so a kill at any instant leaves a ``checkpoint.pt`` to resume from
    (:func:`save`). Temporary files of a killed writer are removed at the next start.
``.bnfl.lock``
    The folder's lock (:mod:`bnfl._folder_lock`): one writer at a time; a second is refused
    with one line naming the holder's pid.
``history.json``
    :meth:`bnfl.fl.History.dumps`'s text, one row appended per round (:mod:`bnfl.fl._history_file`).

Rules (``bnfl train``, :meth:`bnfl.fl.Simulation.run`):

- a new run into a folder that holds one (any of :data:`RUN_FILES`) is an error
  (:class:`RunFolderError`) unless ``overwrite`` (which removes those files first) or ``resume``;
- ``resume`` with no checkpoint in the folder warns (:class:`ResumeWarning`) and starts at round 1,
  unless the folder holds another run's files without a checkpoint (an error);
- an unreadable checkpoint is one error line naming the file and the earlier one that can be used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnfl import _safe_torch

__all__ = ["CHECKPOINT", "PREVIOUS", "RESUMABLE", "RUN_FILES", "CheckpointError", "ResumeWarning",
           "RunFolderError", "identity", "identity_diff", "load", "prepare", "save"]

CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"
#: Files that make a folder hold a run (bnfl writes them; nothing else in the folder is touched).
RUN_FILES = (CHECKPOINT, PREVIOUS, "history.json", "history.csv")
#: TrainConfig fields a resumed run may change (documented in docs/getting-started.md).
RESUMABLE = ("rounds", "eval_every", "progress", "checkpoint_dir", "device")


class RunFolderError(ValueError):
    """A run would replace or mix with another run's files."""


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not belong to the run that asks for it."""


class ResumeWarning(UserWarning):
    """``resume`` found nothing to resume: the run starts at round 1."""


# -- the folder -------------------------------------------------------------------------------------
def holds_run(directory: str | os.PathLike[str]) -> list[str]:
    """The run files (:data:`RUN_FILES`) present in ``directory``."""
    d = Path(directory)
    return [name for name in RUN_FILES if (d / name).exists()]


def prepare(directory: str | os.PathLike[str] | None, *, resume: bool, overwrite: bool,
            remove: bool = True) -> bool:
    """Check ``directory`` before a run writes to it; return whether there is a checkpoint to resume.

    A new run (neither flag) into a folder holding a run raises :class:`RunFolderError`;
    ``overwrite`` removes the run files (when ``remove``; a distributed run's other ranks only
    check); ``resume`` without a checkpoint warns (:class:`ResumeWarning`), or raises when the
    folder holds a run's other files (they would be replaced).
    """
    if directory is None:
        return False
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite contradict each other: choose one")
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise RunFolderError(f"output folder {d} is a file; give a folder with --out")
    found = holds_run(d) if d.is_dir() else []
    if overwrite:
        for name in found if remove else ():
            (d / name).unlink(missing_ok=True)
        return False
    if resume:
        if CHECKPOINT in found or PREVIOUS in found:
            return True
        if found:
            raise RunFolderError(f"{d} holds a run ({', '.join(found)}) but no {CHECKPOINT} to resume from; "
                                 f"pass --overwrite to replace it, or another --out")
        warnings.warn(f"--resume: no checkpoint in {d}; starting a new run at round 1", ResumeWarning, stacklevel=3)
        return False
    if found:
        raise RunFolderError(f"{d} already holds a run ({', '.join(found)}); pass --resume to continue it, "
                             f"--overwrite to replace it, or another --out")
    return False


# -- identity ---------------------------------------------------------------------------------------
def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, torch.Tensor):
            t = p.detach().cpu().contiguous()
            h.update(f"{tuple(t.shape)}{t.dtype}".encode())
            flat = t.reshape(-1)
            if flat.numel() > 4_000_000:  # a large data set: a fixed sample of it and its sum
                step = flat.numel() // 1_000_000
                h.update(str(float(flat.double().sum())).encode())
                flat = flat[::step].contiguous()
            h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        elif isinstance(p, np.ndarray):
            h.update(np.ascontiguousarray(p, dtype=np.int64).tobytes())
        else:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _meta_identity(meta: dict[str, Any], run: dict[str, Any] | None = None) -> dict[str, Any]:
    """The identity fields recorded in a history's meta (also in checkpoints of older bnfl), and
    ``run``: the run config's method, options, model, data and partition (``sim.run_config``, set
    by :func:`bnfl.train.config.build`)."""
    out: dict[str, Any] = {}
    for key in ("method", "method_options", "model", "data", "partition"):
        if key in (run or {}):
            out[key] = run[key]  # type: ignore[index]
    if "algorithm" in meta:
        out["algorithm"] = meta["algorithm"]
    cfg = dict(meta.get("config") or {})
    if "seed" in cfg:
        out["seed"] = cfg["seed"]
    schedule = cfg.pop("schedule", None) or {}
    for k, v in cfg.items():
        if k not in RESUMABLE and k != "seed":
            out[f"train.{k}"] = v
    for k, v in schedule.items():
        if k != "lr":
            out[f"train.{k}"] = v
    if "client_sizes" in meta:
        out["client sizes"] = meta["client_sizes"]
    batched = (meta.get("batched") or {}).get("used")
    out["engine"] = meta.get("engine", "simulation") + (" (batched)" if batched else "")
    return _plain(out)


def identity(sim: Any) -> dict[str, Any]:
    """What makes ``sim`` the run it is: method and options, model, data, partition, seed,
    training configuration (all but :data:`RESUMABLE`) and engine, as plain values."""
    out = _meta_identity(sim.history.meta, getattr(sim, "run_config", None))
    model = sim.model
    n = sum(p.numel() for p in model.parameters())
    layout = _digest([(k, list(v.shape), str(v.dtype)) for k, v in model.state_dict().items()],
                     [type(m).__name__ for m in model.modules()])
    out["model architecture"] = f"{type(model).__name__}, {n} parameters, layout {layout}"
    out["test data"] = f"{sim.x_test.shape[0]} samples, content {_digest(sim.x_test, sim.y_test)}"
    out["client samples"] = f"{len(sim.client_indices)} clients, content {_digest(*sim.client_indices)}"
    return out


def identity_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"field: <saved> (checkpoint) vs <current> (this run)"`` for each field that differs
    (fields only one side records, from an older bnfl, are not compared)."""
    def show(v: Any) -> str:
        s = repr(v)
        return s if len(s) <= 80 else s[:77] + "..."

    return [f"{k}: {show(saved[k])} (checkpoint) vs {show(current[k])} (this run)"
            for k in current if k in saved and saved[k] != current[k]]


# -- checkpoint files -------------------------------------------------------------------------------
def numpy_rng_state() -> dict[str, Any]:
    """``np.random.get_state()`` as plain values (a safe load refuses numpy objects)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def set_numpy_rng_state(s: Any) -> None:
    if isinstance(s, dict):
        s = (s["name"], s["keys"].numpy().astype(np.uint32), s["pos"], s["has_gauss"], s["cached_gaussian"])
    np.random.set_state(s)


def _safe_load(path: Path) -> dict[str, Any]:
    # Checkpoints of older bnfl hold numpy's RNG state as numpy objects: allow exactly the
    # functions and types that rebuild a numpy array, nothing else (bnfl._safe_torch).
    state = _safe_torch.load(path, numpy_arrays=True)
    if not isinstance(state, dict) or "round" not in state:
        raise CheckpointError(f"{path} is not a bnfl checkpoint (no round in it)")
    return state


def _why(err: BaseException) -> str:
    return _safe_torch.why(err)


def _round_of(path: Path) -> int | None:
    try:
        return int(_safe_load(path)["round"])
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        return None


def load(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The checkpoint in ``directory`` (None if there is none); raises :class:`CheckpointError`
    with one line naming the file, and the earlier checkpoint that can be used, if it is unreadable.

    A folder holding only ``checkpoint.prev.pt`` (left by an older bnfl, whose rotation could be
    cut between its two renames) resumes from it, with a :class:`ResumeWarning` saying so."""
    d = Path(directory)
    f, prev = d / CHECKPOINT, d / PREVIOUS
    if not f.exists():
        if not prev.exists():
            return None
        try:
            state = _safe_load(prev)
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"{f} is missing and {prev} is unreadable ({_why(err)}): start again with "
                                  f"--overwrite") from None
        warnings.warn(f"{f} is missing (a save was interrupted); resuming from {prev} (round {state['round']})",
                      ResumeWarning, stacklevel=2)
        return state
    try:
        return _safe_load(f)
    except Exception as err:  # noqa: BLE001 - torch's zip reader, the unpickler, a truncated file
        r = _round_of(prev) if prev.exists() else None
        raise CheckpointError(f"checkpoint {f} is unreadable ({_why(err)}); " + (
            f"the earlier checkpoint {prev} (round {r}) is intact: rename it to {CHECKPOINT} to resume from "
            f"round {r}" if r is not None else "no earlier checkpoint is intact: start again with --overwrite")
        ) from None


def _temp_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")  # the name bnfl._atomic uses


def remove_stale_temps(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that writers killed mid-write left in ``directory``
    (``.checkpoint.pt.<pid>.tmp`` and the like, of :data:`RUN_FILES`); return them. Call it only
    while holding the folder's lock (:mod:`bnfl._folder_lock`): then no live writer owns them."""
    d = Path(directory)
    if not d.is_dir():
        return []
    gone = []
    for name in RUN_FILES:
        for tmp in d.glob(f".{name}.*.tmp"):
            if tmp.name[len(name) + 2:-4].isdigit():
                tmp.unlink(missing_ok=True)
                gone.append(tmp)
    return gone


def _fsync(path: Path, *, folder: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if folder else 0))
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - a folder that cannot be synced (some file systems)
        pass
    finally:
        os.close(fd)


def save(directory: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write ``state`` as ``directory/checkpoint.pt``, with the checkpoint it replaces kept as
    ``checkpoint.prev.pt``; a kill at any instant leaves ``checkpoint.pt`` (old or new) in place.

    The new file is written to a temporary file, synced to disk and read back; then the current
    ``checkpoint.pt`` is hard-linked (copied where links are not supported) to a second temporary
    name and renamed over ``checkpoint.prev.pt``, and only then is the new file renamed over
    ``checkpoint.pt``. Each rename is atomic, and ``checkpoint.pt`` is never moved away.
    """
    d = Path(directory)
    f = d / CHECKPOINT
    tmp, prev_tmp = _temp_name(f), _temp_name(d / PREVIOUS)
    try:
        try:
            torch.save(state, tmp)
            _fsync(tmp)
        except (RuntimeError, OSError) as err:  # torch's zip writer reports a full disk as a RuntimeError
            why = " ".join(str(err).split())[:120] if not isinstance(err, OSError) or not err.strerror else \
                err.strerror.lower()
            raise CheckpointError(f"writing {f} failed ({why}): is the disk full? {f.name} was left as it was; free "
                                  f"some space and run the same command again (add --resume to continue)") from None
        try:
            back = _safe_torch.load(tmp, mmap=True)
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"writing {f} failed: the file read back is unreadable ({_why(err)}); "
                                  f"{f.name} was left as it was") from None
        if back.get("round") != state["round"]:
            raise CheckpointError(f"writing {f} failed: the file read back is of round {back.get('round')}, "
                                  f"not {state['round']}; {f.name} was left as it was")
        del back
        if f.exists():
            prev_tmp.unlink(missing_ok=True)
            try:
                os.link(f, prev_tmp)
            except OSError:  # a file system without hard links
                shutil.copyfile(f, prev_tmp)
            os.replace(prev_tmp, d / PREVIOUS)
            prev_tmp.unlink(missing_ok=True)  # left when PREVIOUS already was this file: rename does nothing then
        os.replace(tmp, f)
        _fsync(d, folder=True)
    except BaseException:
        for t in (tmp, prev_tmp):
            with contextlib.suppress(OSError):
                t.unlink()
        raise
    return f


def check_resumable(path: Path, state: dict[str, Any], current: dict[str, Any], rounds: int) -> None:
    """Refuse a checkpoint of another run (one line naming each differing field), or one that
    ``rounds`` cannot continue."""
    saved = state.get("identity") or _meta_identity(_old_meta(state))
    diff = identity_diff(saved, current)
    if diff:
        raise CheckpointError(f"{path} is of another run: {'; '.join(diff)}; resume with the checkpoint's settings "
                              f"(only rounds, eval_every, progress, out and device may change: docs/run-folders.md), or pass "
                              f"--overwrite or another --out")
    done = int(state["round"])
    if done > rounds:
        raise CheckpointError(f"rounds: {path} is at round {done}, past rounds = {rounds}; "
                              f"pass --rounds {done} or more to continue it")
    if state.get("statistics_only_done") and rounds > done:
        raise CheckpointError(f"rounds: {path} is of a finished run whose statistics-only round T+1 already ran; "
                              f"it cannot be extended to {rounds} rounds (start a new run with --overwrite)")


def _old_meta(state: dict[str, Any]) -> dict[str, Any]:
    h = state.get("history")
    h = json.loads(h) if isinstance(h, str) else (h or {})
    return dict(h.get("meta") or {})

