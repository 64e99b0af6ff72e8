"""What both Flower apps are built from: :class:`FlowerSetup` (one run's model, data, algorithm
and config), :func:`bnfl.train.config.setup_from_config` (the same builder as ``bnfl train``) and the check of a
node's samples (:func:`samples_crc`). The apps themselves: :mod:`bnfl.fl.flower` (server) and
:mod:`bnfl.fl.flower_client` (client)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Context
from torch import Tensor, nn

from bnfl.fl._evaluate import _cross_entropy
from bnfl.fl._run import FederatedData, TrainConfig
from bnfl.fl.algorithms import Algorithm
from bnfl.fl.state import state_groups

__all__ = ["FlowerSetup", "Setups", "flower_exchange", "samples_crc"]


def flower_exchange(model: nn.Module, method: str, r: int) -> Callable[..., Tensor]:
    """Flower's side of an exchange inside a local step (:data:`bnfl.fedtan.Exchange`): a refusal.

    A coupled first step (FedTAN) exchanges :math:`3L+1` times inside one local step and a Flower
    node keeps no autograd graph between messages, so this raises a ``ValueError`` naming the way
    out (the torch.distributed engine) when the run is set up (:class:`FlowerSetup`) or, at the
    latest, when the ServerApp is handed the round's coupled step."""

    n_bn = len(state_groups(model)["bn_count"])
    raise ValueError(
        f"{method} does not run over Flower: it couples the first local step of round {r} across "
        f"clients, 3L+1 = {3 * n_bn + 1} exchanges inside one step for this model's L = {n_bn} BN layers, and "
        "a Flower node keeps no autograd graph between messages. Run it on the torch.distributed engine "
        "(bnfl.fl.distributed): torchrun --nproc-per-node R -m bnfl train --config FILE (docs/distributed.md)")


@dataclass
class FlowerSetup:
    """What both apps are built from.

    Attributes
    ----------
    model : nn.Module
        The initial global model (every node builds its initial local state from it).
    data : FederatedData
        The seeded partition, computed once (a node keeps only its client's training rows).
    algorithm : Algorithm
        A template of options: the server and every client message use fresh copies of it. It
        holds no state (:mod:`bnfl.fl.context`): a client's algorithm state travels in its
        node's Context, the server's stays in the ServerApp.
    config : TrainConfig
        ``checkpoint_dir`` must be None (no resume over Flower).
    loss_fn : callable, default cross-entropy
    reply_timeout_s : float, default 600
        Seconds to wait for a round's replies (the start: >= 60 s); a silent client is failed, named.
    answer_inspect : bool, default False
        Whether clients answer ``query.inspect`` with their local state (equality tests only).
    out : str, optional
        Folder for ``history.json``/``history.csv`` (written by the ServerApp at the end).
    """

    model: nn.Module
    data: FederatedData
    algorithm: Algorithm
    config: TrainConfig
    loss_fn: Callable[[Tensor, Tensor], Tensor] = _cross_entropy
    reply_timeout_s: float = 600.0
    answer_inspect: bool = False
    out: str | None = None

    def __post_init__(self) -> None:
        alg, cfg = self.algorithm, self.config
        if cfg.checkpoint_dir is not None:
            raise ValueError("checkpoints are not supported over Flower (the clients' state lives in the nodes' "
                             "Contexts); set checkpoint_dir=None and give FlowerSetup(out=...) for the history")
        for r in range(1, cfg.rounds + 1):  # every round's plan must travel in Flower's messages: refused at setup
            plan = alg.round_plan(r)
            if plan.server_trains or not (plan.download and plan.upload):
                raise ValueError(f"{alg.name} does not run over Flower: its round {r} "
                                 f"{'trains one pooled model on the server' if plan.server_trains else 'sends no model both ways'}; "
                                 "use the simulation engine")
            if plan.coupled is not None:  # an in-step exchange gets Flower's exchange, which refuses
                flower_exchange(self.model, alg.name, r)
            if plan.outside_messages:
                raise ValueError(f"{alg.name} does not run over Flower: {plan.outside_messages}")


def samples_crc(ids: Any) -> int:
    """CRC-32 of a client's sorted training sample ids: the server checks every node's against the
    seeded partition (at ``query.hello`` and in every ``train`` reply), so a node that re-partitions
    (unseeded, or per instantiation) is caught even when the sizes agree."""
    return zlib.crc32(np.sort(np.asarray(ids, dtype=np.int64)).tobytes())


Setups = FlowerSetup | Sequence[FlowerSetup]


def _as_list(setup: Setups | Callable[[Context], Setups], context: Context) -> list[FlowerSetup]:
    s = setup if isinstance(setup, FlowerSetup | Sequence) else setup(context)
    return [s] if isinstance(s, FlowerSetup) else list(s)
