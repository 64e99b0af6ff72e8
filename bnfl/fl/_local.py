"""A client's local optimiser in the engine (:class:`LocalOptimizerMixin`, mixed into
:class:`bnfl.fl.Simulation`): SGD with the run's momentum and weight decay, momentum buffers kept
starting from the buffers the algorithm hands it (:meth:`Algorithm.initial_momentum
<bnfl.fl.Algorithm.initial_momentum>`: its momentum policy, e.g. FixBN's), and BN's frozen-statistics phases (FixBN Stage II, FedTAN-II phase 2)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bnfl.nn import freeze_bn_stats, unfreeze_bn_stats


class LocalOptimizerMixin:
    """The engine's optimiser helpers; they read the engine's ``config``."""

    def _set_bn_frozen(self, model: nn.Module, frozen: bool) -> None:
        """FixBN Stage II / FedTAN-II phase 2: BN normalises with its frozen running statistics
        (:func:`bnfl.nn.freeze_bn_stats`); otherwise standard training-mode BN."""
        model.train()
        if frozen:
            freeze_bn_stats(model)
        else:
            unfreeze_bn_stats(model)

    def _optimizer(self, model: nn.Module, bufs: dict[str, Tensor] | None, lr: float) -> torch.optim.Optimizer:
        """SGD over ``model``'s parameters, its momentum buffers starting from ``bufs`` (by
        parameter name; ``None``: zeros)."""
        cfg = self.config
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        if cfg.momentum > 0 and bufs:
            for n, p in model.named_parameters():
                if n in bufs:
                    opt.state[p]["momentum_buffer"] = bufs[n].clone()
        return opt

    def _momentum_of(self, model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Tensor]:
        out = {}
        for n, p in model.named_parameters():
            buf = opt.state.get(p, {}).get("momentum_buffer")
            out[n] = buf.detach().clone() if buf is not None else torch.zeros_like(p)
        return out
