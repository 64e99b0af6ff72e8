r"""BN-safe aggregation for code that is not bnfl's: a plain PyTorch loop, or any Flower strategy.

A federated server that averages ``state_dict``\ s key by key treats BN running statistics as if
they were weights. That keeps the *within-client* part of the variance and loses the
*between-client* part (FedTAN eq. 7 against eqs. 39-40; :func:`bnfl.stats.decompose`), and a
server optimiser (FedAdam, FedYogi, FedOpt) applied to the buffers can drive a variance negative.
:func:`aggregate_state_dicts` aggregates the BN entries with a named policy and everything else as
FedAvg does; :mod:`bnfl.compat.flower` does the same around any Flower strategy.

BN entries are found by layer type (``isinstance(m, nn.modules.batchnorm._BatchNorm)``, via
:func:`bnfl.nn.bn_modules`) in the model the caller passes, never by a substring of a key.

Policies for the running statistics (``running_mean``, ``running_var``, ``num_batches_tracked``)
of every BN layer; affine parameters (``weight``, ``bias``) are parameters and go with the rest:

``"exact"``
    The moments of the union of the clients' data (:func:`bnfl.stats.merge`, FedTAN eqs. 39-40,
    HBN eq. 8): each client's ``running_var`` (unbiased, as PyTorch stores it) is turned into the
    biased variance with its count :math:`n_i`, the clients are merged, and the union's unbiased
    variance is stored:

    .. math::

        \mu = \sum_i p_i \mu_i,\quad
        \hat\sigma^2 = \frac{N}{N-1}\sum_i p_i\Big[\tfrac{n_i-1}{n_i}\hat\sigma_i^2 + (\mu_i-\mu)^2\Big],
        \quad p_i = n_i/N,\ N = \sum_i n_i .

    It needs each client's per-channel count :math:`n_i` (examples times positions per example:
    ``H*W`` after a 2-d convolution, 1 after a linear layer); see ``counts`` and ``positions``.
``"average"``
    FedAvg+BN: :math:`\sum_i p_i \mu_i` and :math:`\sum_i p_i \hat\sigma_i^2` with the weights'
    shares :math:`p_i` (its variance misses the between-client term :math:`\sum_i p_i(\mu_i-\mu)^2`).
``"local"``
    The statistics are left out of the result: each client keeps its own (SiloBN; load the result
    with ``model.load_state_dict(result, strict=False)``).

Under ``"exact"`` and ``"average"`` ``num_batches_tracked`` stays an integer tensor: the largest of
the clients' counters (never a weighted average, which would make it a float).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from bnfl import stats
from bnfl.nn import bn_modules

__all__ = ["POLICIES", "aggregate_state_dicts", "bn_entries", "bn_positions", "client_counts"]

#: The policies of :func:`aggregate_state_dicts` for BN running statistics.
POLICIES = ("exact", "average", "local")
#: The BN entries whose aggregation a policy decides (the rest are averaged as weights).
STAT_ROLES = ("running_mean", "running_var", "num_batches_tracked")
_ROLES = (*STAT_ROLES, "weight", "bias")


def bn_entries(model: nn.Module) -> dict[str, tuple[str, str]]:
    """The BN entries of ``model.state_dict()``: key -> (layer name, role), found by layer type.

    ``role`` is one of ``running_mean``, ``running_var``, ``num_batches_tracked``, ``weight``,
    ``bias``; other buffers of a BN-type layer (HBN's ``global_mean``) are not listed.

    Parameters
    ----------
    model : nn.Module
        The model (or an instance of the same architecture) whose state is aggregated.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module (the architecture whose BN layers to find), "
                        f"got {type(model).__name__}")
    keys = set(model.state_dict())
    out: dict[str, tuple[str, str]] = {}
    for name, _ in bn_modules(model):
        for role in _ROLES:
            key = f"{name}.{role}" if name else role
            if key in keys:
                out[key] = (name, role)
    return out


def bn_positions(model: nn.Module, example: Tensor) -> dict[str, int]:
    """Positions per example each BN layer normalises over, measured with one forward pass.

    A BN layer's per-channel count on a batch of ``B`` examples is ``B * positions``: 1 after a
    linear layer (input ``(B, C)``), ``L`` for ``(B, C, L)``, ``H*W`` for ``(B, C, H, W)``.
    Multiply by each client's number of examples to get the counts of the ``"exact"`` policy.

    Parameters
    ----------
    model : nn.Module
        The model; it is run in eval mode under ``torch.no_grad`` (its state is unchanged).
    example : Tensor of shape (B, ...)
        Any input batch of the shape the clients train on (``B >= 1``).
    """
    seen: dict[str, int] = {}
    hooks = []
    for name, m in bn_modules(model):
        def hook(mod, inputs, output, name=name):
            x = inputs[0]
            seen[name] = x.numel() // (x.shape[0] * x.shape[1])  # (B, C, *) -> prod(*)
        hooks.append(m.register_forward_hook(hook))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(example)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    missing = [n for n, _ in bn_modules(model) if n not in seen]
    if missing:
        raise ValueError(f"BN layer(s) {missing} were not called by model(example); "
                         "pass counts= for them explicitly")
    return seen


