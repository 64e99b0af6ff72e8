"""The model of the demo (:mod:`bnfl.demo`) and of the live diagnosis widgets
(:mod:`bnfl.diagnosis.interactive`): defined here, below both, so that the widgets draw the demo's
model without importing the demo."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["build_model"]


def build_model(seed: int, *, hidden: int = 32) -> nn.Module:
    """MLP 64-h-BN-ReLU-h-BN-ReLU-10 in float64, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(64, hidden),
        nn.BatchNorm1d(hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.BatchNorm1d(hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    ).double()
