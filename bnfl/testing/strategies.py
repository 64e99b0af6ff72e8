"""Hypothesis strategies for BN state in federated learning: client splits, BN layers, state_dicts.

A *scenario* is a model with BN layers (:class:`LayerSpec`, any names, 1-d and 2-d) and a split of
data among clients (:class:`ClientSpec`: examples, offset, scale, batches). :func:`client_states`
turns one into the clients' ``state_dict``\\ s by *running* each BN layer on the client's data, as
local training does, so the running statistics are what PyTorch stores: the client's mean and its
*unbiased* variance (``momentum=None`` over the client's batches, all equal to its data), and
``num_batches_tracked`` the number of batches. The exact aggregate of those statistics is then the
running statistics of the union of the clients' data (:func:`bnfl.compat.aggregate_state_dicts`
with ``policy="exact"``; ``tests/test_testing_check.py`` proves it).

Use them in your own tests::

    from hypothesis import given
    from bnfl.testing import strategies as bst

    @given(bst.client_state_dicts())
    def test_my_aggregation_keeps_variance_positive(case):
        out = my_aggregate(case.states, case.weights)
        ...
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.nn import bn_modules

__all__ = ["ClientSpec", "Clients", "LayerSpec", "Scenario", "bn_layers", "build_model", "client_splits",
           "client_state_dicts", "client_states", "layer_specs", "scenarios"]

#: Layer names the strategies draw from: some hold "bn", most do not (``features.3``, ``norm_a``).
LAYER_NAMES = ("bn1", "features.3", "norm_a", "layer1.0.bn2", "downsample.1", "stem.norm")


@dataclass(frozen=True)
class LayerSpec:
    """One BN layer of a drawn model: its qualified name, ``dim`` (1: BatchNorm1d, 2: BatchNorm2d,
    3: BatchNorm3d), channels, spatial shape per example (``()`` for ``(N, C)`` input) and affine."""

    name: str
    dim: int
    channels: int
    spatial: tuple[int, ...] = ()
    affine: bool = True

    @property
    def positions(self) -> int:
        """Values per channel per example (``H*W`` for 2-d, 1 for ``(N, C)``)."""
        out = 1
        for s in self.spatial:
            out *= s
        return out

    def __str__(self) -> str:
        shape = "x".join(str(s) for s in self.spatial) or "-"
        return f"{self.name} (BatchNorm{self.dim}d, C={self.channels}, positions {shape})"


@dataclass(frozen=True)
class ClientSpec:
    """One client's data: ``examples`` samples of ``offset + scale * noise`` (plus 0.5 per channel
    index), seen ``batches`` times by its BN layers (its ``num_batches_tracked``)."""

    examples: int
    offset: float
    scale: float
    batches: int = 1

    def __str__(self) -> str:
        return f"N={self.examples}, offset {self.offset:g}, scale {self.scale:g}, {self.batches} batch(es)"


@dataclass(frozen=True)
class Scenario:
    """A drawn model (its BN layers) and split (its clients), with the data's seed."""

    layers: tuple[LayerSpec, ...]
    clients: tuple[ClientSpec, ...]
    seed: int = 0
    model: nn.Module | None = field(default=None, compare=False)

    def __str__(self) -> str:
        lines = [f"{len(self.clients)} client(s): " + "; ".join(f"[{i}] {c}" for i, c in enumerate(self.clients)),
                 "BN layers: " + "; ".join(str(s) for s in self.layers), f"data seed {self.seed}"]
        return "\n".join(lines)


@dataclass
class Clients:
    """The clients' ``state_dict``\\ s of a :class:`Scenario` and what an aggregation is given.

    Attributes
    ----------
    states : list of dict of str to Tensor
        One ``state_dict`` per client.
    weights : list of int
        Each client's number of examples (Flower's ``num-examples``).
    counts : list of dict of str to int
        Per client, each BN layer's per-channel count (examples times positions).
    model : nn.Module
        The architecture (the template the states come from).
    scenario : Scenario
    """

    states: list[dict[str, Tensor]]
    weights: list[int]
    counts: list[dict[str, int]]
    model: nn.Module
    scenario: Scenario


class _Tree(nn.Module):
    """An empty container to hang layers on by dotted name."""


