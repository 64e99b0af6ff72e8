r"""Normalisation layers of ``K`` clients run as one computation (the batched engine's norms).

The input of every function is the clients' mini-batches concatenated on dim 0, ``(K*n, C, ...)``
(client ``k`` owns rows ``k*n .. (k+1)*n-1``), and every per-client parameter or buffer is
stacked on a leading client dimension, ``(K, C)``. Clients whose batches were padded to ``n``
rows pass ``counts`` (real rows per client, the first ``counts[k]`` rows of each block): batch
statistics are then taken over real rows only, and the padding rows' outputs are finite but
meaningless (the losses must ignore them).

Each function equals the corresponding layer applied to each client's real rows alone (tested in
float64 against the layers, outputs, gradients and buffers; ``tests/test_nn_batched_norms.py``):

* :func:`client_moments`: each client's batch mean and biased variance (eq. 1 of HBN, FedTAN
  eq. 2), the statistics of :func:`bnfl.functional.batch_moments` per client;
* :func:`hybrid_batch_norm`: HBN eqs. 9-10 (:class:`bnfl.nn.HybridBatchNorm2d`) with each
  client's own :math:`\alpha` and global statistics;
* :func:`federated_batch_norm`: FBN as :class:`bnfl.nn.norms._FederatedBatchNorm` (normalise with
  the global statistics; the equal-weight cumulative average of the batch moments in the
  running buffers, one counter per client);
* :func:`group_norm`: GroupNorm / LayerNorm / InstanceNorm (:class:`bnfl.nn.GroupNorm`,
  per-sample statistics, so padding needs no mask) with each client's affine parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["client_moments", "federated_batch_norm", "group_norm", "hybrid_batch_norm"]


def _blocks(x: Tensor, k: int) -> Tensor:
    """``(K*n, C, *)`` -> ``(K, n, C, r)`` (r: positions per channel, 1 for linear features)."""
    if x.shape[0] % k:
        raise ValueError(f"{x.shape[0]} rows cannot be split into {k} clients' equal blocks")
    return x.reshape(k, x.shape[0] // k, x.shape[1], -1)


def _per_client(t: Tensor) -> Tensor:
    """A ``(K, C)`` tensor broadcast against ``(K, n, C, r)``."""
    return t[:, None, :, None]


def client_moments(x: Tensor, k: int, counts: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r"""Each client's batch mean and biased variance per channel (HBN eq. 1, FedTAN eq. 2).

    .. math:: \mu_k = \tfrac1{m_k}\sum_{j\in k} x_j, \qquad
              \sigma_k^2 = \tfrac1{m_k}\sum_{j\in k}(x_j-\mu_k)^2

    over client ``k``'s real rows and every position (:math:`m_k` elements per channel); two
    passes, never :math:`E[x^2]-E[x]^2`, differentiable.

    Parameters
    ----------
    x : Tensor of shape (K*n, C, ...)
    k : int
        Number of clients K.
    counts : Tensor of shape (K,), optional
        Real rows per client (the first ``counts[k]`` of each block); default all ``n``.

    Returns
    -------
    mean, var : Tensor of shape (K, C)
    """
    xr = _blocks(x, k)
    if counts is None:
        mean = xr.mean(dim=(1, 3))
        return mean, (xr - _per_client(mean)).square().mean(dim=(1, 3))
    n, r = xr.shape[1], xr.shape[3]
    w = (torch.arange(n, device=x.device)[None, :] < counts[:, None]).to(x.dtype)[:, :, None, None]  # (K, n, 1, 1)
    m = (counts.to(x.dtype) * r)[:, None]  # (K, 1)
    mean = (xr * w).sum(dim=(1, 3)) / m
    return mean, ((xr - _per_client(mean)).square() * w).sum(dim=(1, 3)) / m


def _normalise(x: Tensor, k: int, mean: Tensor, var: Tensor, weight: Tensor | None, bias: Tensor | None,
               eps: float) -> Tensor:
    r""":math:`\gamma_k (x-\mu_k)/\sqrt{\sigma_k^2+\epsilon} + \beta_k` with ``(K, C)`` statistics."""
    xr = _blocks(x, k)
    y = (xr - _per_client(mean)) * _per_client(torch.rsqrt(var + eps))
    if weight is not None:
        y = y * _per_client(weight)
    if bias is not None:
        y = y + _per_client(bias)
    return y.reshape(x.shape)


def hybrid_batch_norm(x: Tensor, k: int, alpha: Tensor, global_mean: Tensor, global_var: Tensor,
                      weight: Tensor | None, bias: Tensor | None, *, eps: float, training: bool,
                      counts: Tensor | None = None) -> Tensor:
    r"""HBN (Chen et al., eqs. 9-10) of ``K`` clients at once, each with its own :math:`\alpha_k`.

    .. math:: s_k = \operatorname{sigmoid}(\alpha_k),\quad
              \hat\mu_k = (1-s_k)\mu_k + s_k\mu_{g,k},\quad
              \hat\sigma_k^2 = (1-s_k)\sigma_k^2 + s_k\sigma_{g,k}^2,\quad
              y = \gamma_k\frac{x-\hat\mu_k}{\sqrt{\hat\sigma_k^2+\epsilon}}+\beta_k

    with :math:`\mu_k, \sigma_k^2` from :func:`client_moments`; in evaluation the global
    statistics alone (as :func:`bnfl.nn.hybrid.hybrid_batch_norm`). All ``(K, C)`` tensors;
    the global statistics are constants (detached).
    """
    g_mean, g_var = global_mean.detach(), global_var.detach()
    if training:
        mu_b, var_b = client_moments(x, k, counts)
        s = torch.sigmoid(alpha)
        mean = (1 - s) * mu_b + s * g_mean  # eq. 9
        var = (1 - s) * var_b + s * g_var  # eq. 9
    else:
        mean, var = g_mean, g_var
    return _normalise(x, k, mean, var, weight, bias, eps)  # eq. 10


def federated_batch_norm(x: Tensor, k: int, global_mean: Tensor, global_var: Tensor, weight: Tensor | None,
                         bias: Tensor | None, *, eps: float, training: bool,
                         running: tuple[Tensor, Tensor, Tensor] | None = None,
                         counts: Tensor | None = None) -> Tensor:
    r"""FBN as HBN's experiments run it (:class:`bnfl.nn.norms._FederatedBatchNorm`), K clients.

    Normalises with each client's global statistics (constants). In training, each client's
    ``running_mean``/``running_var`` (``(K, C)``) become the equal-weight cumulative average of its
    batch mean and biased variance, :math:`S \leftarrow \frac{t}{t+1}S + \frac{1}{t+1}s_t`, with
    its own counter ``num_batches_tracked`` (``(K,)``), all updated in place.

    Parameters
    ----------
    running : (running_mean, running_var, num_batches_tracked), optional
        Updated in place in training mode.
    """
    if training and running is not None:
        rm, rv, nbt = running
        with torch.no_grad():
            mean_b, var_b = client_moments(x.detach(), k, counts)
            t = nbt.to(x.dtype)[:, None]  # (K, 1)
            # the layer's operation order: S * (t / (t + 1)) + s / (t + 1)
            rm.mul_(t / (t + 1)).add_(mean_b / (t + 1))
            rv.mul_(t / (t + 1)).add_(var_b / (t + 1))
            nbt.add_(1)
    return _normalise(x, k, global_mean.detach(), global_var.detach(), weight, bias, eps)


def group_norm(x: Tensor, k: int, groups: int, weight: Tensor | None, bias: Tensor | None, *,
               eps: float) -> Tensor:
    r"""GroupNorm (Wu & He 2018; LN: one group, IN: C groups) of ``K`` clients at once.

    The statistics are per sample (no client mixes with another, padding rows need no mask);
    the affine parameters :math:`\gamma_k, \beta_k` are each client's, ``(K, C)``.
    """
    y = F.group_norm(x, groups, None, None, eps)
    if weight is None and bias is None:
        return y
    yr = _blocks(y, k)
    if weight is not None:
        yr = yr * _per_client(weight)
    if bias is not None:
        yr = yr + _per_client(bias)
    return yr.reshape(x.shape)
