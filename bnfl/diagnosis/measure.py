r"""The quantities of a BN diagnosis, each a pure function of a model and the clients' samples.

Every function works on copies (the model, its buffers, ``.grad`` and train/eval modes are left
bitwise unchanged) and in the dtype of the tensors it is given (:func:`bnfl.diagnosis.diagnose`
passes float64).

- :func:`first_step_errors`: the aggregated first-step gradient of FedAvg+BN (``"none"``),
  FedAvg+Algorithm 2 (``"stats"``) and FedTAN (``"fedtan"``) against the centralized gradient on
  the union batch, and the gradient deviation :math:`B_i^2` (FedTAN Properties 1-3, eq. 41,
  Assumption 1). ``bnfl demo`` prints these.
- :func:`bn_inputs`: the input of every BN layer for a batch (train-mode forward on a copy).
- :func:`layer_shares`: per BN layer, the between-client share of the input's variance
  (:func:`bnfl.stats.decompose`; it is also the relative bias of FedAvg's averaged variance,
  FedTAN eq. 7), the same share within classes, and the noise of a batch mean at batch size B.
- :func:`label_divergence`: the clients' label distributions against the union's.
- :func:`local_update_error`: the model update of one round with E local steps against E
  centralized steps on the union of the same batches.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl import fedtan, stats
from bnfl.fedtan import AGGREGATES
from bnfl.fl.comm import weighted_sum

__all__ = [
    "NOISE_DRAWS",
    "batch_noise",
    "bn_inputs",
    "first_step_errors",
    "grad_norm",
    "label_divergence",
    "layer_shares",
    "local_update_error",
]

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Tensor, Tensor]


def grad_norm(g: dict[str, Tensor]) -> float:
    """Euclidean norm of a gradient given as ``{parameter name: tensor}`` (float64)."""
    return float(sum(v.double().square().sum() for v in g.values())) ** 0.5


def first_step_errors(model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn) -> tuple[dict[str, float],
                                                                                           dict[str, list[float]]]:
    r"""Relative error of each BN coupling's aggregated first-step gradient, and :math:`B_i^2`.

    .. math::

        e_{\text{mode}} = \frac{\lVert \sum_i p_i g_i^{\text{mode}} - g_{\text{central}} \rVert}
                               {\lVert g_{\text{central}} \rVert}, \qquad
        B_i^2 = \lVert g_i^{\text{mode}} - g_i^{\text{fedtan}} \rVert^2

    with :math:`p_i = n_i/N` and :math:`g_{\text{central}}` the gradient on the union batch.
    FedTAN's error is rounding (eq. 41, Remark 3); ``"none"`` (FedAvg+BN) and ``"stats"``
    (FedAvg+Algorithm 2) deviate unless the clients are identical (Properties 1-3);
    :math:`B_i^2` is FedTAN Assumption 1's gradient deviation (:func:`bnfl.fedtan.deviation`).

    Parameters
    ----------
    model : nn.Module
        With at least one BN layer; left unchanged.
    batches : list of (x_i, y_i)
        One batch per client.
    loss_fn : callable
        ``loss_fn(output, y)``, the batch-mean loss.

    Returns
    -------
    rel_error : dict[str, float]
        Mode (``"none"``, ``"stats"``, ``"fedtan"``) -> :math:`e_{\text{mode}}`.
    b2 : dict[str, list[float]]
        Mode -> :math:`B_i^2` of each client (zeros for ``"fedtan"``).
    """
    sizes = [int(x.shape[0]) for x, _ in batches]
    p = [n / sum(sizes) for n in sizes]
    central = fedtan.centralized_gradients(model, batches, loss_fn)
    c_norm = grad_norm(central)
    per_mode = {m: fedtan.client_gradients(model, batches, loss_fn, aggregate=m) for m in AGGREGATES}
    rel_error, b2 = {}, {}
    for mode, gs in per_mode.items():
        agg = weighted_sum(gs, p)
        rel_error[mode] = grad_norm({k: agg[k] - central[k] for k in central}) / c_norm
        b2[mode] = [float(v) for v in fedtan.deviation(gs, per_mode["fedtan"])]
    return rel_error, b2


def bn_inputs(model: nn.Module, x: Tensor) -> list[Tensor]:
    """The input of every BN layer (selected by type) for batch ``x``: a train-mode forward on a
    copy of ``model`` (BN normalises with the batch's statistics), in module order."""
    work = copy.deepcopy(model).train()
    seen: list[Tensor] = []
    for m in work.modules():
        if isinstance(m, _BatchNorm):
            m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    with torch.no_grad():
        work(x)
    return seen


def _between_share(h: Tensor, groups: Sequence[Tensor]) -> float:
    r"""Mean over channels of between / (within + between) for the rows of ``h`` split into
    ``groups`` (:func:`bnfl.stats.decompose`); channels without variance are skipped."""
    within, between = stats.decompose([stats.moments(h[g]) for g in groups])
    total = within + between
    ok = total > 1e-12 * float(total.max().clamp_min(1e-300))
    return float((between[ok] / total[ok]).mean()) if bool(ok.any()) else 0.0


def _class_share(h: Tensor, owner: Tensor, y: Tensor) -> float | None:
    r"""Between-client share within classes: :func:`_between_share` per class over the clients
    that hold it, averaged with the class's share of the samples; ``None`` when no class is held
    by two clients (then P(x | y) cannot be compared across clients)."""
    total, acc = 0, 0.0
    for c in torch.unique(y).tolist():
        rows = y == c
        holders = [torch.nonzero(rows & (owner == i)).flatten() for i in torch.unique(owner[rows]).tolist()]
        if len(holders) < 2:
            continue
        n = int(rows.sum())
        acc += n * _between_share(h, holders)
        total += n
    return acc / total if total else None


def layer_shares(h: Tensor, owner: Tensor, y: Tensor | None, *, batch_size: int | None,
                 seed: int = 0) -> dict[str, float | None]:
    r"""Shares of one BN layer's input variance, per channel and then averaged over channels.

    With client moments :math:`(n_i, \mu_i, \sigma_i^2)`, :math:`p_i = n_i/N` and the union's
    variance :math:`\sigma^2 = \sum_i p_i\sigma_i^2 + \sum_i p_i(\mu_i-\mu)^2`
    (:func:`bnfl.stats.decompose`):

    ``between``
        :math:`\sum_i p_i(\mu_i-\mu)^2 / \sigma^2`, the between-client share; it is also the
        relative bias :math:`(\sigma^2 - \sum_i p_i\sigma_i^2)/\sigma^2` of the variance FedAvg+BN
        averages (FedTAN eq. 7), which HBN eq. 8 and FedTAN eqs. 39-40 remove.
    ``between_given_label``
        the same share computed within each class over the clients holding it, weighted by the
        class's samples: large when :math:`P(x\mid y)` differs across clients (feature shift),
        near the sampling floor under pure label skew; ``None`` when no class is held by two
        clients.
    ``batch_noise``
        what BN sees at batch size B (:func:`batch_noise`): the error of a batch's per-channel
        mean and standard deviation, over its :math:`B\times H\times W` positions, against the
        client's population, in units of the population's variance; ``None`` when ``batch_size``
        is ``None``.

    Parameters
    ----------
    h : Tensor of shape (N, C, ...)
        The layer's input for the union of the clients' samples.
    owner : Tensor of shape (N,)
        The client of each row (0..K-1, each present).
    y : Tensor of shape (N,), optional
        Integer class labels; ``None`` skips ``between_given_label``.
    batch_size : int or None
        B; ``None`` skips ``batch_noise``.
    seed : int, default 0
        Seeds the batches :func:`batch_noise` draws.
    """
    k = int(owner.max()) + 1
    groups = [torch.nonzero(owner == i).flatten() for i in range(k)]
    parts = [stats.moments(h[g]) for g in groups]
    union = stats.merge(parts)
    within, between = stats.decompose(parts)
    ok = union.var > 1e-12 * float(union.var.max().clamp_min(1e-300))
    return {
        "channels": int(h.shape[1]),
        "var": float(union.var.mean()),
        "avg_var": float(within.mean()),
        "between": float((between[ok] / union.var[ok]).mean()) if bool(ok.any()) else 0.0,
        "between_given_label": None if y is None else _class_share(h, owner, y),
        "batch_noise": None if batch_size is None else batch_noise(h, owner, batch_size=batch_size, seed=seed),
    }


#: Batches :func:`batch_noise` draws per client.
NOISE_DRAWS = 256


def batch_noise(h: Tensor, owner: Tensor, *, batch_size: int, draws: int = NOISE_DRAWS, seed: int = 0) -> float:
    r"""What BN sees at batch size B: the error of a batch's statistics against the population's.

    BN normalises channel c of a training batch with the mean :math:`\mu_B` and the biased
    standard deviation :math:`\sigma_B` over the batch's :math:`B\times H\times W` positions
    (FedTAN eqs. 1-2), not with the population's :math:`(\mu, \sigma)`. For B samples drawn
    without replacement from client i (the population: all of its rows in ``h``)

    .. math:: \nu = \sum_i p_i \operatorname{mean}_c
              \mathbb{E}\left[\frac{(\mu_B-\mu_i)^2 + (\sigma_B-\sigma_i)^2}{\sigma_i^2}\right]

    the squared distance of the batch's (mean, standard deviation) from the population's in
    units of its variance, estimated from ``draws`` random batches per client (a seeded
    generator; channels without variance are skipped). For independent Gaussian features it
    is about :math:`1.5/n` with :math:`n = BHW`; positions of one sample are correlated, so a
    convolution's channel sees far fewer than :math:`BHW` independent values, and this measure
    says how many: the noise of a 2-sample batch of 8x8 feature maps is closer to that of 2
    samples than to that of 128 (``tests/test_diagnose.py``).

    Parameters
    ----------
    h : Tensor of shape (N, C, ...)
        A BN layer's input for the union of the clients' samples.
    owner : Tensor of shape (N,)
        The client of each row (0..K-1, each present).
    batch_size : int
        B (a client with fewer rows draws all of them: no noise).
    draws : int, default :data:`NOISE_DRAWS`
    seed : int, default 0

    Returns
    -------
    float
        :math:`\nu` (0 for a batch that is the population).
    """
    gen = torch.Generator().manual_seed(seed + 104729)
    n, c = h.shape[0], h.shape[1]
    flat = h.reshape(n, c, -1)  # (N, C, *) -> (N, C, P)
    positions = flat.shape[-1]
    total = 0.0
    for i in range(int(owner.max()) + 1):
        hi = flat[owner == i]  # (n_i, C, P)
        mu = hi.mean(dim=(0, 2))  # (C,)
        var = hi.var(dim=(0, 2), correction=0)  # (C,)
        ok = var > 1e-12 * float(var.max().clamp_min(1e-300))
        if not bool(ok.any()):
            continue
        centred = hi - mu[None, :, None]
        s1, s2 = centred.sum(-1), centred.square().sum(-1)  # per sample: (n_i, C) sums over positions
        b = min(batch_size, hi.shape[0])
        idx = torch.rand(draws, hi.shape[0], generator=gen).argsort(dim=1)[:, :b]  # (draws, B) without replacement
        m = s1[idx].sum(1) / (b * positions)  # (draws, C): batch mean minus population mean
        v = (s2[idx].sum(1) / (b * positions) - m.square()).clamp_min(0.0)  # (draws, C): biased batch variance
        err = (m.square() + (v.sqrt() - var.sqrt()).square()) / var  # (draws, C)
        total += hi.shape[0] / n * float(err[:, ok].mean())
    return total


def label_divergence(y: Tensor, owner: Tensor) -> float:
    r"""Mean total-variation distance of the clients' label distributions from the union's.

    .. math:: D_y = \sum_i p_i \tfrac12 \sum_c \lvert q_i(c) - q(c) \rvert \in [0, 1]

    with :math:`q_i` client i's class frequencies and :math:`q = \sum_i p_i q_i`. 0 when every
    client has the union's label mix; 0.8 for 10 equal classes split 2 per client.
    """
    k = int(owner.max()) + 1
    num_classes = int(y.max()) + 1
    counts = torch.zeros(k, num_classes, dtype=torch.float64)
    counts.index_put_((owner, y), torch.ones_like(y, dtype=torch.float64), accumulate=True)  # (K, classes)
    n = counts.sum(1, keepdim=True)
    q_i = counts / n
    p = n / n.sum()
    q = (p * q_i).sum(0, keepdim=True)
    return float((p.flatten() * 0.5 * (q_i - q).abs().sum(1)).sum())


def _grad_at(work: nn.Module, params: dict[str, Tensor], batches: Sequence[Batch], loss_fn: LossFn,
             ) -> dict[str, Tensor]:
    """Gradient of ``loss_fn`` on the union of ``batches`` at ``params`` (train-mode BN)."""
    buffers = {n: b.detach().clone() for n, b in work.named_buffers()}
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    leaves = {n: v.detach().requires_grad_(True) for n, v in params.items()}
    with torch.enable_grad():
        loss = loss_fn(functional_call(work, {**leaves, **buffers}, (x,)), y)
        got = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {n: torch.zeros_like(v) if g is None else g for (n, v), g in zip(leaves.items(), got, strict=True)}


def local_update_error(model: nn.Module, step_batches: Sequence[Sequence[Batch]], loss_fn: LossFn, *,
                       lr: float) -> dict[str, float]:
    r"""Error of one round's aggregated update after E local SGD steps, FedAvg+BN and FedTAN.

    Each client starts from the model's parameters :math:`w_0` and takes E plain SGD steps
    (learning rate ``lr``, BN with its own batch statistics) on its batches
    ``step_batches[t][i]``; FedTAN's step 1 is the coupled step (eqs. 39-41), steps 2..E are
    local (FedTAN Alg. 1). The reference takes E centralized steps on the unions
    :math:`\cup_i` ``step_batches[t][i]``.

    .. math:: e = \frac{\lVert \sum_i p_i (w_i^E - w_0) - (w_c^E - w_0)\rVert}{\lVert w_c^E - w_0 \rVert}

    With E = 1 it equals :func:`first_step_errors`' gradient error; for E > 1 FedTAN's error is
    no longer 0: the rest is the client drift of local steps, which no BN fix removes.

    Returns
    -------
    dict[str, float]
        ``{"none": e_FedAvg+BN, "fedtan": e_FedTAN}``.
    """
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}")
    work = copy.deepcopy(model).train()
    w0 = {n: p.detach().clone() for n, p in work.named_parameters() if p.requires_grad}
    sizes = [int(b[0].shape[0]) for b in step_batches[0]]
    p = [n / sum(sizes) for n in sizes]

    def sgd(w: dict[str, Tensor], g: dict[str, Tensor]) -> dict[str, Tensor]:
        return {n: w[n] - lr * g[n] for n in w}

    wc = w0
    for batches in step_batches:
        wc = sgd(wc, _grad_at(work, wc, batches, loss_fn))
    ref = {n: wc[n] - w0[n] for n in w0}
    ref_norm = grad_norm(ref)
    coupled = fedtan.client_gradients(work, list(step_batches[0]), loss_fn, aggregate="fedtan")
    out = {}
    for mode in ("none", "fedtan"):
        deltas = []
        for i in range(len(sizes)):
            g1 = coupled[i] if mode == "fedtan" else _grad_at(work, w0, [step_batches[0][i]], loss_fn)
            w = sgd(w0, {n: g1[n] for n in w0})
            for batches in step_batches[1:]:
                w = sgd(w, _grad_at(work, w, [batches[i]], loss_fn))
            deltas.append({n: w[n] - w0[n] for n in w0})
        agg = weighted_sum(deltas, p)
        out[mode] = grad_norm({n: agg[n] - ref[n] for n in w0}) / ref_norm if ref_norm > 0 else 0.0
    return out
