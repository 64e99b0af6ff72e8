"""FedAvg and the baselines that change only what is shared or how clients step: Centralized,
SingleNet, FedProx, SCAFFOLD, FedBN, SiloBN."""

from __future__ import annotations

import torch
from torch import Tensor

from bnfl.fl.algorithms._base import Aggregated, Algorithm
from bnfl.fl.algorithms._registry import register_algorithm


@register_algorithm
class FedAvg(Algorithm):
    """FedAvg (McMahan et al.); with BN layers it is FedAvg+BN: averages w, gamma, beta and the
    running statistics (FedTAN eq. 7). The normalisation (BN/GN/LN/none) is chosen by the model."""

    name = "fedavg"


@register_algorithm
class Centralized(Algorithm):
    """Pooled-data SGD: one learner with all clients' data, batch N*B (CATALOG §0.2). No exchange."""

    name = "centralized"
    communicates = False
    centralized = True


@register_algorithm
class SingleNet(Algorithm):
    """Every client trains alone; nothing is sent; each client's model is evaluated."""

    name = "singlenet"
    local_state = frozenset({"bn_affine", "bn_stats", "local", "other"})
    communicates = False
    personalized = True


@register_algorithm
class FedProx(Algorithm):
    r"""FedAvg with the proximal term :math:`\frac{\mu}{2}\|w - w_g\|^2` (Li et al. 2020).

    Parameters
    ----------
    mu : float, default 0.01
        Proximal weight (FedBN code default 1e-2).
    """

    name = "fedprox"

    def __init__(self, *, mu: float = 0.01) -> None:
        if not mu >= 0:
            raise ValueError(f"FedProx mu must be >= 0, got {mu!r}")
        self.mu = float(mu)

    def client_start(self, client, r, model):
        client.scratch["fedprox.anchor"] = {n: p.detach().clone() for n, p in model.named_parameters()}

    def adjust_grads(self, client, model):
        anchor = client.scratch["fedprox.anchor"]
        for n, p in model.named_parameters():
            if p.grad is not None:
                p.grad.add_(p.detach() - anchor[n], alpha=self.mu)

    def __repr__(self) -> str:
        return f"FedProx(mu={self.mu})"


def momentum_steps(steps: int, momentum: float) -> float | int:
    r"""Distance, in units of :math:`\eta\,g`, that ``steps`` SGD steps with heavy-ball ``momentum``
    (buffer starting at 0) move the weights under a constant gradient :math:`g`:

    .. math:: K_\mu = \sum_{m=1}^{K} \frac{1-\mu^m}{1-\mu}
              = \frac{K - \mu(1-\mu^K)/(1-\mu)}{1-\mu}

    The denominator of SCAFFOLD's option-II control variate (Karimireddy et al. 2020, Alg. 1
    line 12) under momentum (:class:`Scaffold`). ``momentum = 0`` returns ``steps`` itself (an
    int), so plain SGD keeps the paper's :math:`K\eta` bit for bit.
    """
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    if momentum == 0:
        return steps
    mu, k = float(momentum), int(steps)
    return (k - mu * (1 - mu ** k) / (1 - mu)) / (1 - mu)