def client_counts(num_examples: Sequence[int], positions: Mapping[str, int]) -> list[dict[str, int]]:
    """Per-client, per-layer counts ``num_examples[i] * positions[layer]`` (the ``"exact"`` policy's
    :math:`n_i`, if each client's statistics cover all its examples)."""
    return [{layer: int(n) * int(p) for layer, p in positions.items()} for n in num_examples]


def _shares(weights: Sequence[float] | Tensor, k: int) -> Tensor:
    w = torch.as_tensor([float(x) for x in weights], dtype=torch.float64)  # (K,)
    if w.numel() != k:
        raise ValueError(f"{k} client states but {w.numel()} weights; pass one weight per client")
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError(f"weights must be positive and finite (e.g. each client's number of examples), got {w.tolist()}")
    return w / w.sum()


def _average(tensors: Sequence[Tensor], p: Tensor) -> Tensor:
    """``sum_i p_i t_i`` in float64, back in the first tensor's dtype (integers rounded)."""
    ref = tensors[0]
    stacked = torch.stack([t.detach().to(torch.float64) for t in tensors])  # (K, *shape)
    acc = (p.reshape(-1, *([1] * ref.dim())) * stacked).sum(0)
    return acc.to(ref.dtype) if ref.is_floating_point() else acc.round().to(ref.dtype)


def _exact(means: Sequence[Tensor], unbiased: Sequence[Tensor], counts: Sequence[int]) -> tuple[Tensor, Tensor]:
    """Union mean and unbiased variance from the clients' running mean, unbiased variance, count."""
    parts = []
    for i, (m, v, n) in enumerate(zip(means, unbiased, counts, strict=True)):
        if n < 2:
            raise ValueError(f"client {i} has count {n} for a BN layer; the unbiased variance needs >= 2 "
                             "values per channel (check counts= or positions=)")
        parts.append(stats.Moments(count=int(n), mean=m.detach().to(torch.float64),
                                   var=v.detach().to(torch.float64) * ((n - 1) / n)))  # unbiased -> biased
    merged = stats.merge(parts)
    return merged.mean.to(means[0].dtype), merged.unbiased_var().to(unbiased[0].dtype)


def aggregate_state_dicts(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float] | Tensor, *,
                          model: nn.Module, policy: str = "exact",
                          counts: Sequence[Mapping[str, int]] | None = None,
                          positions: Mapping[str, int] | None = None) -> dict[str, Tensor]:
    """Aggregate client ``state_dict``\\ s: BN running statistics with ``policy``, the rest as FedAvg.

    Parameters
    ----------
    states : sequence of dict of str to Tensor
        One ``state_dict`` per client, all with the keys of ``model.state_dict()``.
    weights : sequence of float
        Positive client weights, e.g. numbers of examples; normalised to shares :math:`p_i`.
    model : nn.Module
        The architecture: its BN layers (found by type) say which keys are BN statistics.
    policy : {"exact", "average", "local"}, default "exact"
        How BN running statistics are aggregated (see :mod:`bnfl.compat`).
    counts : sequence of dict of str to int, optional
        ``"exact"`` only: per client, each BN layer's per-channel count :math:`n_i` (what its
        statistics were computed on). Default: ``weights[i] * positions[layer]``.
    positions : dict of str to int, optional
        Positions per example of each BN layer (:func:`bn_positions`); default 1 for every layer
        (inputs ``(B, C)``), used only when ``counts`` is not given.

    Returns
    -------
    dict of str to Tensor
        The server's state, with each entry in its clients' dtype; under ``"local"`` without the
        BN running statistics. Nothing passed in is modified.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if len(states) == 0:
        raise ValueError("aggregate_state_dicts needs at least one client state")
    p = _shares(weights, len(states))
    keys = list(states[0])
    for i, s in enumerate(states):
        if set(s) != set(keys):
            diff = sorted(set(s) ^ set(keys))[:3]
            raise ValueError(f"client state {i} has different keys from client state 0 (e.g. {diff}); "
                             "every client must send the same state_dict")
    entries = bn_entries(model)
    missing = sorted(k for k in entries if k not in keys)
    if missing:
        raise ValueError(f"the client states lack BN entries of model (e.g. {missing[:3]}); "
                         "pass the model the clients train")
    if policy == "exact" and counts is not None and len(counts) != len(states):
        raise ValueError(f"{len(states)} client states but {len(counts)} counts; pass one mapping per client")
    out: dict[str, Tensor] = {}
    for key in keys:
        layer, role = entries.get(key, ("", ""))
        column = [s[key] for s in states]
        if role not in STAT_ROLES:
            out[key] = _average(column, p)
        elif policy == "local":
            continue
        elif role == "num_batches_tracked":
            out[key] = torch.stack([c.detach() for c in column]).max(0).values.clone()
        elif policy == "average":
            out[key] = _average(column, p)
        elif role == "running_mean":
            continue  # written with its layer's running_var below
        else:  # exact, running_var: mean and variance of the union
            n = [int(c[layer]) for c in counts] if counts is not None else \
                [round(float(w) * (positions or {}).get(layer, 1)) for w in weights]
            prefix = f"{layer}." if layer else ""
            mean, var = _exact([s[prefix + "running_mean"] for s in states], column, n)
            out[prefix + "running_mean"], out[key] = mean, var
    return {k: out[k] for k in keys if k in out}  # the clients' key order
