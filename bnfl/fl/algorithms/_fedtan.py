"""FedTAN (Algorithms 1-3), FedAvg+Algorithm 2 and FedTAN-II: a coupled first local step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

if TYPE_CHECKING:
    from bnfl.fedtan import CoupledStep

from bnfl.fl.algorithms._base import Algorithm
from bnfl.fl.algorithms._coupled import CoupledFirstStep
from bnfl.fl.algorithms._registry import register_algorithm


@register_algorithm
class FedAvgAlg2(Algorithm):
    """FedAvg+Algorithm 2 ("simplified FedDNA"): at local step 1 the forward pass uses the
    layer-wise global statistics (FedTAN eqs. 39-40), the backward the clients' own
    stat-gradients (no eq. 41). ``2L + 1`` rounds per iteration."""

    name = "fedavg+alg2"

    def coupled_step(self, r):
        return CoupledFirstStep("stats")


@register_algorithm
class FedTAN(Algorithm):
    r"""FedTAN (Wang et al., Algorithms 1-3): layer-wise statistics (eqs. 39-40) and
    stat-gradient (eq. 41) aggregation at the first local step of every iteration; steps
    2..E as FedAvg+BN. ``3L + 1`` rounds per iteration.

    The running-statistics EMA (eq. 6) of step 1 uses the global :math:`(\bar\mu, \bar\sigma^2)`
    the clients normalised with (CATALOG §0.2); ``running_var`` receives the unbiased
    :math:`\bar\sigma^2 \cdot m/(m-1)` with ``m`` the union's elements per channel, which is
    exactly what PyTorch stores after a centralized step on the union batch.

    The defaults follow the paper's equations; the two options reproduce the authors' code
    (github.com/wangyanmeng/FedTAN, see ``docs/fedtan-reference-code.md``). Both act only
    right after the coupled step 1 and leave steps 2..E and the aggregation unchanged.

    Parameters
    ----------
    first_step_momentum : {"keep", "discard"}, default "keep"
        ``"keep"``: one SGD optimizer per client and round, so with momentum :math:`\beta`
        step 2's buffer is :math:`\beta d_1 + d_2` (:math:`d_t` = gradient plus weight decay
        of step t), as for every other algorithm of the engine. ``"discard"``: the
        reference code's behaviour: step 1 runs on fresh per-layer optimizers and steps 2..E on
        a new optimizer, i.e. the momentum buffer of step 1 is dropped and step 2's buffer is
        :math:`d_2`. Identical at momentum 0.
    running_var_count : {"union", "client-batch"}, default "union"
        Unbiased correction of step 1's ``running_var`` update: ``"union"`` multiplies
        :math:`\bar\sigma^2` by :math:`m/(m-1)`, ``m`` the union's elements per channel
        (:math:`\sum_i B_i H W`); ``"client-batch"`` by :math:`B/(B-1)`, ``B`` the client's
        mini-batch size in samples (the reference code, whatever the layer's spatial size).
    """

    name = "fedtan"
    first_step_momentum: str = "keep"
    running_var_count: str = "union"
    #: ``after_step`` acts on step 1 only (the batched engine may replay steps 2.. as a CUDA graph
    #: without calling it, :mod:`bnfl.fl.device_options`)
    after_step_first_only = True

    def __init__(self, *, first_step_momentum: str = "keep", running_var_count: str = "union") -> None:
        if first_step_momentum not in ("keep", "discard"):
            raise ValueError(f"first_step_momentum must be 'keep' (bnfl) or 'discard' (reference code), "
                             f"got {first_step_momentum!r}")
        if running_var_count not in ("union", "client-batch"):
            raise ValueError(f"running_var_count must be 'union' (bnfl) or 'client-batch' (reference code), "
                             f"got {running_var_count!r}")
        self.first_step_momentum = first_step_momentum
        self.running_var_count = running_var_count

    def coupled_step(self, r):
        return CoupledFirstStep("fedtan")

    def after_step(self, client, t, model, optimizer, coupled):
        if t != 1 or coupled is None:
            return
        if self.first_step_momentum == "discard":
            optimizer.state.clear()  # SGD starts a fresh buffer (= d_2) at step 2
        if self.running_var_count == "client-batch":
            _recorrect_running_var(model, coupled, client.batch_size)  # the client's mini-batch

    def __repr__(self) -> str:
        opts = []
        if self.first_step_momentum != "keep":
            opts.append(f"first_step_momentum={self.first_step_momentum!r}")
        if self.running_var_count != "union":
            opts.append(f"running_var_count={self.running_var_count!r}")
        return f"FedTAN({', '.join(opts)})"


@torch.no_grad()
def _recorrect_running_var(model: nn.Module, coupled: CoupledStep, batch: int) -> None:
    r"""Turn step 1's ``running_var`` update from :math:`\rho\,\bar\sigma^2 m/(m-1)` into
    :math:`\rho\,\bar\sigma^2 B/(B-1)` (the reference code's correction), in place.

    The EMA is linear in the new value, so adding :math:`\rho\,\bar\sigma^2\,(B/(B-1) - m/(m-1))`
    gives the reference's update up to rounding.
    """
    if batch < 2:
        raise ValueError(f"running_var_count='client-batch' needs mini-batches of >= 2 samples, got {batch}")
    for name, m in model.named_modules():
        if name not in coupled.layer_stats or not isinstance(m, _BatchNorm) or not m.track_running_stats:
            continue
        var = coupled.layer_stats[name][1]
        count = sum(mom.count for mom in coupled.local_stats[name])  # the union's elements per channel
        rho = m.momentum if m.momentum is not None else 1.0 / float(m.num_batches_tracked)
        delta = batch / (batch - 1) - count / (count - 1)
        m.running_var.add_((rho * delta * var).to(m.running_var.dtype))


@register_algorithm
class FedTAN2(Algorithm):
    """FedTAN-II(M) (FedTAN Sec. 5.4): FedTAN for iterations ``<= M``, then BN normalises with
    the frozen statistics of iteration M (training and test) and plain FedAvg.

    Parameters
    ----------
    switch : int
        M, the last FedTAN iteration (>= 0).
    """

    name = "fedtan2"

    def __init__(self, *, switch: int = 1) -> None:
        if int(switch) != switch or switch < 0:
            raise ValueError(f"FedTAN-II switch M must be a non-negative integer, got {switch!r}")
        self.switch = int(switch)

    def coupled_step(self, r):
        return CoupledFirstStep("fedtan") if r <= self.switch else None

    def frozen_stats(self, r):
        return r > self.switch

    def __repr__(self) -> str:
        return f"FedTAN2(switch={self.switch})"
