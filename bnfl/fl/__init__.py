"""Federated simulation engine: algorithms, communication, rounds, history, checkpoints.

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
from bnfl.fl.accounting import CommVolume, comm_volume
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
from bnfl.fl.config import RunConfig, build, load_config, run
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
    "ALGORITHMS", "ClientContext", "FBN", "HBN", "ServerContext", "RunConfig", "build", "load_config", "run", "Algorithm", "Centralized", "Channel", "CommVolume", "CoupledStep",
    "CoupledFirstStep", "MomentumPolicy", "RoundPlan",
    "DivergenceError", "FedACG", "FedAdam", "FedSAM", "FedWon", "MOON", "FedAvg", "FedAvgAlg2", "FedBN", "FedProx", "FedTAN", "FedTAN2",
    "FederatedData", "FixBN", "History", "RunState", "Schedule", "Scaffold", "SiloBN", "Simulation",
    "SingleNet", "TrainConfig", "accuracy", "comm_volume", "coupled_first_step", "ema_global_stats", "hbn_client_stats",
    "hbn_reference_stats", "make_algorithm", "state_bytes", "state_groups", "weighted_sum",
    "DistributedSimulation", "init_from_env",
]
