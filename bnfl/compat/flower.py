"""A BN-safe wrapper around any Flower strategy (1.42 Message API).

:class:`BNSafe` wraps a strategy from :mod:`flwr.serverapp.strategy` (``FedAvg``, ``FedAdam``,
``FedYogi``, ``FedAdagrad``, ``FedProx``, ...). BN running statistics (found by layer type in the
model you pass, :func:`bnfl.compat.bn_entries`) bypass the wrapped strategy and are aggregated with
the chosen policy (:func:`bnfl.compat.aggregate_state_dicts`); every other array goes through the
wrapped strategy unchanged, so a server optimiser steps the weights and never a variance.

::

    from flwr.serverapp.strategy import FedAdam
    from bnfl.compat import bn_positions
    from bnfl.compat.flower import BNSafe

    strategy = BNSafe(FedAdam(eta=0.1), model=Net(), policy="exact",
                      positions=bn_positions(Net(), example_batch))
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=10)

How clients report counts (the ``"exact"`` policy). Each reply carries, as every Flower strategy
expects, its number of examples in its ``MetricRecord`` under the wrapped strategy's
``weighted_by_key`` (``"num-examples"`` by default). A BN layer's per-channel count is that number
times the layer's ``positions`` per example (:func:`bnfl.compat.bn_positions`: 1 after a linear
layer, ``H*W`` after a 2-d convolution). A client whose statistics cover a different count (e.g.
it ran fewer batches than it has examples) sends it in the same ``MetricRecord`` under
``"bn-count.<layer name>"``, which takes precedence.

Under ``policy="local"`` the statistics are neither aggregated nor sent back: the server's arrays
hold none, and each client keeps its own (load with ``strict=False``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from torch import nn

from bnfl.compat import POLICIES, STAT_ROLES, aggregate_state_dicts, bn_entries

__all__ = ["BNSafe", "COUNT_KEY"]

#: Prefix of a reply's optional per-layer count in its MetricRecord: ``"bn-count.<layer>"``.
COUNT_KEY = "bn-count."


class BNSafe(Strategy):
    """Route BN running statistics through a BN-safe policy, everything else through ``strategy``.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy
        The wrapped strategy (FedAvg, FedAdam, FedOpt, ...); it sees the arrays without the BN
        running statistics, in the messages it sends and in the replies it aggregates.
    model : nn.Module
        The architecture the clients train; its BN layers (by type) name the statistics' keys.
    policy : {"exact", "average", "local"}, default "exact"
        How the statistics are aggregated (:mod:`bnfl.compat`).
    positions : dict of str to int, optional
        Positions per example of each BN layer (:func:`bnfl.compat.bn_positions`); default 1.
    """

    def __init__(self, strategy: Strategy, *, model: nn.Module, policy: str = "exact",
                 positions: Mapping[str, int] | None = None) -> None:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"BNSafe wraps a flwr.serverapp.strategy.Strategy, got {type(strategy).__name__}")
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        self.strategy = strategy
        self.model = model
        self.policy = policy
        self.positions = dict(positions or {})
        entries = bn_entries(model)
        self.stat_keys = [k for k, (_, role) in entries.items() if role in STAT_ROLES]
        self.layers = sorted({layer for layer, _ in entries.values()})
        self.weight_key = getattr(strategy, "weighted_by_key", "num-examples")
        self.array_key = getattr(strategy, "arrayrecord_key", "arrays")
        self._stats: dict[str, Array] = {}  # the statistics the current round sends

    # -- what the wrapped strategy sees: the arrays without the statistics ---------------------------
    def _split(self, arrays: ArrayRecord) -> tuple[ArrayRecord, dict[str, Array]]:
        rest = ArrayRecord({k: a for k, a in arrays.items() if k not in self.stat_keys})
        return rest, {k: arrays[k] for k in self.stat_keys if k in arrays}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The wrapped strategy's messages, with the BN statistics added back to each one."""
        rest, self._stats = self._split(arrays)
        messages = list(self.strategy.configure_train(server_round, rest, config, grid))
        for msg in messages:
            record = msg.content[self.array_key]
            for k, a in self._stats.items():
                record[k] = a
        return messages

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The wrapped strategy's aggregate of the arrays without the statistics, plus the
        statistics aggregated with :attr:`policy` over the replies that carry no error."""
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        states = [{k: torch.from_numpy(np.array(a.numpy())) for k, a in m.content[self.array_key].items()}
                  for m in ok]  # read before the wrapped strategy sees the replies
        stripped = []
        for m in replies:
            if m.has_error():
                stripped.append(m)
                continue
            m2 = copy.copy(m)  # a new message with new content: the replies are left as they came
            m2.content = RecordDict({k: v for k, v in m.content.items()})
            m2.content[self.array_key] = self._split(m.content[self.array_key])[0]
            stripped.append(m2)
        arrays, metrics = self.strategy.aggregate_train(server_round, stripped)
        if arrays is None or self.policy == "local" or not self.stat_keys or not ok:
            return arrays, metrics
        weights, counts = [], []
        for m in ok:
            metric = _metrics(m)
            if self.weight_key not in metric:
                raise ValueError(f"a reply has no {self.weight_key!r} in its MetricRecord; every client must "
                                 "report its number of examples (the BN policy's weight)")
            n = float(metric[self.weight_key])
            weights.append(n)
            counts.append({layer: int(metric.get(COUNT_KEY + layer, round(n * self.positions.get(layer, 1))))
                           for layer in self.layers})
        merged = aggregate_state_dicts(states, weights, model=self.model, policy=self.policy, counts=counts)
        for k in self.stat_keys:  # the rest of merged is FedAvg's, which the wrapped strategy replaces
            arrays[k] = Array(merged[k].numpy())
        return arrays, metrics

    # -- the rest is the wrapped strategy's ---------------------------------------------------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """The wrapped strategy's evaluation messages (with the full arrays)."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The wrapped strategy's aggregate of the evaluation replies."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        """The wrapped strategy's summary."""
        self.strategy.summary()

    def __repr__(self) -> str:
        return f"BNSafe({type(self.strategy).__name__}, policy={self.policy!r})"


def _metrics(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in msg.content.metric_records.values():
        out.update(rec)
    return out