def build_model(layers: Sequence[LayerSpec]) -> nn.Module:
    """A module with the BN layers of ``layers`` at their dotted names and a linear layer ``fc``."""
    root = _Tree()
    for spec in layers:
        *path, leaf = spec.name.split(".")
        node = root
        for part in path:
            if not hasattr(node, part):
                node.add_module(part, _Tree())
            node = getattr(node, part)
        cls = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[spec.dim]
        node.add_module(leaf, cls(spec.channels, affine=spec.affine))
    root.add_module("fc", nn.Linear(2, 2))
    return root


def _spec_of(name: str, m: _BatchNorm, spatial: tuple[int, ...]) -> LayerSpec:
    dim = {nn.BatchNorm1d: 1, nn.BatchNorm2d: 2, nn.BatchNorm3d: 3}.get(type(m), 2 if len(spatial) == 2 else 1)
    return LayerSpec(name=name, dim=dim, channels=int(m.num_features), spatial=spatial, affine=bool(m.affine))


_SIDE = st.integers(1, 3)
#: Spatial shapes per example by BN dimension: (N, C) or (N, C, L) for 1-d, (N, C, H, W) for 2-d.
_SPATIAL = {1: st.one_of(st.just(()), st.tuples(_SIDE)), 2: st.tuples(_SIDE, _SIDE), 3: st.tuples(_SIDE, _SIDE, _SIDE)}


def _spatial(dim: int) -> st.SearchStrategy[tuple[int, ...]]:
    return _SPATIAL[dim]


_DIMS, _CHANNELS, _SEEDS = st.sampled_from([1, 2]), st.integers(1, 3), st.integers(0, 2**16)


@functools.cache
def _names(names: tuple[str, ...], max_layers: int) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(names), min_size=1, max_size=max_layers, unique=True)


@st.composite
def layer_specs(draw, names: Sequence[str] = LAYER_NAMES, *, max_layers: int = 3) -> list[LayerSpec]:
    """1 to ``max_layers`` BN layers with distinct names from ``names``, 1-d or 2-d, 1-3 channels."""
    chosen = draw(_names(tuple(names), int(max_layers)))
    out = []
    for name in chosen:
        dim = draw(_DIMS)
        out.append(LayerSpec(name=name, dim=dim, channels=draw(_CHANNELS), spatial=draw(_spatial(dim)),
                             affine=draw(st.booleans())))
    return out


def bn_layers(names: Sequence[str] = LAYER_NAMES, *, max_layers: int = 3) -> st.SearchStrategy[nn.Module]:
    """Models (:func:`build_model`) with 1 to ``max_layers`` BN layers named from ``names``."""
    return layer_specs(names, max_layers=max_layers).map(build_model)


def client_splits(*, min_clients: int = 1, max_clients: int = 4, max_examples: int = 6) -> st.SearchStrategy[tuple[ClientSpec, ...]]:
    """Splits among ``min_clients``-``max_clients`` clients: 2 to ``max_examples`` examples each,
    offsets in [-5, 5], scales in [0.05, 3], 1-3 batches."""
    return _splits(int(min_clients), int(max_clients), int(max_examples))


@functools.cache
def _splits(min_clients: int, max_clients: int, max_examples: int) -> st.SearchStrategy[tuple[ClientSpec, ...]]:
    """Built once per arguments: building a strategy costs more than drawing from it."""
    client = st.builds(ClientSpec, examples=st.integers(2, max_examples),
                       offset=st.floats(-5, 5, allow_nan=False).map(lambda v: round(v, 2)),
                       scale=st.floats(0.05, 3, allow_nan=False).map(lambda v: round(v, 2)),
                       batches=st.integers(1, 3))
    return st.lists(client, min_size=min_clients, max_size=max_clients).map(tuple)


@st.composite
def scenarios(draw, model: nn.Module | None = None, *, min_clients: int = 1, max_clients: int = 4) -> Scenario:
    """A model and a split: ``model``'s BN layers (found by type; spatial sizes drawn), or drawn
    layers (:func:`layer_specs`) when ``model`` is None."""
    if model is None:
        layers = tuple(draw(layer_specs()))
    else:
        found = bn_modules(model)
        if not found:
            raise ValueError(f"model {type(model).__name__} has no BN layer (nn.modules.batchnorm._BatchNorm)")
        dims = {nn.BatchNorm1d: 1, nn.BatchNorm2d: 2, nn.BatchNorm3d: 3}
        layers = tuple(_spec_of(n, m, draw(_spatial(dims.get(type(m), 2)))) for n, m in found)
    split = draw(client_splits(min_clients=min_clients, max_clients=max_clients))
    return Scenario(layers=layers, clients=split, seed=draw(_SEEDS), model=model)


