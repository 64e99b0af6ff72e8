"""The one evaluation loop (:func:`accuracy`), the default loss, FedTAN eq. 6's running-statistics
update from the coupled first step (:func:`ema_global_stats`), and the engine's evaluation methods
(:class:`EvaluationMixin`, mixed into :class:`bnfl.fl.Simulation`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.data.folders import IGNORE_INDEX
from bnfl.fedtan import CoupledStep
from bnfl.fl import fast_path
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


class EvaluationMixin:
    """The evaluation half of :class:`bnfl.fl.Simulation`: the global model's test accuracy and
    loss, each client's model on the global test set and on its own data (personalised
    algorithms), and the channel's counters for the history row. It reads the engine's state
    (``global_state``, ``algorithm``, ``_eval_model``, the test tensors); a backend whose clients
    run elsewhere answers for them (:meth:`Clients.accuracies <bnfl.fl.clients.Clients.accuracies>`)."""

    def evaluate(self) -> dict[str, Any]:
        """Test accuracy/loss of the global model; for personalised algorithms also each client's
        model on the global test set (averaged: FedTAN protocol) and on its own data (FedBN)."""
        out: dict[str, Any] = {}
        m = self._eval_model
        fast_path.load_state(m, self.evaluation_state())
        acc, loss = self._accuracy(m, self.x_test, self.y_test)
        out["test_acc"], out["test_loss"] = acc, loss
        if self.algorithm.personalized:
            per, own = (list(v) for v in zip(*self.clients.accuracies(range(self.num_clients)), strict=True))
            out["client_test_acc"] = per
            out["client_own_acc"] = own
            out["test_acc"] = float(np.mean(per))
            out["global_model_test_acc"] = acc
        return out

    def evaluation_state(self) -> Mapping[str, Tensor]:
        """The global state the global model is evaluated with (:meth:`Algorithm.evaluation_state
        <bnfl.fl.Algorithm.evaluation_state>`; the global state itself unless the algorithm says otherwise)."""
        return self.algorithm.evaluation_state(self.server, self.global_state, self.round_clients)

    def _comm_fields(self) -> dict[str, int]:
        ch = self.channel
        return {"bytes_up": ch.bytes_up, "bytes_down": ch.bytes_down, "bytes_total": ch.bytes_total,
                "comm_rounds": ch.rounds}