@register_algorithm
class Scaffold(Algorithm):
    r"""SCAFFOLD (Karimireddy et al. 2020), option II control variates (Alg. 1, line 12).

    Local gradient :math:`g + c - c_i`; after :math:`K` steps with rate :math:`\eta`,
    :math:`c_i^+ = c_i - c + (w_g - w_i)/(K_\mu\eta)`; the server sets
    :math:`c \leftarrow c + \frac{|S|}{N}\,\overline{\Delta c}` and averages the models.
    ``c`` is broadcast and every :math:`\Delta c_i` uploaded (counted by the channel).
    ``c`` is server state and :math:`c_i` client state (:mod:`bnfl.fl.context`).

    Option II divides the client's displacement by the distance plain SGD moves per unit of
    gradient, :math:`K\eta`, so that :math:`c_i^+` is the mean of the client's raw gradients
    :math:`g_k`. With SGD momentum :math:`\mu` (PyTorch's heavy ball, its buffer starting at 0 each
    round) the gradient of step :math:`k` moves the weights by
    :math:`\eta(1-\mu^{K-k+1})/(1-\mu)`, so the displacement is :math:`K_\mu\eta` times a
    weighted mean of the corrected gradients with
    :math:`K_\mu = \sum_{m=1}^{K}(1-\mu^m)/(1-\mu)` (:func:`momentum_steps`; :math:`K_\mu = K`
    at :math:`\mu = 0`, about :math:`K/(1-\mu)` for long rounds). Dividing by :math:`K\eta`
    instead (the paper's plain-SGD formula) inflates :math:`c_i` about :math:`1/(1-\mu)` times,
    and the correction, amplified again by the momentum, diverges (HBN Table 4 at
    :math:`\mu = 0.9`). Momentum buffers carried across rounds (``momentum_mode`` ``"local"`` or
    ``"global"``) break the zero-start assumption and are refused.
    """

    name = "scaffold"

    # State (values, never attributes): the server's ``c`` is ``server.state["scaffold.c"]``; a
    # client's ``c_i`` is ``client.state["scaffold.ci"]`` (kept across its rounds); its round's
    # start point and received ``c`` are ``client.scratch["scaffold.start"/"scaffold.c"]``.
    def _zeros(self, server) -> dict[str, Tensor]:
        # only what the server averages: a client-local parameter (HBN's alpha) gets no control
        # variate, so its change never leaves the client
        shared = set(server.upload_keys)
        return {n: torch.zeros_like(p) for n, p in server.model.named_parameters() if n in shared}

    def extra_download(self, server):
        c = server.state.get("scaffold.c") or self._zeros(server)  # zeros before the first aggregate
        return {f"scaffold.c.{n}": t for n, t in c.items()}

    def client_start(self, client, r, model):
        client.scratch["scaffold.start"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        c_recv = {n[len("scaffold.c."):]: t for n, t in client.received.items() if n.startswith("scaffold.c.")}
        client.scratch["scaffold.c"] = c_recv
        if "scaffold.ci" not in client.state:
            client.state["scaffold.ci"] = {n: torch.zeros_like(t) for n, t in c_recv.items()}

    def adjust_grads(self, client, model):
        ci, c_recv = client.state["scaffold.ci"], client.scratch["scaffold.c"]
        for n, p in model.named_parameters():
            if p.grad is not None and n in c_recv:
                p.grad.add_(c_recv[n] - ci[n])

    def extra_upload(self, client, model, steps, lr):
        ci, c_recv, start = client.state["scaffold.ci"], client.scratch["scaffold.c"], client.scratch["scaffold.start"]
        cfg = client.server.config
        momentum = float(getattr(cfg, "momentum", 0.0))
        if momentum > 0 and getattr(cfg, "momentum_mode", "reset") != "reset":
            raise ValueError(f"SCAFFOLD's control variates assume momentum buffers that start at 0 every round; "
                             f"got momentum_mode={cfg.momentum_mode!r} with momentum {momentum}: use 'reset'")
        span = momentum_steps(steps, momentum) * lr  # K*lr for plain SGD, bitwise today's formula
        new = {n: ci[n] - c_recv[n] + (start[n] - p.detach()) / span
               for n, p in model.named_parameters() if n in c_recv}
        delta = {f"scaffold.dc.{n}": new[n] - ci[n] for n in new}
        client.state["scaffold.ci"] = new
        return delta

    def aggregate(self, server, state, clients, weights, uploads):
        new = Aggregated.of(super().aggregate(server, state, clients, weights, uploads), server)
        k = len(clients)
        c = dict(server.state.get("scaffold.c") or self._zeros(server))
        for n in c:
            mean_dc = sum(u[f"scaffold.dc.{n}"] for u in uploads) / k
            c[n] = c[n] + (k / server.num_clients) * mean_dc
        new.server_state["scaffold.c"] = c  # returned with the global state (Aggregated)
        return new


@register_algorithm
class FedBN(Algorithm):
    """FedBN (Li et al. 2021, Alg. 1): BN gamma, beta and running statistics stay local;
    equal client weights (FedBN code); each client's own model is evaluated."""

    name = "fedbn"
    local_state = frozenset({"bn_affine", "bn_stats"})
    weighting = "equal"
    personalized = True


@register_algorithm
class SiloBN(Algorithm):
    """SiloBN (Andreux et al. 2020): BN statistics local, gamma/beta shared."""

    name = "silobn"
    local_state = frozenset({"bn_stats"})
    personalized = True
