"""``bnfl.diagnose(model, data, ...)``: how much BN is hurt by this federated partition, and which fix."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from tqdm.auto import tqdm

from bnfl.diagnosis import measure, rules
from bnfl.diagnosis.report import Diagnosis

__all__ = ["Diagnosis", "client_samples", "diagnose"]


def client_samples(data: Any) -> list[tuple[Tensor, Tensor]]:
    """Each client's ``(x_i, y_i)`` from a :class:`bnfl.fl.FederatedData` or a sequence of pairs."""
    if hasattr(data, "clients") and hasattr(data, "x_train"):
        return [(data.x_train[torch.as_tensor(np.asarray(c))], data.y_train[torch.as_tensor(np.asarray(c))])
                for c in data.clients]
    if isinstance(data, Tensor) or not isinstance(data, Sequence) or len(data) == 0:
        raise TypeError("data must be a bnfl.fl.FederatedData or a non-empty list of (x_i, y_i) pairs, one per "
                        f"client; got {type(data).__name__}")
    out = []
    for i, pair in enumerate(data):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"client {i}: expected an (x, y) pair")
        x, y = pair
        if not isinstance(x, Tensor) or not isinstance(y, Tensor):
            raise TypeError(f"client {i}: x and y must be tensors")
        out.append((x, y))
    return out


def _check(model: nn.Module, clients: list[tuple[Tensor, Tensor]], batch_size: int, local_steps: int) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not any(isinstance(m, _BatchNorm) for m in model.modules()):
        raise ValueError("the model has no BatchNorm layer: there are no batch statistics to diagnose "
                         "(GroupNorm/LayerNorm models are not affected by the clients' statistics)")
    if len(clients) < 2:
        raise ValueError(f"a federated partition needs at least 2 clients, got {len(clients)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2 (BN needs two samples), got {batch_size!r}")
    if isinstance(local_steps, bool) or not isinstance(local_steps, int) or local_steps < 1:
        raise ValueError(f"local_steps must be a positive integer, got {local_steps!r}")
    shape = clients[0][0].shape[1:]
    for i, (x, y) in enumerate(clients):
        if x.dim() < 2:
            raise ValueError(f"client {i}: x must have shape (n_i, ...features), got {tuple(x.shape)}")
        if x.shape[0] < 2:
            raise ValueError(f"client {i} has {x.shape[0]} sample{'s' if x.shape[0] != 1 else ''}; BN statistics "
                             "need at least 2 per client: drop the client or give it data")
        if x.shape[1:] != shape:
            raise ValueError(f"client {i} has samples of shape {tuple(x.shape[1:])} but client 0 has "
                             f"{tuple(shape)}; all clients must feed the same model input")
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"client {i}: x has {x.shape[0]} samples but y has {y.shape[0]}; they must match")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"client {i}: x holds NaN or Inf; clean or drop those samples")


def _floors(h0: Tensor, owner: Tensor, y: Tensor | None, *, permutations: int, seed: int
            ) -> tuple[float | None, float | None]:
    """Label divergence and first-layer within-class share on i.i.d. re-partitions (same sizes);
    without class labels (``y`` None), no label divergence and the unconditional between share."""
    g = torch.Generator().manual_seed(seed + 7919)
    labels, feats = [], []
    for _ in range(permutations):
        perm = owner[torch.randperm(owner.numel(), generator=g)]  # the same sizes, rows dealt at random
        shares = measure.layer_shares(h0, perm, y, batch_size=None)
        f = shares["between"] if y is None else shares["between_given_label"]
        if y is not None:
            labels.append(measure.label_divergence(y, perm))
        if f is not None:
            feats.append(f)
    return (float(np.mean(labels)) if labels else None), (float(np.mean(feats)) if feats else None)


def _iid_batches(x: Tensor, y: Tensor, owner: Tensor, batch_size: int, gen: torch.Generator
                 ) -> list[tuple[Tensor, Tensor]]:
    """One batch per client after dealing the rows out at random (same client sizes)."""
    perm = owner[torch.randperm(owner.numel(), generator=gen)]
    out = []
    for i in range(int(owner.max()) + 1):
        rows = torch.nonzero(perm == i).flatten()[:batch_size]
        out.append((x[rows], y[rows].to(x.device)))
    return out


