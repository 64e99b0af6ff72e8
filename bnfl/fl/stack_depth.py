r"""How many models one batched computation may stack: memory decides the depth.

A stacked computation (:class:`~bnfl.nn.batched.BatchedNet`: the clients of one run, or of
several runs in lock-step, :func:`bnfl.fl.lockstep.run_lockstep`) holds, per stacked model (a
*row*), its parameters, their gradients, momentum buffers and the copy it received or uploads,
and the activations of its mini-batch kept for the backward pass. :func:`row_bytes` estimates that
from the model itself:

.. math:: \text{row} = 4\,P + 3\,B\,A

with :math:`P` the bytes of the parameters and buffers, :math:`B` the mini-batch and :math:`A`
the bytes of every module's output for one sample (measured by one forward of two samples on the
CPU: what autograd keeps for the backward, its gradient and a transient of the same size).
:func:`max_rows` divides a share of the device's free memory (``torch.cuda.mem_get_info`` on a
GPU, the available physical memory on the CPU) by it. A stack with more rows is split
(:func:`bnfl.fl.batched_together.stacks`) instead of running out of memory; :class:`StackDepth`
states the numbers it used.
"""

from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["StackDepth", "free_bytes", "max_rows", "row_bytes"]

#: share of the free memory a stack may plan to use (the rest: the allocator's fragmentation,
#: evaluation, the data set on the device, the workspace of convolutions)
FRACTION = 0.5


def free_bytes(device: str | torch.device) -> int:
    """Free memory of ``device`` in bytes: ``torch.cuda.mem_get_info`` for a CUDA device, the
    available physical memory (``os.sysconf``) for the CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # no sysconf: assume 4 GiB
        return 4 << 30


def _activation_bytes(model: nn.Module, sample_shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of every module's output for one sample (a forward of two samples, train mode, on a
    CPU copy of ``model``; BN needs more than one sample)."""
    net = copy.deepcopy(model).to("cpu", dtype).train()
    total = 0

    def hook(_m: nn.Module, _i: Any, out: Any) -> None:
        nonlocal total
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()

    handles = [m.register_forward_hook(hook) for m in net.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            net(torch.zeros(2, *sample_shape, dtype=dtype))
    finally:
        for h in handles:
            h.remove()
    return max(1, total // 2)


def row_bytes(model: nn.Module, sample_shape: tuple[int, ...], batch: int, *,
              dtype: torch.dtype = torch.float32) -> int:
    """Estimated bytes of one stacked model training on ``batch`` samples of ``sample_shape``
    (module docstring: :math:`4P + 3BA`)."""
    size = torch.tensor([], dtype=dtype).element_size()
    state = sum(t.numel() for t in model.state_dict().values() if t.is_floating_point()) * size
    return 4 * state + 3 * int(batch) * _activation_bytes(model, tuple(sample_shape), dtype)


@dataclass(frozen=True)
class StackDepth:
    """The depth :func:`max_rows` chose and what it was computed from (bytes)."""

    rows: int
    row_bytes: int
    free_bytes: int
    fraction: float

    def describe(self) -> str:
        return (f"stack depth {self.rows} models: {self.row_bytes / 2**20:.1f} MiB per model, "
                f"{self.fraction:.0%} of {self.free_bytes / 2**30:.1f} GiB free")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def max_rows(model: nn.Module, sample_shape: tuple[int, ...], batch: int, *, device: str | torch.device,
             dtype: torch.dtype = torch.float32, free: int | None = None, fraction: float = FRACTION) -> StackDepth:
    """How many models training on ``batch`` samples each fit in ``fraction`` of the free memory
    of ``device`` (``free``: that memory in bytes, measured when not given); at least 1 (a single
    model that does not fit trains anyway, as it would alone).

    Parameters
    ----------
    model : nn.Module
        The architecture (copied; not moved or changed).
    sample_shape : tuple of int
        One sample's shape.
    batch : int
        Mini-batch per model.
    device : str or torch.device
    dtype : torch.dtype, default float32
    free : int, optional
        Free bytes (default :func:`free_bytes` of ``device``).
    fraction : float, default 0.5
        Share of the free memory the stack may use.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1; got {batch}")
    per = row_bytes(model, sample_shape, batch, dtype=dtype)
    avail = free_bytes(device) if free is None else int(free)
    return StackDepth(rows=max(1, int(fraction * avail) // per), row_bytes=per, free_bytes=avail, fraction=fraction)
