"""FL solvers that HBN's Table 4 plugs HBN into: FedAdam, MOON, FedSAM, FedACG, FedWon.

Each is an :class:`~bnfl.fl.algorithms.Algorithm` whose changes live in its hooks (local loss,
gradient adjustment, server update), so it composes with any normalisation the model carries
(BN, GN, LN, none, HBN through ``HBN(solver=...)``). Only trainable parameters take part in the
solvers' extra updates; buffers (BN running statistics) are averaged as FedAvg does.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from bnfl.fl.algorithms._base import Aggregated, Algorithm
from bnfl.fl.algorithms._registry import register_algorithm

if TYPE_CHECKING:
    from bnfl.fl.context import ServerContext

#: What a server optimiser (FedAdam, FedACG) updates: ``"parameters"`` the shared trainable
#: parameters (buffers are averaged, as FedAvg does); ``"all"`` every floating entry the server
#: averages, BN running statistics included (as the FedACG authors' code does: its server
#: momentum runs over the whole ``state_dict``). HBN Sec. 4.2 (Table 4) reports that the server
#: updates of FedAdam and FedACG "conflict" with BN's statistics and uses GN for them.
SERVER_SCOPES = ("parameters", "all")


def _check_scope(owner: str, scope: str) -> str:
    if scope not in SERVER_SCOPES:
        raise ValueError(f"{owner} scope must be one of {SERVER_SCOPES}, got {scope!r}")
    return scope


def _shared_params(server: ServerContext) -> list[str]:
    """Names of the model's trainable parameters that the server averages (not client-local)."""
    keys = set(server.upload_keys)
    return [n for n, _ in server.model.named_parameters() if n in keys]


def _server_keys(server: ServerContext, state: Mapping[str, Tensor], scope: str) -> list[str]:
    """The entries a server optimiser updates under ``scope`` (:data:`SERVER_SCOPES`)."""
    if scope == "parameters":
        return _shared_params(server)
    frozen = set(server.groups["bn_stats"]) if server.frozen else set()  # kept bit-exact by the average too
    return [k for k in server.upload_keys if k not in frozen and state[k].is_floating_point()]


@register_algorithm
class FedAdam(Algorithm):
    r"""FedAdam (Reddi et al., ICLR 2021, *Adaptive Federated Optimization*, Alg. 2).

    The server treats the averaged update as a pseudo-gradient,
    :math:`\Delta = \sum_k p_k w_k - w_g`, and applies Adam to it per coordinate:

    .. math:: m \leftarrow \beta_1 m + (1-\beta_1)\Delta,\qquad
              v \leftarrow \beta_2 v + (1-\beta_2)\Delta^2,\qquad
              w_g \leftarrow w_g + \eta\,\frac{m}{\sqrt v + \tau}

    with :math:`m_0 = 0` and :math:`v_0 = \tau^2` (Alg. 2 asks :math:`v_{-1} \ge \tau^2`), no bias
    correction. Clients run plain local SGD. By default only the shared parameters go through
    Adam and buffers are averaged (``scope``).

    Parameters
    ----------
    server_lr : float, default 0.01
        :math:`\eta` (the paper tunes it on a grid; 0.01 is an assumption of bnfl).
    beta1, beta2 : float, default 0.9, 0.99
        The paper's values.
    tau : float, default 1e-3
        Adaptivity :math:`\tau` (the paper's default).
    scope : {"parameters", "all"}, default "parameters"
        What Adam updates (:data:`SERVER_SCOPES`); ``"all"`` also runs BN's running statistics
        through Adam (a running variance can then turn negative: HBN's "crash" with BN).
    """

    name = "fedadam"

    def __init__(self, *, server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3,
                 scope: str = "parameters") -> None:
        for label, v, lo, hi in (("server_lr", server_lr, 0, math.inf), ("beta1", beta1, 0, 1), ("beta2", beta2, 0, 1),
                                 ("tau", tau, 0, math.inf)):
            if not (lo <= v < hi) or (label in ("server_lr", "tau") and v <= 0):
                raise ValueError(f"FedAdam {label} must be in {'(0, inf)' if hi == math.inf else '[0, 1)'}, got {v!r}")
        self.server_lr, self.beta1, self.beta2, self.tau = float(server_lr), float(beta1), float(beta2), float(tau)
        self.scope = _check_scope("FedAdam", scope)

    def aggregate(self, server, state, clients, weights, uploads):
        new = Aggregated.of(super().aggregate(server, state, clients, weights, uploads), server)  # FedAvg's average
        ms, vs = dict(server.state.get("fedadam.m") or {}), dict(server.state.get("fedadam.v") or {})  # server state
        for n in _server_keys(server, state, self.scope):
            delta = new[n] - state[n]
            m = ms.get(n, torch.zeros_like(delta))
            v = vs.get(n, torch.full_like(delta, self.tau ** 2))
            m = self.beta1 * m + (1 - self.beta1) * delta
            v = self.beta2 * v + (1 - self.beta2) * delta * delta
            ms[n], vs[n] = m, v
            new[n] = state[n] + self.server_lr * m / (v.sqrt() + self.tau)
        new.server_state["fedadam.m"], new.server_state["fedadam.v"] = ms, vs  # returned (Aggregated)
        return new

    def __repr__(self) -> str:
        extra = "" if self.scope == "parameters" else f", scope={self.scope!r}"
        return f"FedAdam(server_lr={self.server_lr}, beta1={self.beta1}, beta2={self.beta2}, tau={self.tau}{extra})"


