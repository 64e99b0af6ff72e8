"""The one evaluation loop (:func:`accuracy`), the default loss, and FedTAN eq. 6's running-statistics
update from the coupled first step (:func:`ema_global_stats`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.data.folders import IGNORE_INDEX
from bnfl.fedtan import CoupledStep
from bnfl.functional import ema
from bnfl.stats import Moments


def _ignored(y: Tensor) -> int:
    """The label no loss or score counts: :data:`bnfl.data.IGNORE_INDEX` (Cityscapes' void, 255) for
    masks (N, H, W), PyTorch's default -100 (no real label) for one class per sample."""
    return IGNORE_INDEX if y.dim() > 1 else -100


def _cross_entropy(out: Tensor, y: Tensor) -> Tensor:
    return nn.functional.cross_entropy(out, y, ignore_index=_ignored(y))


@torch.no_grad()


def ema_global_stats(model: nn.Module, step: CoupledStep, *, union_count: Mapping[str, int] | None = None) -> None:
    r"""Running-statistics EMA of FedTAN's coupled first step, with the global statistics (FedTAN eq. 6).

    .. math:: \bar S \leftarrow (1-\rho)\,\bar S + \rho\,(\bar\mu,\ \tfrac{m}{m-1}\bar\sigma^2)

    where :math:`(\bar\mu, \bar\sigma^2)` are the global mean and biased variance the clients
    normalised with (eqs. 39-40) and :math:`m` is the union's element count per channel, so the
    update equals what PyTorch stores after a centralized step on the union batch.

    Parameters
    ----------
    model : nn.Module
        A client's model; its BN layers named in ``step.layer_stats`` are updated in place.
    step : CoupledStep
        The coupled first step (:func:`bnfl.fedtan.coupled_step`).
    union_count : mapping, optional
        Per BN layer, the union's element count :math:`m` per channel; default the sum over
        ``step.local_stats`` (right when ``step`` holds every client, as in the simulator; a
        distributed rank holding some of the clients passes the all-reduced count).

    Raises
    ------
    ValueError
        If the union holds fewer than 2 elements per channel (:meth:`bnfl.stats.Moments.unbiased_var`).
    """
    for name, m in model.named_modules():
        if name not in step.layer_stats or not isinstance(m, _BatchNorm) or not m.track_running_stats:
            continue
        mean, var = step.layer_stats[name]
        count = union_count[name] if union_count is not None else sum(mom.count for mom in step.local_stats[name])
        m.num_batches_tracked.add_(1)
        rho = m.momentum if m.momentum is not None else 1.0 / float(m.num_batches_tracked)
        unbiased = Moments(count=count, mean=mean, var=var).unbiased_var()  # raises for count < 2
        m.running_mean.copy_(ema(m.running_mean, mean.to(m.running_mean.dtype), rho))
        m.running_var.copy_(ema(m.running_var, unbiased.to(m.running_var.dtype), rho))


@torch.no_grad()


def accuracy(model: nn.Module, x: Tensor, y: Tensor, *, batch: int = 2048,
             prepare: Callable[[Tensor], Tensor] | None = None) -> tuple[float, float]:
    """Top-1 accuracy and mean cross-entropy of ``model`` (put in eval mode) on ``(x, y)``,
    in chunks of ``batch`` samples; ``(nan, nan)`` for no samples. The one evaluation loop.

    Both are per label element: per sample for classification (``y`` of shape (N,)), per pixel
    for segmentation (``y`` of shape (N, H, W): pixel accuracy and the mean pixel loss, over the
    pixels not labelled :data:`bnfl.data.IGNORE_INDEX`). ``prepare`` maps each chunk of ``x``
    before the model sees it (stored uint8 pixels: :func:`bnfl.data.stored.decode`).
    """
    model.eval()
    n = int(x.shape[0])
    if n == 0:
        return float("nan"), float("nan")
    ignore = _ignored(y)
    labels = int(y.numel()) if y.dim() == 1 else int((y != ignore).sum())  # N, or the counted pixels
    if labels == 0:
        return float("nan"), float("nan")
    correct, loss_sum = 0, 0.0
    for s in range(0, n, batch):
        xb = x[s : s + batch]
        out = model(prepare(xb) if prepare is not None else xb)
        correct += int((out.argmax(1) == y[s : s + batch]).sum())  # argmax is never the ignored label
        loss_sum += float(nn.functional.cross_entropy(out, y[s : s + batch], reduction="sum", ignore_index=ignore))
    return correct / labels, loss_sum / labels
