"""Issue 37, item 5: a normalisation layer has one place, the layer registry of ``bnfl.nn.norms``.

* the batched engine (``bnfl/nn/batched.py``) keeps no list of normalisation layers of its own: it
  reads :data:`~bnfl.nn.BATCHED_LAYERS` (read with ``ast``; on 4f21679 it imported and listed GN,
  LN, IN, HBN and FBN itself, and this test failed);
* a user's layer registered with :func:`~bnfl.nn.register_batched` runs batched, equal to running
  each client alone (float64, 1e-12; outputs, gradients, running statistics; with padded batches);
* a layer not registered is refused in one line that names it and the registry; a bad
  registration is refused in one line.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from bnfl.nn import BATCHED_LAYERS, NORM_KINDS, PER_CLIENT, make_norm, register_batched
from bnfl.nn.batched import BatchedNet, batching_obstacle
from bnfl.nn.batched_layers import _BATCHED

ROOT = Path(__file__).resolve().parents[1]
NORM_LAYERS = {"GroupNorm", "LayerNorm", "InstanceNorm", "HybridBatchNorm1d", "HybridBatchNorm2d",
               "FederatedBatchNorm1d", "FederatedBatchNorm2d"}


def _names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_the_batched_engine_keeps_no_list_of_normalisation_layers():
    names = _names(ROOT / "bnfl" / "nn" / "batched.py")
    assert names & NORM_LAYERS == set()
    assert "BATCHED_LAYERS" in names


def test_the_registry_holds_bnfls_layers_and_every_kind_is_batched_or_refused_by_name():
    from bnfl.nn import FederatedBatchNorm2d, GroupNorm, HybridBatchNorm2d

    assert {GroupNorm, HybridBatchNorm2d, FederatedBatchNorm2d, nn.GroupNorm} <= set(BATCHED_LAYERS)
    for kind in NORM_KINDS:
        for dim in (1, 2):
            try:
                layer = make_norm(kind, 4, dim=dim)
            except ValueError:  # e.g. IN on linear features
                continue
            why = batching_obstacle(nn.Sequential(layer))
            assert why is None or ("BATCHED_LAYERS" in why and type(layer).__name__ in why), (kind, why)


class Mixed(nn.BatchNorm1d):
    """A BN variant with its own forward and in-place buffer updates (an HBN-like layer)."""

    def __init__(self, c: int) -> None:
        super().__init__(c)
        self.mix = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        mean, var = x.mean(0), x.var(0, unbiased=False)
        a = torch.sigmoid(self.mix)
        rm, rv = self.running_mean.clone(), self.running_var.clone()  # before the in-place update
        mu, s2 = (1 - a) * mean + a * rm, (1 - a) * var + a * rv
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * x.shape[0] / (x.shape[0] - 1), self.momentum)
            self.num_batches_tracked.add_(1)
        return (x - mu) / torch.sqrt(s2 + self.eps) * self.weight + self.bias


class Gated(nn.Module):
    """A layer holding a submodule: BN gated by a linear map of its input (per-client form)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.bn, self.gate = nn.BatchNorm1d(c), nn.Linear(c, c)

    def forward(self, x):
        return self.bn(x) * torch.sigmoid(self.gate(x))


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 6), Mixed(6), nn.ReLU(), Gated(6), nn.Linear(6, 3)).double()


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(_BATCHED, Mixed, PER_CLIENT)
    monkeypatch.setitem(_BATCHED, Gated, PER_CLIENT)


@pytest.mark.parametrize("sizes", [(7, 7, 7), (7, 4, 6)])
def test_a_registered_layer_runs_batched_equal_to_each_client_alone(registered, sizes):
    torch.manual_seed(0)
    k, n = len(sizes), max(sizes)
    models = [_model() for _ in range(k)]
    for i, m in enumerate(models):  # clients with different running statistics and mixes
        with torch.no_grad():
            m[1].running_mean.normal_()
            m[1].running_var.uniform_(0.5, 2.0)
            m[1].mix.fill_(0.3 * i - 0.2)
    states = [copy.deepcopy(m.state_dict()) for m in models]
    x = torch.randn(k * n, 5, dtype=torch.float64)
    for i, s in enumerate(sizes):  # padding rows repeat the client's first sample
        x[i * n + s:(i + 1) * n] = x[i * n]
    net = BatchedNet(models[0], states)
    net.set_mask(sizes, n)
    y = net(x)
    real = torch.cat([torch.arange(i * n, i * n + s) for i, s in enumerate(sizes)])
    y[real].square().sum().backward()  # the engine's losses average over real rows only
    for i, (m, s) in enumerate(zip(models, sizes, strict=True)):
        yi = m(x[i * n:i * n + s])
        yi.square().sum().backward()
        assert torch.allclose(y[i * n:i * n + s], yi, rtol=0, atol=1e-12)
        for name, p in m.named_parameters():
            assert torch.allclose(net.params[name].grad[i], p.grad, rtol=0, atol=1e-12), name
        for name, b in m.named_buffers():
            assert torch.allclose(net.buffers[name][i].double(), b.double(), rtol=0, atol=1e-12), name


def test_an_unregistered_layer_is_refused_in_one_line_naming_it_and_the_registry():
    why = batching_obstacle(_model())
    assert why == ("layer '1' (Mixed) is a BatchNorm variant with its own forward and is not in the layer registry's "
                   "BATCHED_LAYERS: decorate its class with @bnfl.nn.register_batched() (docs/own-fix.md, section 9)")
    with pytest.raises(ValueError, match=r"^cannot batch this model: layer '1' \(Mixed\)"):
        BatchedNet(_model(), [_model().state_dict()])


def test_a_bad_registration_is_one_line():
    with pytest.raises(ValueError, match=r"^register_batched: form must be a function form\(layer, x\) or 'per-client'"):
        register_batched(form="loop")
    with pytest.raises(ValueError, match=r"^register_batched: .* is not an nn.Module subclass$"):
        register_batched()(int)
