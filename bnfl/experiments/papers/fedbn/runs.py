"""FedBN runs: FedBN's per-client protocol recorded during and after training.

:func:`fedbn_run` builds a run with the one builder (:func:`bnfl.fl.build`), trains it and records
what the FedBN entries read, cached like any training run:

- ``domain_acc``: each domain's test accuracy (%) under FedBN's protocol: a personalised client
  (FedBN, SingleSet) with its own model, a shared-model client (FedAvg, FedProx, centralized)
  with the global model; the mean over a domain's clients when it has several;
- ``eval_loss``: after every round's aggregation, the mean over clients of the loss of the model
  each client now holds, in eval mode, on the client's whole training set. This is the training
  curve the reference code prints (``fed_digits.py:303``; bnfl's own ``train_loss`` is the clients'
  mini-batch loss during the round);
- ``unseen_acc`` (``unseen`` given): accuracy on unseen-domain test sets (FedBN App. G: Q-DOM styles
  such as "thin", or "morpho:global" / "morpho:local" read from ``<data root>/morpho_mnist``). A new
  FedBN client uses the average of the trained clients' BN affine parameters and its own batch
  statistics (the BN statistics of its whole test set); shared-model methods use the global model.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from bnfl.experiments.core import Context, config_hash

__all__ = ["fedbn_run", "fedbn_runs", "new_client_model"]


def _bn_layers(model: nn.Module) -> list[tuple[str, nn.modules.batchnorm._BatchNorm]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


@torch.no_grad()
def new_client_model(clients: Sequence[nn.Module], x: torch.Tensor) -> nn.Module:
    """FedBN's model for an unseen client (App. G): the shared weights, the average of the trained
    clients' BN affine parameters, and BN statistics of the new client's data ``x`` (one pass in
    train mode with a cumulative average, i.e. the statistics of ``x`` as one batch). Inputs are
    not modified."""
    if not clients:
        raise ValueError("no trained clients to average")
    model = copy.deepcopy(clients[0])
    layers = [dict(_bn_layers(m)) for m in clients]
    for name, bn in _bn_layers(model):
        if bn.affine:
            bn.weight.copy_(torch.stack([ls[name].weight for ls in layers]).mean(0))
            bn.bias.copy_(torch.stack([ls[name].bias for ls in layers]).mean(0))
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the forward passes below
    model.train()
    model(x)
    model.eval()
    return model


@torch.no_grad()
def _eval(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    out = model(x)
    loss = float(nn.functional.cross_entropy(out, y))
    return 100.0 * float((out.argmax(1) == y).float().mean()), loss


def _run(spec: dict[str, Any], unseen: Sequence[str], *, device: str, data_root: str | None) -> dict[str, Any]:
    from bnfl import fl
    from bnfl.experiments.training import load_data

    start = time.perf_counter()
    split = load_data(spec["data"], data_root=data_root)
    # sequential: these runs were never batched (their committed numbers are the sequential engine's)
    cfg = fl.RunConfig.from_dict({**spec, "device": device, "train": {**spec["train"], "progress": False,
                                                                      "batched": "off"}})
    sim = fl.build(cfg, data_root=data_root, split=split)
    personal = sim.algorithm.personalized
    clients = range(sim.num_clients)

    def holding(c: int) -> nn.Module:
        return sim.client_model(c) if personal else sim.global_model()

    def eval_loss(s: Any, r: int) -> dict[str, Any]:
        losses = []
        for c in clients:
            idx = torch.as_tensor(s.client_indices[c], device=s.device)
            losses.append(_eval(holding(c), s.x_train[idx], s.y_train[idx])[1])
        return {"eval_loss": float(np.mean(losses))}

    if not sim.algorithm.centralized:
        sim.round_hooks.append(eval_loss)
    diverged = False
    try:
        history = sim.run()
    except fl.DivergenceError as err:
        history, diverged = err.history, True
    rows = history.rows
    out: dict[str, Any] = {
        "method": spec["method"], "diverged": diverged, "rounds_done": len(rows),
        "train_loss": [None if r["train_loss"] is None else round(float(r["train_loss"]), 5) for r in rows],
        "eval_loss": [round(float(r["eval_loss"]), 5) for r in rows if "eval_loss" in r],
        "domains": list(split.domains or []), "n_test": int(sim.y_test.shape[0]),
    }
    if not diverged:
        dom_test = split.domain_test.to(sim.x_test.device)
        dom_train = split.domain_train.numpy()
        owner = [int(dom_train[int(idx[0])]) for idx in sim.client_indices] if not sim.algorithm.centralized else []
        glob = sim.global_model()
        accs = []
        for j in range(len(split.domains)):
            sel = dom_test == j
            if personal:
                mine = [c for c in clients if owner[c] == j]
                accs.append(float(np.mean([_eval(sim.client_model(c), sim.x_test[sel], sim.y_test[sel])[0]
                                           for c in mine])))
            else:
                accs.append(_eval(glob, sim.x_test[sel], sim.y_test[sel])[0])
        out["domain_acc"] = [round(a, 3) for a in accs]
        out["n_test_domain"] = [int((dom_test == j).sum()) for j in range(len(split.domains))]
        out["test_acc"] = [round(float(np.mean(accs)), 3)]
        if unseen:
            from bnfl.data.domains import unseen_domain_test

            data = spec["data"]
            out["unseen_acc"] = {}
            for style in unseen:
                if style.startswith("morpho:"):  # paper profile: Morpho-MNIST under the data root
                    from pathlib import Path

                    from bnfl.data import morpho_mnist

                    x, y = morpho_mnist(Path(data_root or ".") / "morpho_mnist", style.split(":", 1)[1],
                                        size=int(data.get("size", 28)))
                else:
                    x, y = unseen_domain_test(style, data["domains"], int(data.get("seed", 0)),
                                              form=data.get("form", "image"))
                x, y = x.to(sim.x_test.device), y.to(sim.x_test.device)
                model = new_client_model([sim.client_model(c) for c in clients], x) if personal else glob
                out["unseen_acc"][style] = round(_eval(model, x, y)[0], 3)
            out["n_test_unseen"] = int(x.shape[0])
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def fedbn_run(ctx: Context, spec: Mapping[str, Any], *, unseen: Sequence[str] = ()) -> dict[str, Any]:
    """One run of ``spec`` under FedBN's protocol (module docstring), cached in ``ctx.cache``."""
    from bnfl.experiments.training import canonical

    spec = canonical(spec)
    key = {"spec": spec, "device": ctx.device, "fedbn_protocol": 1, "unseen": list(unseen)}
    if ctx.data_root is not None:
        key["data_root"] = ctx.data_root

    def compute() -> dict[str, Any]:
        return _run(spec, list(unseen), device=ctx.device, data_root=ctx.data_root)

    out = compute() if ctx.cache is None else ctx.cache.get_or_compute(key, compute)
    ctx.runs_used[config_hash(key)] = float(out.get("seconds", 0.0))
    return out


def fedbn_runs(ctx: Context, spec: Mapping[str, Any], *, unseen: Sequence[str] = ()) -> list[dict[str, Any]]:
    """:func:`fedbn_run` once per seed of ``ctx.seeds`` (the seed sets init, batches and partition)."""
    runs = []
    for s in ctx.seeds:
        one = dict(spec)
        one["seed"] = int(s)
        one["partition"] = {"seed": int(s), **dict(one["partition"])}
        runs.append(fedbn_run(ctx, one, unseen=unseen))
    return runs
