"""Federated simulation engine: algorithms, communication, rounds, history, checkpoints.

The run layer around it (configs, the builder, accounting by method id, cross-silo, ``bnfl train``)
is :mod:`bnfl.train`; ``fl.run``, ``fl.build``, ``fl.RunConfig``, ``fl.load_config`` and
``fl.comm_volume`` are its names, handed on lazily so that the engine never imports the run layer.

Quick start::

    from bnfl import fl
    hist = fl.run(fl.RunConfig(method="fedtan", model={"name": "q_mlp_bn"}, rounds=20,
                               train={"local_steps": 5, "lr": 0.1}))

or, with your own model and partition::

    sim = fl.Simulation(model, fl.FederatedData.from_split(split, parts), fl.FedTAN(),
                        fl.TrainConfig(rounds=20, local_steps=5, lr=0.1))
    history = sim.run()
"""

from bnfl.fedtan import CoupledStep
from bnfl.fl._volume import CommVolume
from bnfl.fl.algorithms import (
    ALGORITHMS,
    FBN,
    HBN,
    MOON,
    Algorithm,
    Centralized,
    CoupledFirstStep,
    FedACG,
    FedAdam,
    FedAvg,
    FedAvgAlg2,
    FedBN,
    FedProx,
    FedSAM,
    FedTAN,
    FedTAN2,
    FedWon,
    FixBN,
    MomentumPolicy,
    RoundPlan,
    Scaffold,
    SiloBN,
    SingleNet,
    hbn_client_stats,
    hbn_reference_stats,
    make_algorithm,
)
from bnfl.fl.comm import Channel, state_bytes, weighted_sum
from bnfl.fl.context import ClientContext, ServerContext
from bnfl.fl.coupled import coupled_first_step
from bnfl.fl.distributed import DistributedSimulation, init_from_env
from bnfl.fl.engine import (
    DivergenceError,
    FederatedData,
    History,
    Simulation,
    TrainConfig,
    accuracy,
    ema_global_stats,
)
from bnfl.fl.run_state import RunState
from bnfl.fl.schedules import Schedule
from bnfl.fl.state import state_groups

__all__ = [
    "ALGORITHMS", "ClientContext", "FBN", "HBN", "ServerContext", "Algorithm", "Centralized", "Channel", "CommVolume", "CoupledStep",
    "CoupledFirstStep", "MomentumPolicy", "RoundPlan",
    "DivergenceError", "FedACG", "FedAdam", "FedSAM", "FedWon", "MOON", "FedAvg", "FedAvgAlg2", "FedBN", "FedProx", "FedTAN", "FedTAN2",
    "FederatedData", "FixBN", "History", "RunState", "Schedule", "Scaffold", "SiloBN", "Simulation",
    "SingleNet", "TrainConfig", "accuracy", "coupled_first_step", "ema_global_stats", "hbn_client_stats",
    "hbn_reference_stats", "make_algorithm", "state_bytes", "state_groups", "weighted_sum",
    "DistributedSimulation", "init_from_env",
]

#: Names of the run layer (:mod:`bnfl.train`) that ``bnfl.fl`` hands on when asked, not at import.
_RUN_LAYER = {"RunConfig": "bnfl.train.config", "build": "bnfl.train.config", "load_config": "bnfl.train.config",
              "run": "bnfl.train.config", "comm_volume": "bnfl.train.accounting"}


def __getattr__(name: str):  # noqa: ANN202
    """``fl.run``, ``fl.build``, ... : the run layer's names, imported on first use (PEP 562)."""
    if name in _RUN_LAYER:
        import importlib

        return getattr(importlib.import_module(_RUN_LAYER[name]), name)
    raise AttributeError(f"module 'bnfl.fl' has no attribute {name!r}")
