r"""K copies of one architecture trained as one computation: stacked parameters, batched layers.

:class:`BatchedNet` holds every parameter and buffer of ``K`` clients' models stacked on a
leading client dimension, ``(K, *shape)``, and runs the architecture's own ``forward`` on the
concatenated batch ``x`` of shape ``(K*B, ...)`` (client ``k`` owns rows ``k*B .. (k+1)*B-1``)
with its parameterised layers replaced by batched ones:

* ``nn.Linear``: :math:`y_k = x_k W_k^\top + b_k`, one ``baddbmm`` over the clients;
* ``nn.Conv1d/2d/3d``: one grouped convolution, client ``k``'s input channels convolved with
  client ``k``'s filters (groups :math:`K g`);
* ``nn.BatchNorm1d/2d/3d``: the clients' channels side by side, ``(B, K C, ...)``, through one
  ``F.batch_norm`` call, so each client's channel is normalised with its own batch statistics
  and its running statistics are updated exactly as ``nn.BatchNorm`` does (momentum, unbiased
  variance :math:`\frac{m}{m-1}\sigma^2` in ``running_var``, ``num_batches_tracked + 1``);
  FixBN's frozen layers (:mod:`bnfl.nn.frozen`) normalise with the running statistics instead;
* every layer of the layer registry's :data:`~bnfl.nn.batched_layers.BATCHED_LAYERS` with its form:
  ``nn.GroupNorm`` and bnfl's GN/LN/IN (:mod:`bnfl.nn.norms`): per-sample statistics, each
  client's :math:`\gamma_k, \beta_k` (:func:`bnfl.nn.batched_norms.group_norm`); HBN's hybrid BN
  (:class:`~bnfl.nn.HybridBatchNorm2d`, eqs. 9-10) and FBN: each client's :math:`\alpha_k`,
  global statistics, affine parameters (and FBN's cumulative-average buffers), batch moments
  over the client's real rows (:mod:`bnfl.nn.batched_norms`); a user's layer registered with
  :func:`~bnfl.nn.batched_layers.register_batched` (its own form, or its ``forward`` once per client);
* every module without parameters or buffers (activations, pooling, reshapes, the model's own
  glue code) is a per-sample function and runs unchanged on the concatenated batch.

Clients whose mini-batches differ in size are padded to the largest (``mask``): the padding
rows repeat the client's first sample, BN layers then compute each client's statistics over its
real rows only (:func:`masked_batch_norm`) and the losses average over real rows only.

Models with other layers (weight-standardised convolutions, dropout, a user's layer not in the
registry, ...) are refused by :func:`batching_obstacle` with the layer's name; the engine then runs
the clients one by one.
Per-client views (:meth:`BatchedNet.client_view`) are ordinary ``nn.Module`` copies whose
parameters, gradients and buffers are views of row ``k``: algorithm hooks written for one
client's model act on the stacked tensors through them.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.nn.batched_layers import BATCHED_LAYERS, PER_CLIENT, BatchedLayer
from bnfl.nn.frozen import (
    FrozenStatsBatchNorm1d,
    FrozenStatsBatchNorm2d,
    FrozenStatsBatchNorm3d,
    is_frozen,
)

__all__ = ["BatchedNet", "batching_obstacle", "coupled_batch_norm", "masked_batch_norm"]

_LINEAR = (nn.Linear,)
_CONV = {nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d}
_BN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d,
       FrozenStatsBatchNorm1d, FrozenStatsBatchNorm2d, FrozenStatsBatchNorm3d)
#: channels per client a BN layer's stacked call keeps bitwise apart-equal (:attr:`BatchedNet.apart`)
_ALIGNED = 32
_RANDOM = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def batching_obstacle(model: nn.Module) -> str | None:
    """Why ``model`` cannot run as a :class:`BatchedNet`, or ``None`` if it can.

    Batched: ``nn.Linear``, zero-padded ``nn.Conv1d/2d/3d``, ``nn.BatchNorm1d/2d/3d`` (and their
    FixBN-frozen forms) with a fixed ``momentum``, the layers of the layer registry
    (:data:`bnfl.nn.batched_layers.BATCHED_LAYERS`: ``nn.GroupNorm``, bnfl's GN, LN, IN, HBN's hybrid BN,
    FBN, and what :func:`~bnfl.nn.batched_layers.register_batched` added), and modules that own no parameter or buffer
    (assumed per-sample functions; dropout is refused, its random masks would be drawn in a
    different order than one client at a time).
    """
    for name, m in model.named_modules():
        label = f"layer {name!r} ({type(m).__name__})" if name else f"the model ({type(m).__name__})"
        own = list(m.parameters(recurse=False)) + [b for b in m.buffers(recurse=False)]
        if type(m) in _BN:
            if m.momentum is None:
                return f"{label} has momentum=None (cumulative average): its update depends on each client's num_batches_tracked"
            continue
        if type(m) in _LINEAR or type(m) in BATCHED_LAYERS:
            continue
        if type(m) in _CONV:
            if m.padding_mode != "zeros" or isinstance(m.padding, str):
                return f"{label} pads with {m.padding_mode!r}/{m.padding!r}; only numeric zero padding is batched"
            continue
        if isinstance(m, _RANDOM) and m.p > 0:
            return f"{label} draws random masks; batched clients would draw them in another order"
        if isinstance(m, _BatchNorm) or own:
            what = "is a BatchNorm variant with its own forward" if isinstance(m, _BatchNorm) else \
                "owns parameters or buffers"
            return (f"{label} {what} and is not in the layer registry's BATCHED_LAYERS: decorate its class with "
                    "@bnfl.nn.register_batched() (docs/own-fix.md, section 9)")
    return None


def masked_batch_norm(x: Tensor, mask: Tensor, counts: Tensor, gamma: Tensor, beta: Tensor, eps: float,
                      running: tuple[Tensor, Tensor] | None, momentum: float) -> Tensor:
    r"""Training-mode BN of ``K`` clients padded to ``n`` rows each, statistics over real rows only.

    .. math:: \mu_k = \tfrac1{m_k}\sum_{j\in k} x_j,\quad \sigma_k^2 = \tfrac1{m_k}\sum_{j\in k}(x_j-\mu_k)^2,
              \quad y_j = \gamma_k\frac{x_j-\mu_k}{\sqrt{\sigma_k^2+\epsilon}} + \beta_k

    with :math:`m_k` = real rows times positions; the running statistics (if given) get
    :math:`(1-\rho) S + \rho(\mu_k, \tfrac{m_k}{m_k-1}\sigma_k^2)` as ``nn.BatchNorm``.

    Parameters
    ----------
    x : Tensor of shape (K*n, C, ...)
    mask : Tensor of shape (K, n)
        1 for real rows, 0 for padding.
    counts : Tensor of shape (K,)
        Real rows per client.
    gamma, beta : Tensor of shape (K, C)
    running : (running_mean, running_var) of shape (K, C), updated in place, or None
    """
    k, n = mask.shape
    c = x.shape[1]
    xr = x.reshape(k, n, c, -1)  # (K*n, C, *) -> (K, n, C, r)
    r = xr.shape[-1]
    w = mask.to(x.dtype)[:, :, None, None]  # (K, n, 1, 1)
    m = (counts.to(x.dtype) * r)[:, None]  # (K, 1): elements per channel
    mean = (xr * w).sum(dim=(1, 3)) / m  # (K, C)
    d = xr - mean[:, None, :, None]  # (K, n, C, r)
    var = (d.square() * w).sum(dim=(1, 3)) / m  # (K, C), biased
    if running is not None:
        with torch.no_grad():
            rm, rv = running
            rm.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
            rv.mul_(1 - momentum).add_(var.detach() * (m / (m - 1)), alpha=momentum)
    y = d * torch.rsqrt(var + eps)[:, None, :, None]
    y = y * gamma[:, None, :, None] + beta[:, None, :, None]
    return y.reshape(x.shape)


def _rows(stat: Tensor) -> Tensor:
    """A global statistic, ``(C,)`` for every row or ``(K, C)`` one per row, against ``(K, n, C, r)``."""
    return stat[None, None, :, None] if stat.dim() == 1 else stat[:, None, :, None]


def coupled_batch_norm(x: Tensor, k: int, counts: Tensor | None, gamma: Tensor, beta: Tensor, eps: float,
                       reduce) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    r"""FedTAN's coupled BN forward (Algorithm 2, eqs. 39-40) of ``K`` clients' stacked rows.

    .. math:: \bar\mu = \sum_k p_k \mu_k,\qquad
              \bar\sigma^2 = \sum_k p_k \tfrac1{m_k}\sum_{j\in k}(x_j-\bar\mu)^2,\qquad
              y_j = \gamma_k\frac{x_j-\bar\mu}{\sqrt{\bar\sigma^2+\epsilon}} + \beta_k

    with client ``k``'s own mean :math:`\mu_k` over its :math:`m_k` real elements per channel.
    ``reduce(kind, parts)`` is the weighted all-reduce :math:`\sum_k p_k\,\text{parts}_k`
    (``kind`` ``"mean"`` or ``"var"``, ``parts`` of shape (K, C)), of shape (C,), or (K, C) when
    the rows are several simulations' clients (each row gets its own group's sum, pooled apart);
    when it is differentiable (the
    channel's is), back-propagating :math:`\sum_k p_k F_k` through this function is FedTAN's
    Algorithm 3 (eq. 41: the stat-gradients summed over clients), as in
    :func:`bnfl.fedtan.coupled_step`.

    Parameters
    ----------
    x : Tensor of shape (K*n, C, ...)
    counts : Tensor of shape (K,) or None
        Real rows per client (padded blocks); None: all ``n``.
    gamma, beta : Tensor of shape (K, C)

    Returns
    -------
    y : Tensor of shape (K*n, C, ...)
    mean_k, var_k : Tensor of shape (K, C)
        Each client's own batch moments (biased variance around its own mean; detached).
    global_mean, global_var : Tensor of shape (C,), or (K, C) as ``reduce`` returns them
    """
    n, c = x.shape[0] // k, x.shape[1]
    xr = x.reshape(k, n, c, -1)  # (K*n, C, *) -> (K, n, C, r)
    r = xr.shape[-1]
    if counts is None:
        w = None
        m = x.new_full((k, 1), float(n * r))
    else:
        w = (torch.arange(n, device=x.device)[None, :] < counts[:, None]).to(x.dtype)[:, :, None, None]  # (K, n, 1, 1)
        m = (counts.to(x.dtype) * r)[:, None]  # (K, 1)
    mean_k = (xr if w is None else xr * w).sum(dim=(1, 3)) / m  # (K, C)
    gmean = reduce("mean", mean_k)  # (C,) eq. 39; (K, C) when each row has its group's
    d = xr - _rows(gmean)  # (K, n, C, r)
    dsq = d.square() if w is None else d.square() * w
    gvar = reduce("var", dsq.sum(dim=(1, 3)) / m)  # (C,) eq. 40: around the global mean
    y = d * _rows(torch.rsqrt(gvar + eps))
    y = y * gamma[:, None, :, None] + beta[:, None, :, None]
    with torch.no_grad():
        own = xr - mean_k.detach()[:, None, :, None]
        var_k = (own.square() if w is None else own.square() * w).sum(dim=(1, 3)) / m  # (K, C)
    return y.reshape(x.shape), mean_k.detach(), var_k, gmean, gvar


class BatchedNet:
    """``K`` clients' copies of ``model``, stacked; :meth:`__call__` runs all of them at once.

    Parameters
    ----------
    model : nn.Module
        The architecture (copied, never modified); :func:`batching_obstacle` must be ``None``.
    states : sequence of K state dicts
        Each client's full ``state_dict`` (stacked into :attr:`params` and :attr:`buffers`).

    Attributes
    ----------
    params : dict of str to Tensor
        Leaf tensors of shape ``(K, *shape)`` (``requires_grad`` as in ``model``); an optimizer steps them directly.
    buffers : dict of str to Tensor
        Buffers of shape ``(K, *shape)``.
    frozen : bool
        BN layers normalise with their running statistics and leave them unchanged (FixBN).
    mask : Tensor of shape (K, n) or None
        Real (1) and padding (0) rows when the clients' batches were padded to ``n``.
    """

    def __init__(self, model: nn.Module, states: Sequence[Mapping[str, Tensor]]) -> None:
        why = batching_obstacle(model)
        if why is not None:
            raise ValueError(f"cannot batch this model: {why}")
        self.k = len(states)
        self.net = copy.deepcopy(model).train()
        names = {n for n, _ in self.net.named_parameters()}
        self._grads = {n: p.requires_grad for n, p in self.net.named_parameters()}
        self._buffer_names = [n for n, _ in self.net.named_buffers() if n not in names]
        self.params: dict[str, Tensor] = {}
        self.buffers: dict[str, Tensor] = {}
        self.load(states)
        self.frozen = False
        #: FedTAN's coupled first step: the groups of rows pooled together, each ``(rows, reduce)``:
        #: a slice of the stacked clients (one simulation's) and ``reduce(layer, kind, parts)``, its
        #: weighted all-reduce of every BN layer's statistics (:func:`coupled_batch_norm`, each
        #: group apart; running statistics untouched), and per layer the
        #: ``(mean_k, var_k, count_k, global_mean, global_var)`` it computed; None: per-client BN
        self.couple: list[tuple[slice, Callable[[str, str, Tensor], Tensor]]] | None = None
        self.coupled_stats: dict[str, tuple] = {}
        self.mask: Tensor | None = None
        self._counts: Tensor | None = None
        #: row slices (one simulation's each) whose BN layers of a width not a multiple of ``_ALIGNED``
        #: run apart (:meth:`_each_group`), on the tensors each sees alone: BN's CPU kernels split a
        #: longer channel axis elsewhere (30 channels a client differ stacked, 32 do not); None: one call
        self.apart: list[slice] | None = None
        #: the stacked convolutions' inputs in channels-last layout (:mod:`bnfl.fl.device_options`)
        self.channels_last = False
        self._views: list[nn.Module] = []
        self._slots: list[list[tuple[dict, str, str, bool]]] = []
        self._view_params: dict[int, list[tuple[str, nn.Parameter]]] = {}  # per view: (stacked name, parameter)
        for name, m in self.net.named_modules():
            pre = f"{name}." if name else ""
            if type(m) in _LINEAR:
                m.forward = self._linear(pre)  # type: ignore[method-assign]
            elif type(m) in _CONV:
                m.forward = self._conv(pre, m)  # type: ignore[method-assign]
            elif type(m) in _BN:
                m.forward = self._bn(pre, m)  # type: ignore[method-assign]
            elif type(m) in BATCHED_LAYERS:
                m.forward = self._registered(pre, m, BATCHED_LAYERS[type(m)])  # type: ignore[method-assign]

    def load(self, states: Sequence[Mapping[str, Tensor]], *, in_place: bool = False) -> None:
        """Stack ``K`` clients' state dicts into fresh :attr:`params` (leaves) and :attr:`buffers`,
        so one net serves round after round (views from :meth:`client_view` must be re-taken).
        ``in_place``: copy them into the tensors the net already holds instead (the same tensors
        round after round, as a captured CUDA graph needs, :mod:`bnfl.fl.device_options`)."""
        if len(states) != self.k:
            raise ValueError(f"this BatchedNet holds {self.k} clients, got {len(states)} states")
        if in_place and self.params:
            with torch.no_grad():
                for n, p in self.params.items():
                    p.copy_(torch.stack([s[n] for s in states]))
                for n, b in self.buffers.items():
                    b.copy_(torch.stack([s[n] for s in states]))
            return
        with torch.no_grad():
            self.params = {n: torch.stack([s[n] for s in states]).requires_grad_(g)  # (K, *shape)
                           for n, g in self._grads.items()}
            self.buffers = {n: torch.stack([s[n] for s in states]) for n in self._buffer_names}

    def __call__(self, x: Tensor) -> Tensor:
        """The K clients' outputs on their rows of ``x`` (shape (K*n, ...) -> (K*n, ...))."""
        return self.net(x)

    def set_mask(self, sizes: Sequence[int], n: int) -> None:
        """Each client has ``sizes[k]`` real rows of ``n`` (``None`` mask when all are ``n``)."""
        if all(s == n for s in sizes):
            self.mask = self._counts = None
            return
        dev = next(iter(self.params.values())).device
        counts = torch.tensor(list(sizes), device=dev)
        self._counts = counts
        self.mask = torch.arange(n, device=dev)[None, :] < counts[:, None]  # (K, n)

    @contextlib.contextmanager
    def first_clients(self, a: int) -> Iterator[None]:
        """Within the block the net is its first ``a`` clients: a forward takes ``a*n`` rows and
        uses rows ``:a`` of the stacked parameters and buffers (views: running statistics and
        counters of those clients are updated in place, the others' are untouched; the backward
        leaves zero gradient rows for the others). Clients that finished their local steps while
        others go on (uneven step counts) sit at the end."""
        if not 0 < a <= self.k:
            raise ValueError(f"first_clients needs 1 <= a <= {self.k}, got {a}")
        if a == self.k:
            yield
            return
        saved = self.k, self.params, self.buffers, self.mask, self._counts
        self.k = a
        self.params = {n: p[:a] for n, p in saved[1].items()}
        self.buffers = {n: b[:a] for n, b in saved[2].items()}
        self.mask = None if saved[3] is None else saved[3][:a]
        self._counts = None if saved[4] is None else saved[4][:a]
        try:
            yield
        finally:
            self.k, self.params, self.buffers, self.mask, self._counts = saved

    def state(self, k: int) -> dict[str, Tensor]:
        """Client ``k``'s ``state_dict`` entries as (detached) views of row ``k``."""
        out = {n: p.detach()[k] for n, p in self.params.items()}
        out.update({n: b[k] for n, b in self.buffers.items()})
        return out

    def client_view(self, k: int) -> nn.Module:
        """An ordinary copy of the model whose parameters, their ``.grad`` (see :meth:`sync_grads`)
        and buffers are views of row ``k``: in-place changes through it change the stacked tensors."""
        while len(self._views) <= k:
            view = copy.deepcopy(self.net)
            slots = []  # (the module's _parameters or _buffers, attribute, stacked name, is a parameter)
            for name, m in view.named_modules():
                m.__dict__.pop("forward", None)  # the module's own forward (one client)
                pre = f"{name}." if name else ""
                slots += [(m._parameters, n, pre + n, True) for n, v in m._parameters.items() if v is not None]
                slots += [(m._buffers, n, pre + n, False) for n, v in m._buffers.items() if v is not None]
            self._views.append(view)
            self._slots.append(slots)
        named = []
        for where, attr, key, is_param in self._slots[k]:
            if is_param:
                where[attr] = nn.Parameter(self.params[key].detach()[k], requires_grad=False)
                named.append((key, where[attr]))
            else:
                where[attr] = self.buffers[key][k]
        self._view_params[k] = named  # what view.named_parameters() gives (a fresh Parameter per slot)
        return self._views[k]

    def sync_grads(self, k: int) -> None:
        """Point client ``k``'s view parameters' ``.grad`` at row ``k`` of the stacked gradients."""
        for n, p in self._view_params[k]:
            g = self.params[n].grad
            p.grad = None if g is None else g[k]

    def collect_grads(self, k: int) -> None:
        """Write back a ``.grad`` that a hook rebound on client ``k``'s view (``p.grad = ...``
        instead of changing it in place) into row ``k`` of the stacked gradients."""
        for n, p in self._view_params[k]:
            g = self.params[n].grad
            if p.grad is None or (g is not None and p.grad is not None and p.grad._base is g
                                  and p.grad.data_ptr() == g[k].data_ptr()):
                continue
            with torch.no_grad():
                if g is None:
                    self.params[n].grad = g = torch.zeros_like(self.params[n])
                g[k].copy_(p.grad)
            p.grad = g[k]

    # -- batched layers -------------------------------------------------------------------------
    def _linear(self, pre: str):
        def forward(x: Tensor) -> Tensor:
            w = self.params[pre + "weight"]  # (K, out, in)
            b = self.params.get(pre + "bias")  # (K, out) or None
            xk = x.reshape(self.k, -1, x.shape[-1])  # (K*n, *, in) -> (K, n*prod(*), in)
            y = torch.bmm(xk, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), xk, w.transpose(1, 2))
            return y.reshape(*x.shape[:-1], w.shape[1])  # (K, n*prod(*), out) -> (K*n, *, out)
        return forward

    def _conv(self, pre: str, m: nn.Module):
        conv = _CONV[type(m)]

        def forward(x: Tensor) -> Tensor:
            w = self.params[pre + "weight"]  # (K, C_out, C_in/g, *kernel)
            b = self.params.get(pre + "bias")  # (K, C_out) or None
            n = x.shape[0] // self.k
            xg = x.reshape(self.k, n, *x.shape[1:]).transpose(0, 1).reshape(n, -1, *x.shape[2:])  # (n, K*C_in, *sp)
            if self.channels_last and xg.dim() == 4:
                xg = xg.contiguous(memory_format=torch.channels_last)
            y = conv(xg, w.reshape(-1, *w.shape[2:]), None if b is None else b.reshape(-1),
                     m.stride, m.padding, m.dilation, m.groups * self.k)  # (n, K*C_out, *sp')
            return y.reshape(n, self.k, -1, *y.shape[2:]).transpose(0, 1).reshape(self.k * n, -1, *y.shape[2:])
        return forward

    def _bn(self, pre: str, m: _BatchNorm):
        def forward(x: Tensor) -> Tensor:
            k, c = self.k, x.shape[1]
            n = x.shape[0] // k
            gamma = self.params[pre + "weight"] if m.affine else x.new_ones(k, c)  # (K, C)
            beta = self.params[pre + "bias"] if m.affine else x.new_zeros(k, c)  # (K, C)
            if self.couple is not None:
                layer = pre[:-1]
                y, mk, vk, gm, gv = self._coupled(layer, x, gamma, beta, m.eps)
                counts = [n * (x[0].numel() // c)] * k if self._counts is None else \
                    [int(v) * (x[0].numel() // c) for v in self._counts.tolist()]
                self.coupled_stats[layer] = (mk, vk, counts, gm, gv)
                return y
            if c % _ALIGNED and self._apart() is not None:  # the channel axis split elsewhere: apart
                return self._each_group(x, forward)
            rm, rv = self.buffers.get(pre + "running_mean"), self.buffers.get(pre + "running_var")
            frozen = self.frozen or is_frozen(m)
            if frozen and rm is None:
                raise ValueError(f"BN layer {pre[:-1]!r} has no running statistics to freeze (track_running_stats=False)")
            # nn.BatchNorm: batch statistics in training mode or without running statistics;
            # running statistics (and the counter) updated in training mode only
            training = not frozen and (m.training or rm is None)
            if training and m.training and rm is not None:
                self.buffers[pre + "num_batches_tracked"].add_(1)
            if training and self.mask is not None:
                assert self._counts is not None
                return masked_batch_norm(x, self.mask, self._counts, gamma, beta, m.eps,
                                         None if rm is None else (rm, rv), m.momentum)
            xs = x.reshape(k, n, c, -1).transpose(0, 1).reshape(n, k * c, -1)  # (K*n, C, *) -> (n, K*C, r)
            y = F.batch_norm(xs, None if rm is None else rm.view(-1), None if rv is None else rv.view(-1),
                             gamma.reshape(-1), beta.reshape(-1), training, 0.0 if frozen else m.momentum, m.eps)
            return y.reshape(n, k, c, -1).transpose(0, 1).reshape(x.shape)  # (n, K*C, r) -> (K*n, C, *)
        return forward

    def _apart(self) -> list[slice] | None:
        """:attr:`apart` cut to the clients of this forward (:meth:`first_clients`), or None."""
        if self.apart is None or len(self.apart) < 2:
            return None
        groups = [slice(sl.start, min(sl.stop, self.k)) for sl in self.apart if sl.start < self.k]
        return groups if len(groups) > 1 else None

    def _each_group(self, x: Tensor, forward) -> Tensor:
        """``forward`` of each group of :attr:`apart` on its rows of ``x``, parameters and buffers (views
        into the stacked tensors), concatenated: what each group computes stacked alone."""
        groups = self._apart()
        assert groups is not None
        n = x.shape[0] // self.k
        saved = self.k, self.params, self.buffers, self.mask, self._counts, self.apart
        outs = []
        try:
            for sl in groups:
                self.k, self.apart = sl.stop - sl.start, None
                self.params = {name: t[sl] for name, t in saved[1].items()}
                self.buffers = {name: t[sl] for name, t in saved[2].items()}
                self.mask = None if saved[3] is None else saved[3][sl]
                self._counts = None if saved[4] is None else saved[4][sl]
                outs.append(forward(x[sl.start * n:sl.stop * n]))
        finally:
            self.k, self.params, self.buffers, self.mask, self._counts, self.apart = saved
        return torch.cat(outs)

    def _coupled(self, layer: str, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> tuple[Tensor, ...]:
        """:func:`coupled_batch_norm` of each group of :attr:`couple` on its own rows and all-reduce,
        operation by operation as alone; global moments ``(C,)`` for one group, else ``(K, C)`` detached."""
        assert self.couple is not None
        if len(self.couple) == 1:
            (_, reduce), = self.couple
            return coupled_batch_norm(x, self.k, self._counts, gamma, beta, eps,
                                      lambda kind, parts: reduce(layer, kind, parts))
        n = x.shape[0] // self.k
        outs = [coupled_batch_norm(x[rows.start * n:rows.stop * n], rows.stop - rows.start,
                                   None if self._counts is None else self._counts[rows], gamma[rows], beta[rows], eps,
                                   lambda kind, parts, reduce=reduce: reduce(layer, kind, parts))
                for rows, reduce in self.couple]
        gm, gv = (torch.cat([o[i].detach().expand(r.stop - r.start, -1)  # (K, C): each row its group's
                             for o, (r, _) in zip(outs, self.couple, strict=True)]) for i in (3, 4))
        return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs]), torch.cat([o[2] for o in outs]), gm, gv

    def _registered(self, pre: str, m: nn.Module, form):
        """The forward of a layer of the layer registry (:data:`~bnfl.nn.batched_layers.BATCHED_LAYERS`)."""
        if form == PER_CLIENT:  # the layer and what it holds (a submodule's tensors too)
            return self._per_client(pre, m, [n for n, _ in m.named_parameters()], [n for n, _ in m.named_buffers()])
        params = [n for n, _ in m.named_parameters(recurse=False)]
        buffers = [n for n, _ in m.named_buffers(recurse=False)]

        def forward(x: Tensor) -> Tensor:
            return form(BatchedLayer(m, self.k, {n: self.params[pre + n] for n in params},
                                     {n: self.buffers[pre + n] for n in buffers}, self._counts), x)
        return forward

    def _per_client(self, pre: str, m: nn.Module, params: list[str], buffers: list[str]):
        """The layer's own ``forward`` once per client, on its real rows, with its row of the stacked
        parameters (gradients flow into them) and buffers (updated in place); a copy of the layer
        runs it, as ``m.forward`` becomes this function."""
        twin = copy.deepcopy(m)

        def forward(x: Tensor) -> Tensor:
            twin.train(m.training)
            n = x.shape[0] // self.k
            outs = []
            for k in range(self.k):
                rows = n if self._counts is None else int(self._counts[k])
                state = {**{p: self.params[pre + p][k] for p in params}, **{b: self.buffers[pre + b][k] for b in buffers}}
                y = torch.func.functional_call(twin, state, (x[k * n:k * n + rows],), strict=True, tie_weights=False)
                outs += [y, y[:1].expand(n - rows, *y.shape[1:])] if rows < n else [y]  # padding repeats row 0
            return torch.cat(outs)
        return forward
