"""What a run folder says about the run that wrote it: the run's description (method, options,
model, data, partition, seed, engine) and where it ran (bnfl version, git commit, machine), recorded
in ``history.json``'s meta by :func:`bnfl.fl.run` so that a folder found later can say what ran."""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

import torch

from bnfl._version import __version__, git_commit

__all__ = ["describe", "machine"]


@functools.cache
def machine() -> dict[str, Any]:
    """The machine and software a run used: CPU model, cores, OS, Python, torch (and its CUDA
    build), bnfl version and the git commit of the checkout bnfl is imported from (``None``
    outside a git checkout)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:  # not Linux
        pass
    return {"bnfl": __version__, "git_commit": git_commit(), "cpu": cpu, "cores": os.cpu_count(),
            "os": platform.platform(terse=True), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda}


def describe(cfg: Any, engine: str) -> dict[str, Any]:
    """``{"run": ..., "machine": ...}`` for ``history.meta``: the config's method id and options,
    model, data (without its local ``root``), partition, seed and training settings, the engine,
    and :func:`machine`."""
    run = {"method": cfg.method, "method_options": dict(cfg.method_options), "model": dict(cfg.model),
           "data": {k: v for k, v in cfg.data.items() if k != "root"}, "partition": dict(cfg.partition),
           "seed": cfg.seed, "train": dict(cfg.train), "engine": engine}
    return {"run": run, "machine": machine()}
