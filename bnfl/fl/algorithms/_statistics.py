"""Algorithms whose server estimates global BN statistics from client moments: HBN and FBN."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl import stats
from bnfl.grads import bn_forward
from bnfl.nn import bn_modules
from bnfl.nn.hybrid import GlobalStatsMixin

if TYPE_CHECKING:
    from bnfl.fl.context import ServerContext

from bnfl.fl.algorithms._base import Aggregated, Algorithm
from bnfl.fl.algorithms._hbn_options import (
    pool,
)
from bnfl.fl.algorithms._registry import register_algorithm
from bnfl.nn import FederatedBatchNorm1d, FederatedBatchNorm2d


def _global_stats_layers(model: nn.Module) -> list[tuple[str, _BatchNorm]]:
    """BN-type layers that normalise with server-set statistics (HBN, FBN), selected by type."""
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, _BatchNorm) and isinstance(m, GlobalStatsMixin)]


def _moments_upload(tag: str, moments: dict[str, stats.Moments]) -> dict[str, Tensor]:
    """Per-layer moments as upload tensors ``{tag}.{layer}.count/mean/var`` (counted by the channel)."""
    out = {}
    for n, mom in moments.items():
        out[f"{tag}.{n}.count"] = torch.tensor(float(mom.count), dtype=mom.mean.dtype, device=mom.mean.device)
        out[f"{tag}.{n}.mean"] = mom.mean
        out[f"{tag}.{n}.var"] = mom.var
    return out


class _ServerStatistics:
    r"""Server side shared by HBN and FBN: the global statistics are server state.

    From each client's uploaded per-layer moments (``{stats_tag}.{layer}.count/mean/var``,
    :func:`_moments_upload`) the server pools them with HBN eq. 8 (:func:`bnfl.stats.hbn_global`:
    size-weighted mean, unbiased pooled variance), applies the EMA of HBN eq. 11 with weight
    ``lam`` on the new value, :math:`\mu_g \leftarrow (1-\lambda)\mu_g + \lambda\mu`, and writes
    ``global_mean``/``global_var`` into the global state (broadcast next round; never averaged
    from uploads). The first estimate replaces the layers' placeholder (0, 1), without EMA
    (``first_estimate="blend"``: it is blended into (0, 1) with ``lam`` like every later one).
    """

    stats_tag: ClassVar[str]
    lam: float
    pooling: str = "eq8"
    first_estimate: str = "replace"

    def pooled_statistics(self, server: ServerContext, state: Mapping[str, Tensor],
                          uploads: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """Server side of HBN eqs. 8 and 11 from the clients' uploaded moments: the new
        ``global_mean``/``global_var`` entries (``state`` holds the previous ones)."""
        tag = self.stats_tag
        initialised = bool(server.state.get(f"{tag}.initialised", False))  # server state: a first estimate exists
        out = {}
        for n, _ in _global_stats_layers(server.model):
            parts = [stats.Moments(count=int(u[f"{tag}.{n}.count"].item()), mean=u[f"{tag}.{n}.mean"],
                                   var=u[f"{tag}.{n}.var"]) for u in uploads]
            mean, var = pool(parts, self.pooling)  # eq. 8, or HBN Table 6 ablation (2): no between-client term
            prefix = f"{n}." if n else ""
            old_m, old_v = state[prefix + "global_mean"], state[prefix + "global_var"]
            if not initialised and self.first_estimate == "replace":  # replaces the placeholder (0, 1)
                old_m, old_v = mean, var
            out[prefix + "global_mean"] = (1 - self.lam) * old_m + self.lam * mean  # eq. 11
            out[prefix + "global_var"] = (1 - self.lam) * old_v + self.lam * var
        return out

    def statistics_server_state(self) -> dict[str, bool]:
        """The server-state entry the aggregate after :meth:`pooled_statistics` returns: a first estimate exists."""
        return {f"{self.stats_tag}.initialised": True}

    def aggregate(self, server, state, clients, weights, uploads):
        new = Aggregated.of(super().aggregate(server, state, clients, weights, uploads), server)  # type: ignore[misc]
        new.update(self.pooled_statistics(server, state, uploads))
        new.server_state.update(self.statistics_server_state())
        return new


@register_algorithm
class FBN(_ServerStatistics, Algorithm):
    r"""FedAvg with FBN layers (Guerraoui et al. 2024, as HBN's reference code runs it; see
    :class:`bnfl.nn.FederatedBatchNorm2d`). Build the model with ``norm="fbn"``.

    Each round: clients download :math:`\{\omega_g, \mu_g, \sigma^2_g\}`, reset their FBN layers'
    running statistics, train normalising with the (constant) global statistics while each layer
    accumulates the equal-weight average of its batch means and biased batch variances, and
    upload :math:`\omega_k` with those running statistics and the client's data size
    :math:`N_k`. The server averages :math:`\omega` with :math:`N_k/N` (as FedAvg), pools the
    statistics with HBN eq. 8 (counts :math:`N_k`) and applies an EMA with weight ``lam``
    (HBN eq. 11; the first round replaces the placeholder (0, 1)). BN statistics are server
    state: broadcast, never averaged from the uploads.

    Parameters
    ----------
    lam : float, default 0.1
        EMA weight of the new pooled statistics (0.1 in HBN's FBN code).

    Notes
    -----
    HBN's code blends with the *initial* statistics (0, 1) every round (see the layer's
    docstring); bnfl blends with the previous global statistics, as HBN does for itself.
    """

    name = "fbn"
    local_state = frozenset()
    server_state = frozenset({"bn_stats"})
    stats_tag = "fbn"

    def __init__(self, *, lam: float = 0.1) -> None:
        if not (0 < lam <= 1):
            raise ValueError(f"FBN lam must be in (0, 1], got {lam!r}")
        self.lam = float(lam)

    def begin_round(self, server, r, clients, state):
        if not _fbn_layers(server.model):
            raise ValueError("FBN needs FederatedBatchNorm layers; build the model with norm='fbn'")
        return None

    def client_start(self, client, r, model):
        for _, m in _fbn_layers(model):
            m.reset_running_stats()  # this round's accumulation starts from scratch

    def extra_upload(self, client, model, steps, lr):
        return _moments_upload(self.stats_tag, {
            n: stats.Moments(count=client.size, mean=m.running_mean.detach().clone(), var=m.running_var.detach().clone())
            for n, m in _fbn_layers(model)})

    def __repr__(self) -> str:
        return f"FBN(lam={self.lam})"


def _fbn_layers(model: nn.Module) -> list[tuple[str, _BatchNorm]]:

    return [(n, m) for n, m in model.named_modules() if isinstance(m, FederatedBatchNorm1d | FederatedBatchNorm2d)]


@torch.no_grad()
def hbn_client_stats(model: nn.Module, x: Tensor) -> dict[str, stats.Moments]:
    r"""HBN eq. 7: :math:`\mu_k, \sigma^2_k = \mathcal S(\omega_g; \mathcal D_k)`, no backprop.

    One forward pass of ``x`` (all of the client's data, or a subset) through the downloaded
    global model in which every BN-type layer normalises with the batch statistics of ``x``
    itself (the hybrid factor is not used), layer by layer; returns each layer's
    :class:`~bnfl.stats.Moments` of its input (count, mean, biased variance).

    The official code computes these on the first unshuffled batch of 64 samples only; the
    equation (and the default here) uses all local data; :class:`HBN` offers a uniformly random
    subset instead (``stat_samples``).
    """
    out: dict[str, stats.Moments] = {}
    layers = bn_modules(model)
    if not layers:
        raise ValueError("HBN needs a model with BN-type (HybridBatchNorm) layers; build it with norm='hbn'")

    def patch(name: str, m: nn.Module):
        def forward(h: Tensor) -> Tensor:
            mom = stats.moments(h)
            out[name] = mom
            # weight and bias are None for affine=False layers: bn_forward then uses 1 and 0
            return bn_forward(h, m.weight, m.bias, m.eps, mom.mean, mom.var)
        return forward

    for n, m in layers:
        m.forward = patch(n, m)
    try:
        model(x)
    finally:
        for _, m in layers:
            del m.forward
    return out