def _head(model: nn.Module) -> nn.Linear:
    heads = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not heads:
        raise ValueError("MOON needs the model's representation: the input of its last nn.Linear layer, and this "
                         "model has no nn.Linear")
    return heads[-1]


def representation(model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """``(output, z)``: the model's output on ``x`` and its representation ``z``, the flattened
    input of the model's last ``nn.Linear`` (MOON's :math:`z`; shape (N, D))."""
    box: list[Tensor] = []
    handle = _head(model).register_forward_pre_hook(lambda _m, args: box.append(args[0]))
    try:
        out = model(x)
    finally:
        handle.remove()
    return out, box[-1].flatten(1)


def moon_contrastive_loss(z: Tensor, z_glob: Tensor, z_prev: Tensor, temperature: float) -> Tensor:
    r"""MOON's model-contrastive loss (Li, He, Song, CVPR 2021, eq. 3), batch mean:

    .. math:: \ell_{con} = -\log\frac{e^{\mathrm{sim}(z, z_{glob})/\tau}}
              {e^{\mathrm{sim}(z, z_{glob})/\tau} + e^{\mathrm{sim}(z, z_{prev})/\tau}}

    with cosine similarity; ``z_glob`` and ``z_prev`` are constants (no gradient).
    """
    pos = nn.functional.cosine_similarity(z, z_glob.detach(), dim=1) / temperature  # (N,)
    neg = nn.functional.cosine_similarity(z, z_prev.detach(), dim=1) / temperature
    return (torch.logsumexp(torch.stack([pos, neg], dim=1), dim=1) - pos).mean()


@register_algorithm
class MOON(Algorithm):
    r"""MOON (Li, He, Song, CVPR 2021, *Model-Contrastive Federated Learning*).

    Local loss :math:`\ell_{CE} + \mu\,\ell_{con}` (:func:`moon_contrastive_loss`), with the
    representation :math:`z` of the local model, :math:`z_{glob}` of the model downloaded this
    round and :math:`z_{prev}` of the client's own model at the end of its previous
    participation (the downloaded model at its first). The server averages as FedAvg.

    The representation is the input of the model's last ``nn.Linear`` (MOON adds a projection
    head; bnfl uses the model's own penultimate features). The two frozen models are copies run
    under ``no_grad``; by default in eval mode, as the authors' code does (github.com/QinbinLi/MOON,
    ``main.py``: ``global_model.eval()`` and ``net.eval()`` for the pool of previous models), so a
    BN layer normalises with the running statistics the model was sent or left with and no buffer
    moves. ``frozen_mode="train"`` normalises them with the batch's statistics instead, as the
    local model does (their buffers then move on the copies only, never reaching any state).

    Parameters
    ----------
    mu : float, default 1.0
        Weight of the contrastive term (MOON uses 5 on CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet).
    temperature : float, default 0.5
        :math:`\tau` (MOON's value).
    frozen_mode : {"eval", "train"}, default "eval"
        Mode of the frozen global and previous models' forward passes.
    """

    name = "moon"

    def __init__(self, *, mu: float = 1.0, temperature: float = 0.5, frozen_mode: str = "eval") -> None:
        if not mu >= 0:
            raise ValueError(f"MOON mu must be >= 0, got {mu!r}")
        if not temperature > 0:
            raise ValueError(f"MOON temperature must be > 0, got {temperature!r}")
        if frozen_mode not in ("eval", "train"):
            raise ValueError(f"MOON frozen_mode must be 'eval' or 'train', got {frozen_mode!r}")
        self.mu, self.temperature, self.frozen_mode = float(mu), float(temperature), frozen_mode

    # The client's model at the end of its previous participation is client state
    # (``client.state["moon.previous"]``); the two frozen models are the round's scratch.
    def client_start(self, client, r, model):
        if self.mu == 0:
            return
        glob, prev = copy.deepcopy(model), copy.deepcopy(model)
        if "moon.previous" in client.state:
            prev.load_state_dict(client.state["moon.previous"])
        for m in (glob, prev):
            m.train(self.frozen_mode == "train")
            m.requires_grad_(False)
        client.scratch["moon.global"], client.scratch["moon.previous"] = glob, prev

    def local_loss(self, client, model, x, y):
        if self.mu == 0:
            return client.loss_fn(model(x), y)
        out, z = representation(model, x)
        with torch.no_grad():
            _, z_glob = representation(client.scratch["moon.global"], x)
            _, z_prev = representation(client.scratch["moon.previous"], x)
        return client.loss_fn(out, y) + self.mu * moon_contrastive_loss(z, z_glob, z_prev, self.temperature)

    def extra_upload(self, client, model, steps, lr):
        if self.mu > 0:
            client.state["moon.previous"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {}

    def __repr__(self) -> str:
        extra = "" if self.frozen_mode == "eval" else f", frozen_mode={self.frozen_mode!r}"
        return f"MOON(mu={self.mu}, temperature={self.temperature}{extra})"


@register_algorithm
class FedSAM(Algorithm):
    r"""FedSAM (Qu et al., ICML 2022, *Generalized Federated Learning via Sharpness Aware
    Minimization*; Caldarola et al., ECCV 2022): every local step is a SAM step (Foret et al. 2021).

    With :math:`g = \nabla L(w)` on the batch, :math:`\epsilon = \rho\,g/\lVert g\rVert_2` (the norm
    over all trainable parameters), the step uses :math:`\nabla L(w+\epsilon)` at :math:`w`. The
    normalisation buffers (BN running statistics) are updated by the first forward pass only.
    The loss recorded in the history is :math:`L(w+\epsilon)`. The server averages as FedAvg.

    Parameters
    ----------
    rho : float, default 0.05
        Neighbourhood radius (SAM's default; ``0`` is FedAvg exactly).
    """

    name = "fedsam"

    def __init__(self, *, rho: float = 0.05) -> None:
        if not rho >= 0:
            raise ValueError(f"FedSAM rho must be >= 0, got {rho!r}")
        self.rho = float(rho)

    def local_loss(self, client, model, x, y):
        loss = client.loss_fn(model(x), y)
        if self.rho == 0:
            return loss
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        pairs = [(p, g) for p, g in zip(params, grads, strict=True) if g is not None]
        norm = torch.sqrt(sum((g * g).sum() for _, g in pairs))  # type: ignore[arg-type]
        scale = self.rho / (norm + 1e-12)
        with torch.no_grad():
            eps = client.scratch["fedsam.eps"] = [(p, g * scale) for p, g in pairs]  # this step's perturbation
            for p, e in eps:
                p.add_(e)
        # The second forward runs on copies of every buffer, so the running statistics move once
        # per step; the originals are put back by reference (never written in place: the
        # backward pass may hold them).
        saved = [(m, name, b) for m in model.modules() for name, b in m._buffers.items() if b is not None]
        for m, name, b in saved:
            m._buffers[name] = b.clone()
        try:
            perturbed = client.loss_fn(model(x), y)
        finally:
            for m, name, b in saved:
                m._buffers[name] = b
        return perturbed

    def adjust_grads(self, client, model):
        with torch.no_grad():  # back to w: the optimizer steps from w with the gradient at w + eps
            for p, e in client.scratch.pop("fedsam.eps", []):
                p.sub_(e)

    def __repr__(self) -> str:
        return f"FedSAM(rho={self.rho})"


@register_algorithm
class FedACG(Algorithm):
    r"""FedACG (Kim, Kim, Ham, CVPR 2024, *Communication-Efficient Federated Learning with
    Accelerated Client Gradient*, Alg. 1).

    The server broadcasts the lookahead :math:`\tilde w = w_g + \lambda m`; each client minimises
    :math:`L_k(w) + \frac{\beta}{2}\lVert w - \tilde w\rVert^2` from :math:`\tilde w`; the server
    sets :math:`\Delta = \sum_k p_k (w_k - \tilde w)`, :math:`m \leftarrow \lambda m + \Delta`,
    :math:`w_g \leftarrow w_g + m` (which equals :math:`\sum_k p_k w_k`). By default only the
    shared parameters carry momentum and buffers are averaged (``scope``); the regulariser acts on
    the trainable parameters. :math:`\lambda = \beta = 0` is FedAvg.

    This algebra is the one of the authors' code (github.com/geehokim/FedACG: ``ServerM`` with
    ``FedACG: True`` and the trainer's lookahead; checked by reading it, 2026-11), which differs
    from bnfl in three details: it averages clients uniformly (bnfl: by size, :math:`p_k`, as its
    FedAvg); its momentum runs over the whole ``state_dict`` (``scope="all"`` here); its client
    loss adds ``1e-3 * sum((w - w~)**2)``, i.e. :math:`\beta/2 = 10^{-3}` (``beta=0.002`` here).

    Parameters
    ----------
    lam : float, default 0.85
        Server momentum :math:`\lambda` (the paper's value; the authors' ``configs/server/FedACG.yaml``).
    beta : float, default 0.001
        Weight :math:`\beta` of the client's regulariser :math:`\frac{\beta}{2}\lVert w - \tilde w\rVert^2`
        (given as the paper's value; the paper's text was not at hand to check it: the authors'
        code's weight is ``beta=0.002`` in this form, see above).
    scope : {"parameters", "all"}, default "parameters"
        What carries momentum and is looked ahead (:data:`SERVER_SCOPES`).
    """

    name = "fedacg"

    def __init__(self, *, lam: float = 0.85, beta: float = 0.001, scope: str = "parameters") -> None:
        if not 0 <= lam < 1:
            raise ValueError(f"FedACG lam must be in [0, 1), got {lam!r}")
        if not beta >= 0:
            raise ValueError(f"FedACG beta must be >= 0, got {beta!r}")
        self.lam, self.beta = float(lam), float(beta)
        self.scope = _check_scope("FedACG", scope)

    # Server state: the momentum ``server.state["fedacg.m"]`` and the round's keys
    # ``"fedacg.keys"``; a client's anchor (the lookahead it received) is its round's scratch.
    def begin_round(self, server, r, clients, state):
        ms, look = server.state.get("fedacg.m") or {}, {}
        keys = _server_keys(server, state, self.scope)
        for n in keys:
            w = state[n]
            if n in ms and self.lam > 0:
                look[n] = w + self.lam * ms[n]  # the lookahead is what is broadcast
        server.state["fedacg.keys"] = keys
        return look

    def client_start(self, client, r, model):
        if self.beta > 0:  # the regulariser acts on the shared trainable parameters (in every scope)
            shared = set(_shared_params(client.server))
            client.scratch["fedacg.anchor"] = {n: p.detach().clone() for n, p in model.named_parameters() if n in shared}

    def adjust_grads(self, client, model):
        if self.beta == 0:
            return
        anchor = client.scratch["fedacg.anchor"]
        for n, p in model.named_parameters():
            if p.grad is not None and n in anchor:
                p.grad.add_(p.detach() - anchor[n], alpha=self.beta)

    def aggregate(self, server, state, clients, weights, uploads):
        new = Aggregated.of(super().aggregate(server, state, clients, weights, uploads), server)
        ms = dict(server.state.get("fedacg.m") or {})
        for n in server.state.get("fedacg.keys", ()):
            delta = new[n] - state[n]  # ``state`` holds the lookahead that was broadcast
            ms[n] = self.lam * ms.get(n, torch.zeros_like(state[n])) + delta
            # w_g + m = (w_g + lam m_old) + delta = the average itself: the global state keeps it
        new.server_state["fedacg.m"] = ms  # returned (Aggregated)
        return new

    def __repr__(self) -> str:
        extra = "" if self.scope == "parameters" else f", scope={self.scope!r}"
        return f"FedACG(lam={self.lam}, beta={self.beta}{extra})"


def adaptive_clip_(params: list[nn.Parameter], clip: float, eps: float = 1e-3) -> None:
    r"""Adaptive gradient clipping, in place (Brock et al., ICML 2021, *High-Performance
    Large-Scale Image Recognition Without Normalization*, eq. 3), unit-wise:

    .. math:: G_i \leftarrow \lambda\,\frac{\max(\lVert W_i\rVert, \epsilon)}{\lVert G_i\rVert}\,G_i
              \quad\text{if}\quad \frac{\lVert G_i\rVert}{\max(\lVert W_i\rVert, \epsilon)} > \lambda

    for each output unit :math:`i`: a row of a weight matrix, an output channel of a kernel; a
    vector or scalar parameter (bias, gain) is one unit, clipped by its whole norm, as NF-Nets'
    ``unitwise_norm`` does (deepmind-research ``nfnets/optim.py``; timm ``utils/agc.py`` alike).
    A unit whose :math:`\lVert G_i\rVert` does not exceed the threshold is left bit-exact.
    """
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            g, w = p.grad, p.detach()
            dims = tuple(range(1, g.dim())) if g.dim() > 1 else None  # None: the whole tensor
            w_norm = torch.linalg.vector_norm(w, dim=dims, keepdim=True).clamp_min(eps)
            g_norm = torch.linalg.vector_norm(g, dim=dims, keepdim=True)
            limit = clip * w_norm
            factor = torch.where(g_norm > limit, limit / g_norm.clamp_min(1e-30), torch.ones_like(g_norm))
            g.mul_(factor)


@register_algorithm
class FedWon(Algorithm):
    r"""FedWon (Zhuang & Lyu, ICLR 2024, *FedWon: Triumphing Multi-domain Federated Learning
    Without Normalization*): FedAvg on a model without normalisation layers whose convolutions
    use scaled weight standardisation (build it with ``norm="ws"``:
    :class:`bnfl.nn.ScaledWSConv2d`), with adaptive gradient clipping
    (:func:`adaptive_clip_`) on every local step. The last linear layer (the classifier) is not
    clipped, as NF-Nets do. With any other norm it is FedAvg + AGC (e.g. HBN + AGC).

    Parameters
    ----------
    clip : float, default 0.1
        AGC threshold :math:`\lambda` (an assumption: FedWon tunes it; NF-Nets use 0.01 at batch
        4096 and larger values for smaller batches). ``inf`` disables clipping (FedAvg).
    """

    name = "fedwon"

    def __init__(self, *, clip: float = 0.1) -> None:
        if not clip > 0:
            raise ValueError(f"FedWon clip must be > 0 (inf disables clipping), got {clip!r}")
        self.clip = float(clip)

    def adjust_grads(self, client, model):
        if math.isinf(self.clip):
            return
        head = set(_head(model).parameters()) if any(isinstance(m, nn.Linear) for m in model.modules()) else set()
        adaptive_clip_([p for p in model.parameters() if p not in head], self.clip)

    def __repr__(self) -> str:
        return f"FedWon(clip={self.clip})"
