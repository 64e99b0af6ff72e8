"""Checkpoints of a :class:`~bnfl.fl.Simulation`: everything needed to continue a run, written
atomically every round; a resumed run reproduces the uninterrupted one bitwise on CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnfl.fl._run import History


class CheckpointMixin:
    """``state_dict``/``load_state_dict`` and the checkpoint files of a Simulation."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the run."""
        return {
            "round": self.round, "global_state": self.global_state, "client_local": self.client_local,
            "client_momentum": self.client_momentum, "global_momentum": self.global_momentum,
            "cursors": self.cursors, "algorithm": self.algorithm.state_dict(),
            "channel": self.channel.counters(), "history": self.history.dumps(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
        }

    def load_state_dict(self, s: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.round = int(s["round"])
        self.global_state = s["global_state"]
        self.client_local = {int(k): v for k, v in s["client_local"].items()}
        self.client_momentum = {int(k): v for k, v in s["client_momentum"].items()}
        self.global_momentum = s["global_momentum"]
        self.cursors = {int(k): list(v) for k, v in s["cursors"].items()}
        self.algorithm.load_state_dict(s["algorithm"])
        self.channel.load_counters(s["channel"])
        h = s["history"]
        h = json.loads(h) if isinstance(h, str) else h  # a JSON string (pickling the rows was slow); a dict before
        self.history = History(rows=h["rows"], meta=h["meta"])
        torch.set_rng_state(s["torch_rng"])
        np.random.set_state(s["numpy_rng"])
        if s.get("cuda_rng") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state_all(s["cuda_rng"])

    def save_checkpoint(self, directory: str | os.PathLike) -> Path:
        """Atomically write ``checkpoint.pt`` and ``history.json`` into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        tmp, state = d / "checkpoint.pt.tmp", self.state_dict()
        torch.save(state, tmp)
        os.replace(tmp, d / "checkpoint.pt")
        (d / "history.json").write_text(state["history"])  # the same text as History.to_json
        return d / "checkpoint.pt"

    def load_checkpoint(self, directory: str | os.PathLike) -> bool:
        """Load ``directory/checkpoint.pt`` if present; return whether it was."""
        f = Path(directory) / "checkpoint.pt"
        if not f.exists():
            return False
        self.load_state_dict(torch.load(f, weights_only=False, map_location="cpu"))
        self.global_state = {k: v.to(self.device) for k, v in self.global_state.items()}
        return True

    def _write_history(self) -> None:
        if self.config.checkpoint_dir:
            d = Path(self.config.checkpoint_dir)
            d.mkdir(parents=True, exist_ok=True)
            self.history.to_json(d / "history.json")

