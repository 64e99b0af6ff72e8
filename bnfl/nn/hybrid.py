r"""Hybrid Batch Normalisation (HBN; Chen et al., eqs. 9-10).

HBN mixes the statistics of the current mini-batch with *global* statistics that the server
computed (HBN eq. 8, then the EMA of eq. 11) and that local SGD never changes. Per channel, a
learnable hybrid distribution factor :math:`\alpha` (initialised to 0, never sent to the server)
sets the weight :math:`s = \operatorname{sigmoid}(\alpha) = 1/(1+e^{-\alpha})` on the global
statistics:

.. math::

    \hat\mu      &= (1-s)\,\mu_b + s\,\mu_g                      \qquad \text{(eq. 9)} \\
    \hat\sigma^2 &= (1-s)\,\sigma_b^2 + s\,\sigma_g^2 \\
    y_i          &= \gamma\,\frac{x_i-\hat\mu}{\sqrt{\hat\sigma^2+\epsilon}} + \beta
                                                               \qquad \text{(eq. 10)}

with :math:`(1-s) = e^{-\alpha}/(1+e^{-\alpha})` exactly as printed in eq. 9. The batch moments
are those of eq. 1: the mean and the *biased* variance over every element of a channel. The
variance is mixed linearly (no between-term): :math:`\hat\sigma^2` is a convex combination of the
two variances, not the variance of a mixture.

Gradients flow through :math:`\mu_b, \sigma_b^2` with weight :math:`1-s`, and to
:math:`\alpha, \gamma, \beta`. Since :math:`ds/d\alpha = s(1-s)`,

.. math::
    \frac{\partial L}{\partial\alpha} = s(1-s)\Big[\Big\langle\frac{\partial L}{\partial\hat\mu},
    \mu_g-\mu_b\Big\rangle + \Big\langle\frac{\partial L}{\partial\hat\sigma^2},
    \sigma_g^2-\sigma_b^2\Big\rangle\Big]

per channel. :math:`\mu_g, \sigma_g^2` are buffers and receive no gradient. At evaluation
(``model.eval()``) HBN normalises with the global statistics alone and ignores :math:`\alpha`
(HBN Sec. 3.3: "normalisation parameters use global statistical parameters ... and do not require
the participation of hybrid factor").

HBN has no running statistics and no momentum (Sec. 3.4, "discard the moving average momentum"):
the only statistics buffers are ``global_mean`` and ``global_var``, set by the server with
:meth:`set_global_stats`.

Note on the reference code (github.com/Hongyao-Chen/HybridBN, ``MyBNtool.HybridBatchNorm``): it
puts ``sigmoid(alpha)`` on the *batch* statistics, the opposite of eq. 9 as printed. The two
conventions are the same model under :math:`\alpha \to -\alpha`; with :math:`\alpha_0 = 0` and
SGD (with or without momentum and weight decay) the training trajectories are identical up to
that sign. bnfl follows the paper: :math:`s = \operatorname{sigmoid}(\alpha)` weighs the global
statistics, so :math:`\alpha \to +\infty` is "global only" (HBN ablation 3).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl import functional as BF

__all__ = ["GlobalStatsMixin", "HybridBatchNorm1d", "HybridBatchNorm2d", "hybrid_batch_norm"]


def hybrid_batch_norm(
    x: Tensor,
    alpha: Tensor,
    global_mean: Tensor,
    global_var: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    *,
    eps: float,
    training: bool,
) -> Tensor:
    r"""Functional HBN forward (HBN eqs. 1, 9, 10).

    Parameters
    ----------
    x : Tensor of shape (N, C, ...)
        Layer input; channels on dim 1.
    alpha : Tensor of shape (C,)
        Hybrid distribution factor; the weight on the global statistics is ``sigmoid(alpha)``.
    global_mean, global_var : Tensor of shape (C,)
        Global statistics :math:`\mu_g, \sigma_g^2` (treated as constants).
    weight, bias : Tensor of shape (C,) or None
        :math:`\gamma, \beta`; ``None`` means 1 and 0.
    eps : float
        Added to the variance before the square root.
    training : bool
        ``True``: mix batch and global statistics (eq. 9). ``False``: global statistics only.

    Returns
    -------
    Tensor of the shape of ``x``.
    """
    g_mean = global_mean.detach()
    g_var = global_var.detach()
    if training:
        mu_b, var_b = BF.batch_moments(x)  # (C,) each: mean and biased variance, eq. 1
        s = torch.sigmoid(alpha)  # (C,) weight on the global statistics
        mean = (1 - s) * mu_b + s * g_mean  # eq. 9
        var = (1 - s) * var_b + s * g_var  # eq. 9
    else:
        mean, var = g_mean, g_var
    x_hat = BF.normalize(x, mean, BF.inv_std(var, eps))  # eq. 10
    return BF.affine(x_hat, weight, bias)


class GlobalStatsMixin:
    """``set_global_stats`` / ``reset_global_stats`` for layers with ``global_mean``/``global_var``
    buffers (HBN, FBN). Only the server sets them; local SGD never changes them."""

    @torch.no_grad()
    def set_global_stats(self, mean: Tensor, var: Tensor) -> None:
        r"""Set the global statistics :math:`\mu_g, \sigma_g^2` (the server's job, HBN eq. 8/11).

        Parameters
        ----------
        mean : Tensor of shape (C,)
            Global mean.
        var : Tensor of shape (C,)
            Global variance (HBN eq. 8 gives the unbiased, N-1 estimate); must be >= 0.
        """
        c = self.num_features  # type: ignore[attr-defined]
        for name, t in (("mean", mean), ("var", var)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a Tensor of shape ({c},), got {type(t).__name__}")
            if t.shape != (c,):
                raise ValueError(f"{name} must have shape ({c},) (one value per channel), got {tuple(t.shape)}")
            if not torch.isfinite(t).all():
                raise ValueError(f"{name} contains NaN or Inf; the server statistics are corrupt")
        if (var < 0).any():
            raise ValueError("var must be >= 0 in every channel")
        self.global_mean.copy_(mean)  # type: ignore[attr-defined]
        self.global_var.copy_(var)  # type: ignore[attr-defined]

    def reset_global_stats(self) -> None:
        """Reset the global statistics to mean 0, variance 1."""
        with torch.no_grad():
            self.global_mean.zero_()  # type: ignore[attr-defined]
            self.global_var.fill_(1.0)  # type: ignore[attr-defined]


class _Input1d:
    """Mixin: accept the inputs of ``nn.BatchNorm1d``, (N, C) or (N, C, L) (HBN and FBN layers)."""

    def _check_input_dim(self, x: Tensor) -> None:
        if x.dim() not in (2, 3):
            raise ValueError(f"{type(self).__name__} expects (N, C) or (N, C, L) input, got {x.dim()}D")


class _Input2d:
    """Mixin: accept the inputs of ``nn.BatchNorm2d``, (N, C, H, W) (HBN and FBN layers)."""

    def _check_input_dim(self, x: Tensor) -> None:
        if x.dim() != 4:
            raise ValueError(f"{type(self).__name__} expects (N, C, H, W) input, got {x.dim()}D")


class _HybridBatchNorm(GlobalStatsMixin, _BatchNorm):
    """Shared implementation of :class:`HybridBatchNorm1d` and :class:`HybridBatchNorm2d`."""

    #: Parameters that stay on the client (never averaged by the server).
    local_parameters: ClassVar[tuple[str, ...]] = ("alpha",)

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        alpha_init: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if not isinstance(num_features, int) or isinstance(num_features, bool) or num_features <= 0:
            raise ValueError(f"num_features must be a positive int, got {num_features!r}")
        if not (eps > 0):
            raise ValueError(f"eps must be > 0 (it keeps the square root finite), got {eps!r}")
        if not math.isfinite(float(alpha_init)):
            raise ValueError(f"alpha_init must be finite, got {alpha_init!r}")
        factory = {"device": device, "dtype": dtype}
        # No running statistics: HBN's statistics buffers are the global ones below.
        super().__init__(
            num_features, eps=eps, momentum=None, affine=affine, track_running_stats=False,
            **factory,
        )
        self.alpha = nn.Parameter(torch.full((num_features,), float(alpha_init), **factory))
        self.register_buffer("global_mean", torch.zeros(num_features, **factory))
        self.register_buffer("global_var", torch.ones(num_features, **factory))

    @property
    def global_weight(self) -> Tensor:
        """Weight ``s = sigmoid(alpha)`` on the global statistics, shape (C,), detached."""
        return torch.sigmoid(self.alpha.detach())

    def reset_parameters(self) -> None:  # called by _BatchNorm.__init__ before alpha exists
        super().reset_parameters()
        if hasattr(self, "alpha"):
            with torch.no_grad():
                self.alpha.zero_()

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x`` of shape (N, C, ...) with HBN (eqs. 9-10); see the module docstring."""
        self._check_input_dim(x)
        if x.shape[1] != self.num_features:
            raise ValueError(
                f"expected {self.num_features} channels on dim 1, got input of shape {tuple(x.shape)}"
            )
        return hybrid_batch_norm(
            x, self.alpha, self.global_mean, self.global_var, self.weight, self.bias,
            eps=self.eps, training=self.training,
        )

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, affine={self.affine}"


class HybridBatchNorm1d(_Input1d, _HybridBatchNorm):
    """HBN for (N, C) or (N, C, L) inputs (HBN eqs. 9-10). See :mod:`bnfl.nn.hybrid`.

    Parameters
    ----------
    num_features : int
        Channels C.
    eps : float, default 1e-5
        Added to the mixed variance.
    affine : bool, default True
        Learn :math:`\\gamma, \\beta`.
    alpha_init : float, default 0.0
        Initial hybrid factor (HBN: 0, i.e. equal weights on batch and global statistics).
    """


class HybridBatchNorm2d(_Input2d, _HybridBatchNorm):
    """HBN for (N, C, H, W) inputs (HBN eqs. 9-10). Options as :class:`HybridBatchNorm1d`."""
