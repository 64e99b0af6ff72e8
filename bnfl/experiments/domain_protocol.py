"""FedBN's per-client evaluation protocol (FedBN Sec. 5 and App. G) as an observer of the shared
training loop (:mod:`bnfl.experiments.observers`): what :func:`bnfl.experiments.training.domain_accuracies`
reads as ``domain_acc``, for any entry that trains on domain partitions under this protocol.

:class:`FedBNProtocol` records, besides the standard summary:

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
  statistics (:func:`new_client_model`); shared-model methods use the global model.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bnfl.data import morpho_mnist
from bnfl.data.domains import unseen_domain_test
from bnfl.experiments.observers import Observer

__all__ = ["FedBNProtocol", "adaptation_split", "new_client_model", "unseen_digit5"]


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


def adaptation_split(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A new client's ``n`` samples split in two disjoint halves, seeded: ``(adapt, held)``.

    FedBN App. G gives an unseen client the averaged BN affine parameters and "the (mean, variance)
    on its own data". Here the statistics come from ``adapt`` and every method (FedBN's new client,
    FedAvg's and FedProx's global model) is scored on ``held`` only, so no test sample is
    normalised by statistics it took part in.
    """
    if n < 2:
        raise ValueError(f"an unseen domain needs at least 2 samples to split into adaptation and test, got {n}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return order[: n // 2].sort().values, order[n // 2:].sort().values


@torch.no_grad()
def _eval(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    out = model(x)
    loss = float(nn.functional.cross_entropy(out, y))
    return 100.0 * float((out.argmax(1) == y).float().mean()), loss


def unseen_digit5(style: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The data spec of the unseen Digit-5 domain ``"digit5:<name>"`` (a name of
    :data:`bnfl.data.fedbn_data.DIGIT5`) beside the run's ``data`` spec: the same share and size."""
    return {"name": "digit5", "fraction": float(data.get("fraction", 0.1)), "size": int(data.get("size", 28)),
            "domains": [style.split(":", 1)[1]]}


class FedBNProtocol(Observer):
    """FedBN's per-client protocol as an observer of the shared training loop
    (:mod:`bnfl.experiments.observers`): a round hook records ``eval_loss`` after every round's
    aggregation, and :meth:`record` adds ``domain_acc`` / ``n_test_domain`` and, with ``unseen``,
    ``unseen_acc`` / ``n_test_unseen`` (module docstring). Nothing here changes the training: the
    models are evaluated as copies, in eval mode, without gradients."""

    def __init__(self, unseen: Sequence[str] = (), *, curve: bool = True, data: Mapping[str, Any] | None = None,
                 data_root: str | None = None) -> None:
        self.unseen = [str(s) for s in unseen]
        self.curve = bool(curve)
        if self.unseen and data is None:
            raise ValueError("FedBNProtocol: unseen domains need the run spec's data entry (data=spec['data'])")
        self.data = dict(data or {})  # the run's data spec (part of the run's cache key already)
        self.data_root = data_root

    def key(self) -> dict[str, Any]:
        return {"fedbn_protocol": 2, "unseen": list(self.unseen), "eval_loss": self.curve}

    @staticmethod
    def _holding(sim: Any, c: int) -> nn.Module:
        return sim.client_model(c) if sim.algorithm.personalized else sim.global_model()

    def attach(self, sim: Any) -> None:
        if sim.algorithm.centralized or not self.curve:
            return

        def eval_loss(s: Any, r: int) -> dict[str, Any]:
            losses = []
            for c in range(s.num_clients):
                idx = torch.as_tensor(s.client_indices[c], device=s.device)
                losses.append(_eval(self._holding(s, c), s.x_train[idx], s.y_train[idx])[1])
            return {"eval_loss": float(np.mean(losses))}

        sim.round_hooks.append(eval_loss)

    def record(self, sim: Any, split: Any, history: Any, *, diverged: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"eval_loss": [round(float(r["eval_loss"]), 5) for r in history.rows if "eval_loss" in r],
                               "domains": list(split.domains or [])}
        if diverged:
            return out
        personal = sim.algorithm.personalized
        clients = range(sim.num_clients)
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
        if self.unseen:
            data = self.data
            out["unseen_acc"] = {}
            for style in self.unseen:
                if style.startswith("morpho:"):  # paper profile: Morpho-MNIST under the data root
                    x, y = morpho_mnist(Path(self.data_root or ".") / "morpho_mnist", style.split(":", 1)[1],
                                        size=int(data.get("size", 28)))
                elif style.startswith("digit5:"):  # a Digit-5 domain no client holds: its test set
                    from bnfl.experiments.training import load_data  # training imports this module

                    held_out = load_data(unseen_digit5(style, data), data_root=self.data_root)
                    x, y = held_out.x_test, held_out.y_test
                else:
                    x, y = unseen_domain_test(style, data["domains"], int(data.get("seed", 0)),
                                              form=data.get("form", "image"))
                x, y = x.to(sim.x_test.device, sim.x_test.dtype), y.to(sim.x_test.device)
                adapt, held = adaptation_split(int(x.shape[0]), int(data.get("seed", 0)))
                model = new_client_model([sim.client_model(c) for c in clients], x[adapt]) if personal else glob
                out["unseen_acc"][style] = round(_eval(model, x[held], y[held])[0], 3)
            out["n_test_unseen"] = int(held.numel())
        return out
