r"""One local step of the batched engine (:mod:`bnfl.fl.batched`) on the stacked clients: the
forward, each client's loss and the backward, as functions of the stacked net and its batches.

:func:`forward_backward` is the eager step (every step but a coupled first one and a replayed CUDA
graph): the one seam where a faster step plugs in. :func:`coupled_step` is FedTAN's first local
step (Algorithms 1-3): the BN layers pool the clients' moments through the channel's all-reduce
(:func:`~bnfl.nn.batched.coupled_batch_norm`, eqs. 39-40), the backward of :math:`\sum_i p_i F_i`
is eq. 41, and eq. 6 updates all clients' stacked running statistics at once
(:func:`ema_stacked_stats`). :func:`client_losses` is each client's batch-mean loss over its real
rows; :func:`padded` the clients' batch ids padded to one size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.fedtan import CoupledStep
from bnfl.functional import ema
from bnfl.nn.batched import BatchedNet
from bnfl.stats import Moments

__all__ = ["client_losses", "coupled_step", "ema_stacked_stats", "forward_backward", "in_round_order", "padded",
           "simulation_spans"]


def forward_backward(net: BatchedNet, x: Tensor, y: Tensor, a: int, n: int, sizes: list[int], *,
                     loss_fn: Callable[..., Tensor], autocast: Callable[[], Any], per_sample: bool = False) -> Tensor:
    """One eager local step's forward and backward for the first ``a`` stacked clients: their
    batches ``x``, ``y`` ``(a*n, ...)``, the forward under ``autocast()`` (the device options'
    mixed precision, or nothing), each client's loss (:func:`client_losses`) and the backward of
    their sum, which leaves each client's gradients in its row of ``.grad``. Returns the ``(a,)``
    losses (not detached)."""
    with net.first_clients(a):
        with autocast():
            out = net(x)
        loss = client_losses(out, y, a, n, net.mask, sizes[:a], loss_fn, per_sample=per_sample)  # (a,)
        del out  # (nothing may keep this step's autograd graph alive: a graph capture follows)
    loss.sum().backward()
    return loss


def client_losses(out: Tensor, y: Tensor, k: int, n: int, mask: Tensor | None, sizes: list[int],
                  loss_fn: Callable[..., Tensor], *, per_sample: bool = False) -> Tensor:
    """(K,) each client's batch-mean loss over its real rows (``loss_fn`` per client unless
    ``per_sample``: ``loss_fn`` is the default cross-entropy, then one per-sample call on class labels)."""
    if per_sample and y.dim() == 1 and not y.is_floating_point():
        per = F.cross_entropy(out, y, reduction="none").reshape(k, n)  # (K*n,) -> (K, n)
        if mask is None:
            return per.mean(1)
        return (per * mask.to(per.dtype)).sum(1) / torch.tensor(sizes, dtype=per.dtype, device=per.device)
    outs, ys = out.reshape(k, n, *out.shape[1:]), y.reshape(k, n, *y.shape[1:])  # (K*n, ...) -> (K, n, ...)
    return torch.stack([loss_fn(outs[j, :sizes[j]], ys[j, :sizes[j]]).reshape(()) for j in range(k)])


@torch.no_grad()
def ema_stacked_stats(net: BatchedNet, step: CoupledStep, union_count: Mapping[str, int] | None,
                      rows: slice | None = None) -> None:
    r"""FedTAN eq. 6 for every client at once: each client's running statistics
    :math:`\bar S_k \leftarrow (1-\rho)\bar S_k + \rho(\bar\mu, \tfrac{m}{m-1}\bar\sigma^2)` with the
    global statistics of the coupled step, rows ``(K, C)`` against ``(C,)``:
    :func:`bnfl.fl.engine.ema_global_stats` applied to each client's model (same operations).
    ``rows``: only these clients' rows (one simulation's, of several stacked)."""
    for name, m in net.net.named_modules():
        if name not in step.layer_stats or not isinstance(m, _BatchNorm) or not m.track_running_stats:
            continue
        mean, var = step.layer_stats[name]
        count = union_count[name] if union_count is not None else sum(mom.count for mom in step.local_stats[name])
        rm, rv = net.buffers[f"{name}.running_mean"], net.buffers[f"{name}.running_var"]  # (K, C)
        nbt = net.buffers[f"{name}.num_batches_tracked"]
        if rows is not None:
            rm, rv, nbt = rm[rows], rv[rows], nbt[rows]
        nbt.add_(1)
        unbiased = Moments(count=count, mean=mean, var=var).unbiased_var()  # raises for count < 2
        rm.copy_(ema(rm, mean.to(rm.dtype), m.momentum))  # batching_obstacle: momentum is a number
        rv.copy_(ema(rv, unbiased.to(rv.dtype), m.momentum))


def coupled_step(net: BatchedNet, x: Tensor, y: Tensor, rows: Sequence[Any], k: int, n: int, sizes: list[int],
                 deferred: Mapping[Any, Any], index: list[int], loss_fn: Callable[..., Tensor],
                 per_sample: bool = False) -> tuple[Tensor, dict[Any, CoupledStep]]:
    r"""FedTAN's first local step (Algorithms 1-3) on the stacked clients: the forward with
    coupled BN (eqs. 39-40 through the channel's all-reduce), the backward of
    :math:`T=\sum_i p_i F_i` (eq. 41's stat-gradient all-reduce is the autograd of the
    all-reduce; counted when the backward passes it), per-client gradients
    :math:`g_i = p_i^{-1}\partial T/\partial w_i` in ``.grad``, and FedTAN eq. 6 on the
    running statistics. What :func:`bnfl.fl.coupled.coupled_first_step` and the sequential
    step 1 compute, with the same channel accounting; returns the losses (K,) and each
    simulation's step; ``x``, ``y``: the rows' mini-batches ``(K*n, ...)``; ``rows``: the
    batched engine's rows (``.sim``: each one's host). Several simulations stacked (``deferred``: each one's step, their rows
    contiguous): each all-reduce pools one simulation's rows through its own channel, and
    :math:`\sum_s T_s` is differentiated at once (simulations share no parameter)."""
    spans = simulation_spans(rows)  # each simulation's rows: a slice (they are contiguous)
    sims = [rows[sl.start].sim for sl in spans]
    p = torch.tensor([deferred[row.sim].weights[i] for row, i in zip(rows, index, strict=True)],
                     dtype=x.dtype, device=x.device)  # (K,)

    def stat_grads(s: Any, layer: str, size: int, ks: int) -> Callable[[Tensor], None]:
        def count(_g: Tensor) -> None:  # eq. 41: [dT/dmu | dT/dsigma^2] all-reduced in the backward
            s.channel.count("allreduce", f"{layer}.stat-grads", up=size * ks, down=size, clients=ks,
                            closes_round=True)
        return count

    def pooled(s: Any, sl: slice) -> Callable[[str, str, Tensor], Tensor]:
        """Simulation ``s``'s all-reduce of its rows ``sl`` through its own channel."""
        def reduce(layer: str, kind: str, parts: Tensor) -> Tensor:
            out = s.channel.allreduce(parts, p[sl], tag=f"{layer}.{kind}")  # (C,)
            if kind == "mean" and out.requires_grad:
                out.register_hook(stat_grads(s, layer, 2 * parts.shape[1] * parts.element_size(), sl.stop - sl.start))
            return out
        return reduce

    net.couple, net.coupled_stats = [(sl, pooled(s, sl)) for s, sl in zip(sims, spans, strict=True)], {}
    try:
        out = net(x)
    finally:
        net.couple = None
    loss = client_losses(out, y, k, n, net.mask, sizes, loss_fn, per_sample=per_sample)  # (K,) F_i
    (loss * p).sum().backward()
    grads = {}
    with torch.no_grad():
        for name, q in net.params.items():
            if q.grad is not None:
                q.grad.div_(p.reshape(-1, *([1] * (q.grad.dim() - 1))))  # p_i g_i -> g_i
                grads[name] = q.grad.unbind(0)
    stats = net.coupled_stats
    steps = {}
    for s, sl in zip(sims, spans, strict=True):
        js = range(sl.start, sl.stop)
        first = sl.start  # a row of this simulation: its global statistics
        steps[s] = step = CoupledStep(
            grads=[{name: g[j] for name, g in grads.items()} for j in js], losses=loss.detach()[sl],
            layer_stats={layer: (gm.detach(), gv.detach()) if len(sims) == 1 else
                         (gm[first], gv[first]) for layer, (_, _, _, gm, gv) in stats.items()},
            local_stats={layer: [Moments(count=cnt[j], mean=mk[j], var=vk[j]) for j in js]
                         for layer, (mk, vk, cnt, _, _) in stats.items()})
        ema_stacked_stats(net, step, s.union_count, rows=None if len(sims) == 1 else sl)
    net.coupled_stats = {}  # (its global moments hold the autograd graph)
    return loss, steps


