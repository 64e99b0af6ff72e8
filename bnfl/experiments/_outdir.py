"""``bnfl run <id> --out OUT`` never silently replaces another run's result: ``OUT/<id>/`` holding a
result of other settings (profile, seeds, device, configuration, data root, engine) is an error
unless ``--overwrite``. The same settings are no conflict: a stored result is reused when this
machine finished it with the same code, and recomputed (replaced atomically) when bnfl changed.

``bnfl reproduce`` is different by design: its folder (``figures/``) is the store of the current
results, so an entry whose stored result has another hash is recomputed and replaced, and one this
machine finished is loaded (resume); each entry's files are written atomically, so an interrupted
run leaves whole entries only (see :mod:`bnfl.experiments.runner`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from bnfl.experiments.core import Result, _resolve_data_root, _seed_list
from bnfl.experiments.registry import get
from bnfl.experiments.runner import _command, result_path

__all__ = ["EntryFolderError", "check_entry_folder"]


class EntryFolderError(ValueError):
    """``bnfl run`` would replace a result of other settings."""


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def check_entry_folder(out: str | os.PathLike[str], experiment_id: str, *, profile: str, device: str,
                       seeds: int | None, data_root: str | os.PathLike[str] | None, batched: str) -> None:
    """Raise :class:`EntryFolderError` naming each differing setting if ``out/<id>/result.json`` holds
    a result of other settings than these (``bnfl run``'s arguments)."""
    path = result_path(out, experiment_id)
    if not path.is_file():
        return
    try:
        stored = Result.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise EntryFolderError(f"{path} is not a readable result ({type(err).__name__}); pass --overwrite to "
                               f"replace it, or another --out") from None
    entry = get(experiment_id)
    default = int(entry.default_seeds.get(profile, 1))
    seed_list = _seed_list(default, seeds)
    new = {"profile": profile, "seeds": seed_list, "device": device, "configuration": _plain(entry.config(profile)),
           "command": _command(entry.id, profile, str(out), device, seed_list, default,
                               _resolve_data_root(data_root), batched)}
    old = {"profile": stored.profile, "seeds": stored.seeds, "device": stored.device,
           "configuration": _plain(stored.config), "command": stored.command}

    def show(v: Any) -> str:
        s = repr(v)
        return s if len(s) <= 70 else s[:67] + "..."

    diff = [f"{k}: {show(old[k])} (stored) vs {show(new[k])} (this run)" for k in ("profile", "seeds", "device")
            if old[k] != new[k]]
    if old["configuration"] != new["configuration"]:
        keys = sorted(k for k in {*old["configuration"], *new["configuration"]}
                      if old["configuration"].get(k) != new["configuration"].get(k))
        diff.append(f"configuration: differs in {', '.join(keys)}")
    if not diff and old["command"] != new["command"]:  # the data root or the engine
        diff.append(f"command: {show(old['command'])} (stored) vs {show(new['command'])} (this run)")
    if diff:
        raise EntryFolderError(f"{path.parent} holds a result of other settings: {'; '.join(diff)}; pass --overwrite "
                               f"to replace it, or another --out")
