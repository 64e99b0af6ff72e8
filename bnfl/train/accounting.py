"""Communication volume of an algorithm from the real model (FedTAN Tables 3-5, CATALOG §5.1-5.3).

Per iteration with ``N`` clients and full participation, every exchanged element is counted
``N + 1`` times (N uploads + one multicast download). FedAvg(+BN) exchanges all parameters and
BN running statistics (not ``num_batches_tracked``); FedTAN adds, per BN layer with C channels,
the means and variances (Algorithm 2: 2C) and the two stat-gradients (Algorithm 3: 2C), in
``3L + 1`` rounds. Methods that keep state on the client (FedBN, SiloBN: ``local_state`` of the
algorithm, read through the Method table, :data:`bnfl.methods.METHODS`) send only the rest. The values match what
:class:`~bnfl.fl.comm.Channel` counts in a simulated round (tests/test_fl_accounting.py).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from bnfl.fl._volume import GIB, MIB, CommVolume, closed_form_volume
from bnfl.fl.algorithms import ALGORITHMS
from bnfl.methods import METHODS
from bnfl.methods import get as get_method

__all__ = ["CommVolume", "comm_volume", "MIB", "GIB"]


def _resolve(method: Any) -> Any:
    """A method id (or :class:`~bnfl.methods.Method`); an algorithm name stands for that algorithm
    with its default options (the model passed to :func:`comm_volume` carries the norm)."""
    ids = METHODS.available()
    if isinstance(method, str) and method.lower() not in ids and ALGORITHMS.knows(method):
        name = ALGORITHMS.lookup(method).name  # an older spelling reads as the algorithm's one name
        return next(m for m in METHODS.values() if m.algorithm_name == name and not m.options)
    try:
        return get_method(method)
    except ValueError:
        raise ValueError(f"unknown method {method!r}; valid: the ids of bnfl.methods.METHODS "
                         f"({', '.join(ids)}) or an algorithm name ({', '.join(sorted(ALGORITHMS))})") from None


def comm_volume(model: nn.Module, num_clients: int, method: Any = "fedavg+bn", *, iterations: int = 1,
                switch: int = 0, count_bn_stats: bool = True, element_size: int = 4) -> CommVolume:
    """Exact bytes and rounds of ``iterations`` iterations of ``method`` on ``model``.

    Parameters
    ----------
    model : nn.Module
        The real model; parameters and BN statistics are counted from its ``state_dict``.
    num_clients : int
        N (all participate).
    method : str or Method, default "fedavg+bn"
        An id of :data:`bnfl.methods.METHODS` (or an algorithm name such as ``"fedavg"``: that
        algorithm with default options). Its ``comm`` scheme decides the count: FedAvg-type
        methods (FedAvg+BN/GN, FedProx, FixBN, FedBN, SiloBN) exchange their shared state once
        per iteration; FedTAN, FedAvg+Algorithm 2 and FedTAN-II add the statistics exchanges;
        Centralized and SingleNet exchange nothing.
    iterations : int, default 1
        R.
    switch : int, default 0
        M for ``"fedtan2"`` (FedTAN iterations before the switch to FedAvg).
    count_bn_stats : bool, default True
        Count BN running statistics in the model payload (FedTAN Tables 3/4 do; Table 5 does
        not, CATALOG §5.3).
    element_size : int, default 4
        Bytes per element (32-bit floats in the papers).

    Raises
    ------
    ValueError
        Unknown method, or one whose traffic has no closed form here (SCAFFOLD, HBN, FBN,
        FixBN with global momentum: count a simulated round with :class:`~bnfl.fl.comm.Channel`).
    """
    m = _resolve(method)
    return closed_form_volume(model, num_clients, method_id=m.id, comm=m.comm, local_state=m.local_state,
                              iterations=iterations, switch=switch, count_bn_stats=count_bn_stats,
                              element_size=element_size)
