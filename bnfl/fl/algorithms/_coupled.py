r"""A coupled first local step, owned by the algorithm and run by any backend with its own exchange.

An algorithm that couples its clients inside a local step (FedTAN, FedTAN-II, FedAvg+Algorithm 2)
returns a :class:`CoupledFirstStep` from :meth:`Algorithm.coupled_step(r)
<bnfl.fl.Algorithm.coupled_step>`. A backend never asks which kind it is: it draws the clients'
first mini-batches and calls :meth:`CoupledFirstStep.run` with the
:data:`~bnfl.fedtan.Exchange` it supplies, as PyTorch's ``SyncBatchNorm`` takes its process group
as an argument:

* the simulator: the channel's all-reduce (:func:`bnfl.fl.coupled.channel_exchange`);
* ``torch.distributed``: ``all_reduce`` over the group (:mod:`bnfl.fl.distributed`); a rank
  without participants joins each of :meth:`CoupledFirstStep.exchanges` with zeros;
* the batched engine: the stacked form, when :attr:`CoupledFirstStep.backward_is_autograd`
  (:mod:`bnfl.fl.batched`);
* Flower: an exchange that refuses, naming the way out (:func:`bnfl.fl.flower_setup.flower_exchange`).

The math is :func:`bnfl.fedtan.coupled_step` (FedTAN eqs. 39-41).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.fedtan import CoupledStep, Exchange, coupled_step

__all__ = ["CoupledFirstStep"]


@dataclass(frozen=True)
class CoupledFirstStep:
    r"""Step 1 of a round with the BN layers coupled across the round's clients.

    Parameters
    ----------
    aggregate : {"fedtan", "stats"}
        ``"fedtan"``: FedTAN Algorithms 2 + 3 (global statistics in the forward, eqs. 39-40,
        and averaged stat-gradients in the backward, eq. 41); ``"stats"``: Algorithm 2 only
        (FedAvg+Algorithm 2: the clients' own stat-gradients).
    """

    aggregate: str = "fedtan"

    def __post_init__(self) -> None:
        if self.aggregate not in ("fedtan", "stats"):
            raise ValueError(f"a coupled first step aggregates 'fedtan' (Algorithms 2 + 3) or 'stats' "
                             f"(Algorithm 2), got {self.aggregate!r}")

    @property
    def name(self) -> str:
        """The label of the history's ``coupled_first_step`` field."""
        return self.aggregate

    @property
    def backward_is_autograd(self) -> bool:
        r"""Whether the backward's exchange (eq. 41) is the autograd of the forward's all-reduce, so
        a stacked computation of all clients may run the step as one forward and backward of
        :math:`\sum_i p_i F_i` (FedTAN); Algorithm 2's local stat-gradients are not."""
        return self.aggregate == "fedtan"

    def exchanges(self, model: nn.Module) -> list[tuple[str, str, int]]:
        """``(layer, kind, width)`` of every exchange of the step, in order: per BN layer the means
        and the variances (width C) in the forward, then, for FedTAN, the stat-gradients (width
        2C) in the backward, last layer first."""
        bns = [(n, m.num_features) for n, m in model.named_modules() if isinstance(m, _BatchNorm)]
        out = [(n, kind, c) for n, c in bns for kind in ("mean", "var")]
        if self.aggregate == "fedtan":
            out += [(n, "stat-grads", 2 * c) for n, c in reversed(bns)]
        return out

    def run(self, model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]],
            loss_fn: Callable[[Tensor, Tensor], Tensor], weights: Sequence[float] | Tensor, *,
            exchange: Exchange) -> CoupledStep:
        """Per-client gradients, losses and statistics of the step (:func:`bnfl.fedtan.coupled_step`),
        every statistics exchange through ``exchange``; ``model`` is left unchanged."""
        return coupled_step(model, batches, loss_fn, weights=weights, aggregate=self.aggregate,  # type: ignore[arg-type]
                            exchange=exchange)
