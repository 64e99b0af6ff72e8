"""FixBN runs that need more than :func:`bnfl.experiments.training.train` records.

Three analyses look inside a finished or running simulation: the per-round statistics log of
Fig. 2 (:class:`bnfl.fl.statistics_log.StatisticsLog` as a round hook), the re-accumulation of
the global model's BN statistics on the pooled training data (Sec. 3.4,
:func:`bnfl.nn.recalibrate.recalibrate_bn`), and segmentation metrics (pixel accuracy, mean IoU;
Table 3). :func:`observed_run` builds the run with the one builder (:func:`bnfl.fl.build`),
attaches what is asked, runs it and caches the summary like any training run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bnfl import fl
from bnfl.data import IGNORE_INDEX
from bnfl.experiments.core import Context, config_hash
from bnfl.experiments.training import canonical, load_data
from bnfl.fl.engine import accuracy
from bnfl.fl.statistics_log import StatisticsLog
from bnfl.nn.recalibrate import recalibrate_bn

__all__ = ["observed_run", "observed_runs", "segmentation_scores"]


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


def _run(spec: dict[str, Any], opts: Mapping[str, Any], *, device: str, data_root: str | None) -> dict[str, Any]:
    start = time.perf_counter()
    split = load_data(spec["data"], data_root=data_root)
    # sequential: these runs were never batched (their committed numbers are the sequential engine's)
    cfg = fl.RunConfig.from_dict({**spec, "device": device, "train": {**spec["train"], "progress": False,
                                                                      "batched": "off"}})
    sim = fl.build(cfg, data_root=data_root, split=split)
    if opts.get("stats_window"):
        sim.round_hooks.append(StatisticsLog(int(opts["stats_window"])))
    diverged = False
    try:
        history = sim.run()
    except fl.DivergenceError as err:
        history, diverged = err.history, True
    rows = history.rows
    out: dict[str, Any] = {"method": spec["method"], "diverged": diverged, "n_test": int(sim.y_test.shape[0]),
                           "train_loss": [None if r["train_loss"] is None else round(float(r["train_loss"]), 5)
                                          for r in rows]}
    if opts.get("stats_window"):
        for k in ("stats_global_l1", "stats_local_l1", "stats_window_var"):
            out[k] = [None if not np.isfinite(r[k]) else float(r[k]) for r in rows]
    model = sim.global_model()
    if opts.get("segmentation"):
        out.update(segmentation_scores(model, sim.x_test, sim.y_test, split.num_classes,
                                       ignore_index=split.meta.get("ignore_index")))
        out["test_acc"] = [out["pixel_acc"]]
    else:
        evaluated = [r for r in rows if "test_acc" in r]
        out["round"] = [int(r["round"]) for r in evaluated]
        out["test_acc"] = [round(100 * float(r["test_acc"]), 3) for r in evaluated]
        if opts.get("recalibrate") and not diverged:
            recalibrate_bn(model, sim.x_train, batch_size=sim.config.batch_size)
            out["recalibrated_acc"] = round(100 * accuracy(model, sim.x_test, sim.y_test)[0], 3)
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def observed_run(ctx: Context, spec: Mapping[str, Any], **opts: Any) -> dict[str, Any]:
    """One run of ``spec`` with the analyses in ``opts`` (``stats_window``, ``recalibrate``,
    ``segmentation``), cached in ``ctx.cache`` under its spec and options."""
    spec = canonical(spec)
    key = {"spec": spec, "device": ctx.device, "observed": dict(opts)}

    def compute() -> dict[str, Any]:
        return _run(spec, opts, device=ctx.device, data_root=ctx.data_root)

    out = compute() if ctx.cache is None else ctx.cache.get_or_compute(key, compute)
    ctx.runs_used[config_hash(key)] = float(out.get("seconds", 0.0))
    return out


def observed_runs(ctx: Context, spec: Mapping[str, Any], **opts: Any) -> list[dict[str, Any]]:
    """:func:`observed_run` once per seed of ``ctx.seeds`` (the seed sets init, batches and partition)."""
    return [observed_run(ctx, {**spec, "seed": int(s), "partition": {"seed": int(s), **dict(spec["partition"])}}, **opts)
            for s in ctx.seeds]