def client_states(scenario: Scenario) -> Clients:
    """The clients' ``state_dict``\\ s of ``scenario``, made by running its BN layers on their data.

    Each client starts from the template's state; its parameters (and BN affine parameters) move
    by a small random step (local training), and each BN layer is run in training mode with
    ``momentum=None`` on the client's data ``batches`` times: ``running_mean`` is the data's mean,
    ``running_var`` its unbiased variance and ``num_batches_tracked`` the batches. Deterministic
    in ``scenario.seed``.
    """
    model = scenario.model if scenario.model is not None else build_model(scenario.layers)
    template = model.state_dict()
    modules = dict(model.named_modules())
    gen = torch.Generator().manual_seed(scenario.seed)
    states, counts = [], []
    for client in scenario.clients:
        state = {k: v.detach().clone() for k, v in template.items()}
        for k, v in state.items():
            if v.is_floating_point() and k not in _buffers(modules):
                state[k] = v + 0.1 * torch.randn(v.shape, generator=gen, dtype=v.dtype)
        count = {}
        for spec in scenario.layers:
            x = client_batch(client, spec, gen, state_dtype(template, spec))  # (N, C, *spatial)
            prefix = f"{spec.name}."
            if prefix + "running_mean" in state:
                mean, var, seen = run_statistics(x, batches=client.batches, eps=modules[spec.name].eps)
                state[prefix + "running_mean"], state[prefix + "running_var"] = mean, var
                if prefix + "num_batches_tracked" in state:
                    state[prefix + "num_batches_tracked"] = seen
            count[spec.name] = client.examples * spec.positions
        states.append(state)
        counts.append(count)
    return Clients(states=states, weights=[c.examples for c in scenario.clients], counts=counts, model=model,
                   scenario=scenario)


def state_dtype(template: Mapping[str, Tensor], spec: LayerSpec) -> torch.dtype:
    """The dtype of ``spec``'s running mean in ``template`` (the data is drawn in it)."""
    t = template.get(f"{spec.name}.running_mean")
    return t.dtype if t is not None else torch.get_default_dtype()


def _buffers(modules: Mapping[str, nn.Module]) -> set[str]:
    out = set()
    for name, m in modules.items():
        for b, _ in m.named_buffers(recurse=False):
            out.add(f"{name}.{b}" if name else b)
    return out


def client_batch(client: ClientSpec, spec: LayerSpec, gen: torch.Generator, dtype: torch.dtype) -> Tensor:
    """A client's input to a BN layer: ``offset + 0.5 * channel + scale * noise``, shape ``(N, C, *spatial)``."""
    x = torch.randn((client.examples, spec.channels, *spec.spatial), generator=gen, dtype=dtype)
    channel = 0.5 * torch.arange(spec.channels, dtype=dtype).reshape(1, -1, *([1] * len(spec.spatial)))
    return client.offset + channel + client.scale * x


def run_statistics(x: Tensor, *, batches: int = 1, eps: float = 1e-5, mean: Tensor | None = None,
                   var: Tensor | None = None, seen: Tensor | None = None,
                   momentum: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """BN's running-statistics update in training mode, ``batches`` times on ``x`` (PyTorch's own
    ``torch.nn.functional.batch_norm``, as ``nn.BatchNorm*d.forward`` calls it).

    From ``mean``/``var``/``seen`` (default: a fresh layer, 0, 1, 0) with ``momentum``; ``None``
    is the cumulative average (factor ``1/num_batches_tracked``), which over equal batches gives
    the data's mean and unbiased variance. Returns the new ``(running_mean, running_var,
    num_batches_tracked)``.
    """
    c = x.shape[1]
    mean = torch.zeros(c, dtype=x.dtype) if mean is None else mean.clone()
    var = torch.ones(c, dtype=x.dtype) if var is None else var.clone()
    seen = torch.tensor(0, dtype=torch.long) if seen is None else seen.clone()
    with torch.no_grad():
        for _ in range(batches):
            seen += 1
            factor = 1.0 / float(seen) if momentum is None else momentum
            F.batch_norm(x, mean, var, None, None, True, factor, eps)
    return mean, var, seen


def client_state_dicts(model: nn.Module | None = None, *, min_clients: int = 1,
                       max_clients: int = 4) -> st.SearchStrategy[Clients]:
    """:class:`Clients` (states, weights, counts) of drawn scenarios (:func:`scenarios`)."""
    return scenarios(model, min_clients=min_clients, max_clients=max_clients).map(client_states)
