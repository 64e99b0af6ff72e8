r"""Fewer launches per batched step on a GPU: a CUDA-graph capture of the steady local step, and
channels-last, TF32 and bfloat16 as options, all off by default (:class:`DeviceOptions`).

A round of the batched engine (:mod:`bnfl.fl.batched`) is ``E`` local steps of one stacked
forward, backward and SGD update; with small client batches each step is launch-bound on a GPU
(``docs/engines.md``). With ``cuda_graphs=True`` the steps after the first of a round whose shapes
are static (every client still training, no padding mask, no algorithm hook on the step, no
coupled step) replay one captured CUDA graph (:class:`GraphedStep`, ``torch.cuda.CUDAGraph``):
each step copies its mini-batch into the graph's input tensors and replays the forward, the loss,
the backward and the :class:`~bnfl.fl.batched_sgd.StackedSGD` update at once. The stacked
parameters, buffers and momentum buffers then live in tensors the graph owns across rounds (a
round's states are copied into them, :meth:`BatchedNet.load <bnfl.nn.batched.BatchedNet.load>`
``in_place``), and what a client uploads is cloned out of them. Step 1 of every round runs eagerly
(it creates the momentum buffers, and FedTAN's coupled step is there). A graph is captured per
stack size, batch, learning rate and frozen phase, and replayed from then on. The eager path is
kept: the replay runs the same kernels on the same tensors and equals it (``tests/test_gpu.py``;
without CUDA the option does nothing).

The other options change the arithmetic and are measured, not assumed (``docs/gpu.md``):

* ``channels_last``: the stacked convolutions' inputs in channels-last memory layout;
* ``tf32``: TensorFloat-32 in matrix products and convolutions (``torch.backends``; PyTorch's own
  default already lets cuDNN convolutions use it; ``False`` leaves the process's settings);
* ``bf16``: the forward under ``torch.autocast`` in bfloat16 (BN and the loss stay float32).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["DeviceOptions", "GraphedStep"]


@dataclass(frozen=True)
class DeviceOptions:
    """How the batched engine runs its steps on a CUDA device (module docstring); all off by
    default, and none has an effect on the CPU.

    Parameters
    ----------
    cuda_graphs : bool, default False
        Replay the steady local step as a captured CUDA graph (equal to the eager step).
    channels_last : bool, default False
        Channels-last layout for the stacked convolutions' inputs.
    tf32 : bool, default False
        Allow TF32 in matrix products and convolutions during the local steps.
    bf16 : bool, default False
        Run the forward under bfloat16 autocast.
    graph_max_images : int, default 1024
        Capture only steps of at most this many images (stacked models x mini-batch): a graph
        pays where a step is launch-bound. On one H200 (ResNet-20, B = 32, ``docs/engines.md``)
        the replay ran 1.65x the eager step at 160 images per step, equal at 800 (FedTAN 1.24x)
        and 0.86x at 4,000.
    """

    cuda_graphs: bool = False
    channels_last: bool = False
    tf32: bool = False
    bf16: bool = False
    graph_max_images: int = 1024

    def __post_init__(self) -> None:
        for name in ("cuda_graphs", "channels_last", "tf32", "bf16"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"DeviceOptions.{name} must be True or False; got {getattr(self, name)!r}")
        if not isinstance(self.graph_max_images, int) or self.graph_max_images < 1:
            raise ValueError(f"DeviceOptions.graph_max_images must be a positive int; got {self.graph_max_images!r}")

    @property
    def any(self) -> bool:
        return self.cuda_graphs or self.channels_last or self.tf32 or self.bf16

    def describe(self) -> str:
        on = [n for n in ("cuda_graphs", "channels_last", "tf32", "bf16") if getattr(self, n)]
        return ", ".join(on) if on else "none"

    @contextlib.contextmanager
    def precision(self, device: torch.device) -> Iterator[None]:
        """TF32 allowed within the block (when ``tf32``; restored after)."""
        if not self.tf32 or device.type != "cuda":
            yield
            return
        old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """bfloat16 autocast of a forward (when ``bf16``), else nothing."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)


class GraphedStep:
    """One local step (``body``: forward, loss, backward, update; returns the ``(K,)`` losses)
    captured as a CUDA graph on its static inputs ``x`` and ``y``; :meth:`__call__` copies a new
    mini-batch in and replays it."""

    def __init__(self, body: Callable[[Tensor, Tensor], Tensor], x: Tensor, y: Tensor, *,
                 warm: Callable[[Tensor, Tensor], None] | None = None) -> None:
        self.x, self.y = x.clone(), y.clone()
        #: tensors the graph writes that must stay allocated (the gradients; set by the caller)
        self.keep: list = []
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device=x.device)
        stream.wait_stream(torch.cuda.current_stream(x.device))
        if warm is not None:  # lazy initialisations (library handles, workspaces) on the capture stream, outside it
            with torch.cuda.stream(stream):
                warm(self.x, self.y)
            torch.cuda.current_stream(x.device).wait_stream(stream)
            torch.cuda.synchronize(x.device)
        with torch.cuda.graph(self.graph, stream=stream):
            self.loss = body(self.x, self.y)
        self.replays = 0

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        self.replays += 1
        return self.loss.clone()
