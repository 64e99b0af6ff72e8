"""FixBN runs that record more than :func:`bnfl.experiments.training.train` does.

Three analyses look inside a running or finished simulation, each an observer of the one training
loop (:mod:`bnfl.experiments.observers`): the per-round statistics log of Fig. 2
(:class:`bnfl.fl.statistics_log.StatisticsLog` as a round hook), the re-accumulation of the global
model's BN statistics on the pooled training data (Sec. 3.4, :func:`bnfl.nn.recalibrate.recalibrate_bn`),
and segmentation metrics (pixel accuracy, mean IoU; Table 3). :func:`observed_runs` trains with
them and caches the summaries like any training run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bnfl.data import IGNORE_INDEX
from bnfl.experiments.core import Context
from bnfl.experiments.observers import Observer
from bnfl.experiments.training import train_seeds
from bnfl.fl.engine import accuracy
from bnfl.fl.statistics_log import StatisticsLog
from bnfl.nn.recalibrate import recalibrate_bn

__all__ = ["Recalibration", "Segmentation", "StatisticsDynamics", "observed_runs", "segmentation_scores"]


@torch.no_grad()
def segmentation_scores(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int, *,
                        ignore_index: int | None = None, batch: int = 512) -> dict[str, float]:
    """Pixel accuracy and mean IoU (%) of ``model`` on masks ``y`` (N, H, W), in eval mode.

    IoU of class c is TP / (TP + FP + FN) over all test pixels; the mean is over classes present
    in the labels or the predictions (classes never seen are skipped). Pixels labelled
    ``ignore_index`` (default :data:`bnfl.data.IGNORE_INDEX`, Cityscapes' "void" = 255) are left
    out of both scores; it is no class of the mean.
    """
    ignore = IGNORE_INDEX if ignore_index is None else int(ignore_index)
    model.eval()
    conf = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    for s in range(0, x.shape[0], batch):
        pred = model(x[s:s + batch]).argmax(1).flatten().cpu()  # (N, C, H, W) -> (N*H*W,)
        true = y[s:s + batch].flatten().cpu()
        keep = true != ignore  # void pixels do not count
        conf += torch.bincount(true[keep] * num_classes + pred[keep], minlength=num_classes**2).view(num_classes,
                                                                                                     num_classes)
    tp = conf.diag().double()
    union = conf.sum(0).double() + conf.sum(1).double() - tp
    seen = union > 0
    return {"pixel_acc": float(100 * tp.sum() / conf.sum()), "miou": float(100 * (tp[seen] / union[seen]).mean())}


class StatisticsDynamics(Observer):
    """Fig. 2 (a)/(b): per round, the change of the global statistics, a client's mini-batch distance from
    them and their variance over the last ``window`` rounds (:class:`bnfl.fl.statistics_log.StatisticsLog`)."""

    fields = ("stats_global_l1", "stats_local_l1", "stats_window_var")

    def __init__(self, window: int) -> None:
        self.window = int(window)

    def key(self) -> Mapping[str, Any]:
        return {"stats_window": self.window}

    def attach(self, sim: Any) -> None:
        sim.round_hooks.append(StatisticsLog(self.window))

    def record(self, sim: Any, split: Any, history: Any, *, diverged: bool) -> Mapping[str, Any]:
        return {k: [None if not np.isfinite(r[k]) else float(r[k]) for r in history.rows] for k in self.fields}


class Recalibration(Observer):
    """Sec. 3.4: the accuracy of the final global model once its BN statistics are re-accumulated on the
    pooled training data (``recalibrated_acc``; none for a run that diverged)."""

    def key(self) -> Mapping[str, Any]:
        return {"recalibrate": True}

    def record(self, sim: Any, split: Any, history: Any, *, diverged: bool) -> Mapping[str, Any]:
        if diverged:
            return {}
        model = sim.global_model()  # a copy: the simulation keeps its state
        recalibrate_bn(model, sim.x_train, batch_size=sim.config.batch_size)
        return {"recalibrated_acc": round(100 * accuracy(model, sim.x_test, sim.y_test)[0], 3)}


class Segmentation(Observer):
    """Table 3: pixel accuracy and mean IoU of the final global model (:func:`segmentation_scores`); its
    ``test_acc`` is the pixel accuracy."""

    def key(self) -> Mapping[str, Any]:
        return {"segmentation": True}

    def record(self, sim: Any, split: Any, history: Any, *, diverged: bool) -> Mapping[str, Any]:
        scores = segmentation_scores(sim.global_model(), sim.x_test, sim.y_test, split.num_classes,
                                     ignore_index=split.meta.get("ignore_index"))
        return {**scores, "test_acc": [scores["pixel_acc"]]}


def observed_runs(ctx: Context, spec: Mapping[str, Any], *observers: Observer) -> list[dict[str, Any]]:
    """``spec`` trained once per seed of ``ctx.seeds`` with ``observers`` recording, on the sequential
    engine: these runs were never batched, and their committed numbers are the sequential engine's."""
    return train_seeds(dataclasses.replace(ctx, batched="off", stack="seeds"), spec, observers=observers)
