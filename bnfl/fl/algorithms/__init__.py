"""The federated algorithms of the four papers and their baselines.

Each algorithm states **in one place** (class attributes) what stays on the client and what the
server owns, in terms of the groups of :func:`bnfl.fl.state.state_groups`:

``local_state``
    groups that never leave the client (never broadcast, never uploaded);
``server_state``
    groups the server sets itself: broadcast to clients, never uploaded or averaged;
everything else
    broadcast, trained, uploaded and averaged with weights :math:`p_i` (``weighting``:
    ``"size"`` = :math:`n_i/\\sum_j n_j` over the round's clients, ``"equal"`` = 1/K).

``num_batches_tracked`` (group ``bn_count``) is never exchanged. Method definitions follow
CATALOG §0.2. The engine (:mod:`bnfl.fl.engine`) calls the hooks below; every exchange goes
through the simulation's :class:`~bnfl.fl.comm.Channel`.
"""

from __future__ import annotations

from bnfl.fl.algorithms._base import Algorithm
from bnfl.fl.algorithms._coupled import CoupledFirstStep
from bnfl.fl.algorithms._fedavg import (
    Centralized,
    FedAvg,
    FedBN,
    FedProx,
    Scaffold,
    SiloBN,
    SingleNet,
)
from bnfl.fl.algorithms._fedtan import FedAvgAlg2, FedTAN, FedTAN2
from bnfl.fl.algorithms._fixbn import CentralizedFixBN, DecoupledBN, FixBN
from bnfl.fl.algorithms._hbn import HBN
from bnfl.fl.algorithms._hbn_options import hbn_reference_stats
from bnfl.fl.algorithms._momentum import MomentumPolicy
from bnfl.fl.algorithms._plan import RoundPlan
from bnfl.fl.algorithms._registry import ALGORITHMS, make_algorithm
from bnfl.fl.algorithms._solvers import (
    MOON,
    FedACG,
    FedAdam,
    FedSAM,
    FedWon,
    adaptive_clip_,
    moon_contrastive_loss,
    representation,
)
from bnfl.fl.algorithms._statistics import FBN, hbn_client_stats

# one name per algorithm: the method id it is (bnfl.methods); the spellings of older bnfl, which
# its logs and accounting calls wrote, still read
for _old, _cls in (("fedavg-alg2", FedAvgAlg2), ("centralized-fixbn", CentralizedFixBN), ("decoupled", DecoupledBN)):
    ALGORITHMS.alias(_old, _cls.name)

__all__ = [
    "Algorithm", "CoupledFirstStep", "MomentumPolicy", "RoundPlan", "FBN", "Centralized", "SingleNet", "FedAvg", "FedProx", "Scaffold", "FedBN", "SiloBN",
    "FedAvgAlg2", "FedTAN", "FedTAN2", "FixBN", "CentralizedFixBN", "DecoupledBN", "HBN", "FedAdam", "MOON", "FedSAM", "FedACG",
    "FedWon", "adaptive_clip_", "moon_contrastive_loss", "representation", "ALGORITHMS", "make_algorithm",
    "hbn_client_stats", "hbn_reference_stats",
]
