"""The batched engine's optimiser (:mod:`bnfl.fl.batched`): one SGD step over the stacked
``(K, *shape)`` parameters of the clients trained together, and what an algorithm's hooks see
of one client's optimiser (its ``param_groups`` and a ``state`` whose ``clear()`` restarts that
client's momentum)."""

from __future__ import annotations

from collections.abc import Sequence

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
        self._opt, self._view, self._j = opt, view, j
        self.state = _RowState(opt, j)

    @property
    def param_groups(self) -> list[dict]:
        return [{**g, "params": list(self._view.parameters()), "lr": self._opt.lr_of(self._j)}
                for g in self._opt.param_groups]


class StackedSGD:
    r"""``torch.optim.SGD`` (momentum :math:`\beta`, no dampening, weight decay :math:`\lambda`, no
    Nesterov) over the stacked ``(K, *shape)`` tensors, each update one ``torch._foreach`` op:

    .. math:: d = g + \lambda w,\qquad b \leftarrow \beta b + d \;(b = d \text{ at the first step}),
              \qquad w \leftarrow w - \eta\, b

    the same elementwise operations, in the same order, as ``SGD``'s single-tensor step, so each
    client's rows are updated as its own optimizer would. Parameters without a gradient are
    skipped (as ``SGD`` does). ``param_groups`` and ``state`` look like an optimizer's for the
    algorithms' hooks.

    ``lr`` may be one rate per row (runs of a learning-rate grid stacked together,
    :func:`bnfl.fl.batched_together.run_together`): the last update is then
    :math:`w_k \leftarrow w_k + b_k\,(-\eta_k)`, one ``_foreach_addcmul_`` against a ``(K, 1, ...)``
    column of rates (equal to the one-rate update up to rounding: float64 1e-12 in
    ``tests/test_fl_stacking.py``). Rows that all share one rate take the one-rate path, so a
    stack of one rate is bitwise what it was."""

    def __init__(self, params: list[Tensor], *, lr: float | Sequence[float], momentum: float,
                 weight_decay: float) -> None:
        self.params = params
        rates = [float(v) for v in lr] if isinstance(lr, Sequence) else [float(lr)]
        #: one rate per row when the rows' rates differ, else None (the one-rate update)
        self.row_lr: list[float] | None = rates if len(set(rates)) > 1 else None
        self.param_groups = [{"params": params, "lr": rates[0], "momentum": momentum, "weight_decay": weight_decay,
                              "dampening": 0.0, "nesterov": False}]
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        self._columns: dict[tuple, Tensor] = {}

    def lr_of(self, j: int) -> float:
        """Row ``j``'s learning rate."""
        return self.param_groups[0]["lr"] if self.row_lr is None else self.row_lr[j]

    def _column(self, t: Tensor, rows: int) -> Tensor:
        """``-lr`` per row as a ``(rows, 1, ..., 1)`` column broadcast against ``t`` (cached)."""
        key = (t.dim(), t.dtype, t.device, rows)
        col = self._columns.get(key)
        if col is None:
            assert self.row_lr is not None
            col = self._columns[key] = torch.tensor([-v for v in self.row_lr[:rows]], dtype=t.dtype,
                                                    device=t.device).reshape(rows, *([1] * (t.dim() - 1)))
        return col

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
        if self.row_lr is None:
            torch._foreach_add_(ps, d, alpha=-lr)
        else:  # w_k + d_k * (-lr_k), each row its own rate
            torch._foreach_addcmul_(ps, d, [self._column(p, p.shape[0]) for p in ps])
