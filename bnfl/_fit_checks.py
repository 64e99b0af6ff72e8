"""Checks of a run's size made before anything is allocated: memory and batch size.

* :func:`refuse_oversized`: the memory a model and one batch need at the least, counted on
  PyTorch's ``meta`` device (shapes, no storage), against the memory free on the run's device; a
  run that cannot fit is refused in one line with both figures, before the model is made (it
  used to end in the allocator's traceback). The estimate is a lower bound, so a run that fits is
  never refused: the parameters, their gradients (training computes one per parameter) and one
  batch of inputs, each at its stored size; optimiser state, activations, the clients' copies and
  the data set come on top.
* :func:`warn_batch`: one warning line when the batch size exceeds a client's training samples
  (such a client takes its whole data in each local step). Printed only inside
  :func:`warnings_on`, which ``bnfl train`` sets, so the experiments and notebooks that build
  runs print nothing new.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from bnfl.fl.stack_depth import free_bytes

__all__ = ["available_bytes", "need_bytes", "refuse_oversized", "warn_batch", "warnings_on"]

_WARN: contextvars.ContextVar[bool] = contextvars.ContextVar("bnfl_fit_warnings", default=False)


@contextlib.contextmanager
def warnings_on() -> Iterator[None]:
    """Print :func:`warn_batch`'s line inside this block (``bnfl train``)."""
    token = _WARN.set(True)
    try:
        yield
    finally:
        _WARN.reset(token)


def available_bytes(device: str) -> int | None:
    """Memory free for a new allocation on ``device``: ``MemAvailable`` of ``/proc/meminfo`` (free
    plus reclaimable cache) on the CPU where it can be read, else what the stack planner counts
    (:func:`bnfl.fl.stack_depth.free_bytes`: ``torch.cuda.mem_get_info`` on a GPU, the free physical
    pages on the CPU); ``None`` when it cannot be told (no check then)."""
    try:
        dev = torch.device(device)
        if dev.type not in ("cpu", "cuda"):
            return None
        if dev.type == "cpu":
            with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        return free_bytes(dev)
    except (RuntimeError, ValueError, OSError, AttributeError, AssertionError):
        return None


def need_bytes(build: Any, input_shape: Sequence[int], batch_size: int) -> tuple[int, int] | None:
    """``(bytes, parameters)``: the least memory a model needs to train on one batch (the module
    docstring), the model made by ``build()`` on the ``meta`` device; ``None`` when the model
    cannot be made there (a custom model that needs real tensors: no check)."""
    try:
        with torch.device("meta"):
            model = build()
        params = list(model.parameters())
    except Exception:  # noqa: BLE001 - any failure here only skips the check; the real build reports it
        return None
    n = sum(p.numel() for p in params)
    weights = sum(p.numel() * p.element_size() for p in params)
    item = params[0].element_size() if params else 4
    batch = int(batch_size) * math.prod(int(s) for s in input_shape) * item
    return 2 * weights + batch, n


def refuse_oversized(name: str, build: Any, input_shape: Sequence[int], batch_size: int, device: str) -> None:
    """Raise ``ValueError`` (one line, both figures and the fix) when the model ``build()`` makes
    and one batch of ``batch_size`` cannot fit in the memory free on ``device``."""
    need = need_bytes(build, input_shape, batch_size)
    if need is None:
        return
    free = available_bytes(device)
    if free is None or need[0] <= free:
        return
    raise ValueError(f"model: {name} needs at least {need[0] / 1e9:.1f} GB to train ({need[1]:,} parameters, "
                     f"their gradients and a batch of {batch_size}), {free / 1e9:.1f} GB is free on {device}: "
                     "make the model smaller (its [model] options) or lower --batch-size")


def warn_batch(batch_size: int, clients: Sequence[Any]) -> None:
    """One line on stderr, inside :func:`warnings_on`, when ``batch_size`` exceeds some client's
    training samples."""
    sizes = [len(c) for c in clients]
    small = [s for s in sizes if s < batch_size]
    if not _WARN.get() or not small:
        return
    share = "every client's" if len(small) == len(sizes) else f"{len(small)} of {len(sizes)} clients'"
    print(f"bnfl: warning: batch size {batch_size} is larger than {share} training samples (smallest "
          f"{min(sizes):,}): those clients take all their samples in each local step; "
          f"a batch size of at most {min(sizes):,} gives every client mini-batches", file=sys.stderr)