def diagnose(
    model: nn.Module,
    data: Any,
    *,
    batch_size: int = 32,
    local_steps: int = 1,
    lr: float = 0.1,
    loss_fn: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
    stat_samples: int = 256,
    per_client_models: bool = False,
    sync_rounds_ok: bool = False,
    permutations: int = 4,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device | None = None,
    threads: int | None = 1,
) -> Diagnosis:
    r"""Diagnose BN on a federated partition: statistics, gradients, shift, recommended fix, costs.

    All measurements are at the model's current parameters (initialisation or a checkpoint), in
    float64 on a copy: the model and its buffers are left unchanged.

    1. **Statistics** of every BN layer's input, for up to ``stat_samples`` samples per client run
       through the model as one union batch: the between-client share of the variance (equal to
       the relative bias of FedAvg+BN's averaged variance :math:`\sum_i p_i\sigma_i^2`, FedTAN
       eq. 7), the same share within classes, and the noise of a batch mean at ``batch_size``
       (:func:`bnfl.diagnosis.measure.layer_shares`).
    2. **Gradients** of one first local step on one batch of ``batch_size`` per client: the
       aggregated-gradient error of FedAvg+BN, FedAvg+Algorithm 2 and FedTAN against the
       centralized gradient, and the gradient deviation :math:`B_i^2` (FedTAN Properties 1-3,
       Assumption 1; :func:`bnfl.diagnosis.measure.first_step_errors`); and the error of one
       round's update after ``local_steps`` SGD steps at ``lr``
       (:func:`bnfl.diagnosis.measure.local_update_error`).
    3. **Shift**: label skew and feature shift against an i.i.d. re-partition of the same samples
       (:func:`bnfl.diagnosis.rules.classify_shift`).
    4. **Recommendation**: the first rule of :data:`bnfl.diagnosis.rules.RULES` that applies:

       ========================================================  ===========================
       when                                                      fix (then alternatives)
       ========================================================  ===========================
       no shift, batches not small                               FedAvg+BN (BN is fine)
       small batches, no shift                                   FedAvg+GN, HBN
       small batches with shift                                  HBN, FedAvg+GN
       feature shift, per-client models acceptable               FedBN
       shift, one global model, synchronous rounds acceptable    FedTAN, FixBN
       shift, one global model                                   FixBN, HBN, FedTAN
       ========================================================  ===========================

    5. **Communication** of each fix on this model (:func:`bnfl.diagnosis.rules.communication`).

    Parameters
    ----------
    model : nn.Module
        A model with at least one BN layer (selected by type).
    data : bnfl.fl.FederatedData or list of (x_i, y_i)
        The clients' training samples; every client needs at least 2 and the same sample shape.
    batch_size : int, default 32
        The clients' local batch size B (>= 2; a client with fewer samples uses all of them).
    local_steps : int, default 1
        E, local SGD steps per round.
    lr : float, default 0.1
        Local learning rate of the E-step update error.
    loss_fn : callable, default ``F.cross_entropy``
        ``loss_fn(output, y)`` returning the batch-mean loss.
    stat_samples : int, default 256
        Samples per client for the statistics and the shift tests.
    per_client_models : bool, default False
        Each client may keep its own model (allows FedBN).
    sync_rounds_ok : bool, default False
        Clients can run FedTAN's 3L+1 synchronous exchanges per iteration.
    permutations : int, default 4
        i.i.d. re-partitions that estimate the shift floors.
    seed : int, default 0
        Which samples and batches are drawn; the same seed gives the same result (bitwise on CPU).
    device : str or torch.device, optional
        Where the float64 copy of the model runs (default: the model's device); the clients'
        samples are moved there, the statistics are reduced on the CPU.
    progress : bool, default True
        A tqdm progress bar (shown only if the diagnosis takes more than half a second).
    threads : int or None, default 1
        Torch's intra-op threads while the diagnosis runs (:func:`torch.set_num_threads`; the
        caller's setting is restored afterwards, also on an error). The diagnosis is many small
        float64 operations, for which more threads cost more than they bring: on a 2-core machine
        whose cores were busy it took 16.8 s with torch's default of 2 threads and 1.2 s with 1.
        ``None`` keeps the caller's setting.

    Returns
    -------
    Diagnosis
        ``print(d)`` shows the report table (:func:`bnfl.diagnosis.report.format_table`).

    Raises
    ------
    ValueError
        A model without BN layer, fewer than 2 clients, a client with fewer than 2 samples,
        mismatched sample shapes, x/y lengths that differ, non-finite inputs, or a model that
        cannot take the samples.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _diagnose(model, data, batch_size=batch_size, local_steps=local_steps, lr=lr, loss_fn=loss_fn,
                         stat_samples=stat_samples, per_client_models=per_client_models,
                         sync_rounds_ok=sync_rounds_ok, permutations=permutations, seed=seed, progress=progress,
                         device=device)
    finally:
        torch.set_num_threads(previous)


def _diagnose(model: nn.Module, data: Any, *, batch_size: int, local_steps: int, lr: float,
              loss_fn: Callable[[Tensor, Tensor], Tensor], stat_samples: int, per_client_models: bool,
              sync_rounds_ok: bool, permutations: int, seed: int, progress: bool,
              device: str | torch.device | None) -> Diagnosis:
    """:func:`diagnose` at the thread count it chose."""
    start = time.perf_counter()
    clients = client_samples(data)
    _check(model, clients, batch_size, local_steps)
    if stat_samples < 2:
        raise ValueError(f"stat_samples must be >= 2, got {stat_samples}")
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    # float64 on a copy: the caller's model is never touched
    work = copy.deepcopy(model).to(device=torch.device(device), dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    xs, ys, owners, batches, steps = [], [], [], [], [[] for _ in range(local_steps)]
    for i, (x, y) in enumerate(clients):
        order = torch.randperm(x.shape[0], generator=gen)

        def rows_of(idx: Tensor, x: Tensor = x, y: Tensor = y) -> tuple[Tensor, Tensor]:
            # only the rows used are converted: a client's whole data set may be large
            idx = idx.to(x.device)
            return x.detach()[idx].to(device=device, dtype=torch.float64), y[idx.to(y.device)].to(device)

        pick = order[: min(stat_samples, x.shape[0])]
        xp, yp = rows_of(pick)
        xs.append(xp)
        ys.append(yp.cpu())
        owners.append(torch.full((pick.numel(),), i, dtype=torch.long))
        b = min(batch_size, x.shape[0])
        for t in range(local_steps):  # step t's batch: the next b samples of the client's order, cycling
            steps[t].append(rows_of(order[(torch.arange(b) + t * b) % x.shape[0]]))
        batches.append(steps[0][i])
    x_all, y_all, owner = torch.cat(xs), torch.cat(ys), torch.cat(owners)  # y_all, owner: on the CPU
    categorical = y_all.dim() == 1 and not y_all.is_floating_point() and bool((y_all >= 0).all())
    bar = tqdm(total=5, desc="bnfl diagnose", disable=not progress, delay=0.5, leave=False)
    try:
        try:
            hs = [h.cpu() for h in measure.bn_inputs(work, x_all)]
        except RuntimeError as err:
            raise ValueError(f"the model cannot take the clients' samples of shape {tuple(x_all.shape[1:])}: "
                             f"{err}") from None
        bns = [(n, type(m).__name__) for n, m in work.named_modules() if isinstance(m, _BatchNorm)]
        layers = []
        for (name, kind), h in zip(bns, hs, strict=True):
            row = measure.layer_shares(h, owner, y_all if categorical else None, batch_size=batch_size, seed=seed)
            layers.append({"name": name, "type": kind, **row})
        bar.update()
        label_div = measure.label_divergence(y_all, owner) if categorical else None
        label_floor, feature_floor = _floors(hs[0], owner, y_all if categorical else None,
                                             permutations=permutations, seed=seed)
        # P(x | y) across clients; without class labels, P(x) (FedBN Sec. 3's covariate shift)
        feature = layers[0]["between_given_label"] if categorical else layers[0]["between"]
        bar.update()
        grad_error, b2 = measure.first_step_errors(work, batches, loss_fn)
        grad_floor, _ = measure.first_step_errors(work, _iid_batches(x_all, y_all, owner, batch_size, gen), loss_fn)
        bar.update()
        update_error = measure.local_update_error(work, steps, loss_fn, lr=lr)
        bar.update()
        shift = rules.classify_shift(label_div, label_floor, feature, feature_floor)
        small = rules.total_batch_noise([r["batch_noise"] for r in layers]) >= rules.SMALL_BATCH_THRESHOLD
        rec = rules.recommend(rules.Facts(shift=shift, small_batch=small, per_client_models=per_client_models,
                                          sync_rounds_ok=sync_rounds_ok))
        comm = rules.communication(model, len(clients))
        bar.update()
    finally:
        bar.close()
    setting = {
        "clients": len(clients), "sizes": [int(x.shape[0]) for x, _ in clients], "batch_size": batch_size,
        "local_steps": local_steps, "lr": lr, "stat_samples": stat_samples, "seed": seed,
        "per_client_models": per_client_models, "sync_rounds_ok": sync_rounds_ok,
        "bn_layers": len(layers), "seconds": time.perf_counter() - start,
    }
    return Diagnosis(
        layers=layers, grad_error=grad_error, mean_b2={m: float(np.mean(v)) for m, v in b2.items()},
        grad_error_floor=grad_floor, update_error=update_error, label_divergence=label_div, label_floor=label_floor,
        feature_shift=feature, feature_floor=feature_floor, shift=shift, small_batch=small,
        recommendation=rec, communication=comm, setting=setting,
    )
