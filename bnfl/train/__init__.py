"""The run layer around the engine (:mod:`bnfl.fl`): a run config and its schema, the one builder
(the only place a method id is looked up; the resolved :class:`~bnfl.methods.Method` travels from
there), communication accounting by method id, provenance, evaluating a stored run, cross-silo
runs, and the command-line glue of ``bnfl train`` and Flower's ``flwr run``.

Quick start::

    from bnfl import train
    hist = train.run(train.RunConfig(method="fedtan", model={"name": "q_mlp_bn"}, rounds=20,
                                     train={"local_steps": 5, "lr": 0.1}))
"""

from bnfl.train.accounting import comm_volume
from bnfl.train.config import RunConfig, build, load_config, run

__all__ = ["RunConfig", "build", "comm_volume", "load_config", "run"]