def simulation_spans(rows: Sequence[Any]) -> list[slice]:
    """Each simulation's rows (``row.sim``) as one slice, in order; they must be contiguous."""
    spans: list[slice] = []
    for j, row in enumerate(rows):
        if spans and rows[spans[-1].start].sim is row.sim:
            spans[-1] = slice(spans[-1].start, j + 1)
        elif any(rows[sl.start].sim is row.sim for sl in spans):
            raise ValueError("the rows of a simulation in a stacked computation must be contiguous")
        else:
            spans.append(slice(j, j + 1))
    return spans


def in_round_order(rows: Sequence[Any], uploads: Mapping[Any, dict[str, Tensor]],
                   losses: Mapping[Any, float]) -> tuple[list[dict[str, Tensor]], list[float]]:
    """One simulation's uploads and losses in the order of its participants."""
    ordered = sorted(rows, key=lambda row: row.index)
    return [uploads[row] for row in ordered], [losses[row] for row in ordered]


def padded(ids: Sequence[Tensor], n: int) -> Tensor:
    """The clients' batch ids concatenated, each padded to ``n`` with copies of its first id:
    ``(len(ids)*n,)``, by one gather instead of one concatenation per short batch."""
    flat = torch.cat(list(ids))  # (sum of sizes,)
    if flat.shape[0] == n * len(ids):
        return flat
    sizes = torch.tensor([i.shape[0] for i in ids], device=flat.device)  # (K,)
    starts = torch.cumsum(sizes, 0) - sizes  # (K,)
    pos = torch.arange(n, device=flat.device)[None, :]  # (1, n)
    at = starts[:, None] + torch.where(pos < sizes[:, None], pos, 0)  # (K, n): padding -> the first id
    return flat[at.reshape(-1)]
