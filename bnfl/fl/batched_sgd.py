"""The batched engine's optimiser (:mod:`bnfl.fl.batched`): one SGD step over the stacked
``(K, *shape)`` parameters of the clients trained together, and what an algorithm's hooks see
of one client's optimiser (its ``param_groups`` and a ``state`` whose ``clear()`` restarts that
client's momentum)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["StackedSGD"]


class _RowState(dict):
    """``optimizer.state`` of one client's view: ``clear()`` restarts its momentum buffers (zero
    rows, so the next SGD step's buffer is that step's direction, as a fresh optimizer's)."""

    def __init__(self, opt: StackedSGD, j: int) -> None:
        super().__init__()
        self.opt, self.j = opt, j

    def clear(self) -> None:
        with torch.no_grad():
            for st in self.opt.state.values():
                if "momentum_buffer" in st:
                    st["momentum_buffer"][self.j].zero_()
        super().clear()


class ClientOptimizer:
    """What a hook sees of the optimizer of client ``j``: its ``param_groups`` (the view's
    parameters) and ``state`` (whose ``clear()`` restarts the client's momentum); one per client
    and round, built on first use."""

    def __init__(self, opt: StackedSGD, view: torch.nn.Module, j: int) -> None:
        self._opt, self._view = opt, view
        self.state = _RowState(opt, j)

    @property
    def param_groups(self) -> list[dict]:
        return [{**g, "params": list(self._view.parameters())} for g in self._opt.param_groups]


class StackedSGD:
    r"""``torch.optim.SGD`` (momentum :math:`\beta`, no dampening, weight decay :math:`\lambda`, no
    Nesterov) over the stacked ``(K, *shape)`` tensors, each update one ``torch._foreach`` op:

    .. math:: d = g + \lambda w,\qquad b \leftarrow \beta b + d \;(b = d \text{ at the first step}),
              \qquad w \leftarrow w - \eta\, b

    the same elementwise operations, in the same order, as ``SGD``'s single-tensor step, so each
    client's rows are updated as its own optimizer would. Parameters without a gradient are
    skipped (as ``SGD`` does). ``param_groups`` and ``state`` look like an optimizer's for the
    algorithms' hooks."""

    def __init__(self, params: list[Tensor], *, lr: float, momentum: float, weight_decay: float) -> None:
        self.params = params
        self.param_groups = [{"params": params, "lr": lr, "momentum": momentum, "weight_decay": weight_decay,
                              "dampening": 0.0, "nesterov": False}]
        self.state: dict[Tensor, dict[str, Tensor]] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, rows: int | None = None) -> None:
        """One update; ``rows``: only the first ``rows`` clients' rows (the others have finished
        their local steps: parameters and momentum buffers stay as they are)."""
        g = self.param_groups[0]
        lr, beta, wd = g["lr"], g["momentum"], g["weight_decay"]
        full = [p for p in self.params if p.grad is not None]
        if not full:
            return

        def cut(t: Tensor) -> Tensor:
            return t if rows is None else t[:rows]

        ps = [cut(p) for p in full]
        d = [cut(p.grad) for p in full]  # type: ignore[arg-type]
        if wd != 0:
            d = torch._foreach_add(d, ps, alpha=wd)
        if beta != 0:
            have = [p for p in full if "momentum_buffer" in self.state.get(p, {})]
            if len(have) == len(full):
                bufs = [cut(self.state[p]["momentum_buffer"]) for p in full]
                torch._foreach_mul_(bufs, beta)
                torch._foreach_add_(bufs, d)
            else:  # first step: the buffer is the direction itself
                bufs = []
                for p, dp in zip(full, d, strict=True):
                    st = self.state.setdefault(p, {})
                    if "momentum_buffer" in st:
                        buf = cut(st["momentum_buffer"])
                        buf.mul_(beta).add_(dp)
                    elif rows is None:
                        buf = st["momentum_buffer"] = dp.clone()
                    else:  # the other clients' rows start at zero (beta * 0 + d = d at their first step)
                        st["momentum_buffer"] = torch.zeros_like(p)
                        buf = st["momentum_buffer"][:rows]
                        buf.copy_(dp)
                    bufs.append(buf)
            d = bufs
        torch._foreach_add_(ps, d, alpha=-lr)
