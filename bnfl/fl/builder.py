"""The one builder of a :class:`~bnfl.fl.engine.Simulation` from a run config, and the engine table.

:func:`build` turns a :class:`~bnfl.fl.config_schema.RunConfig` (or a dict, or a TOML path) into a
Simulation: data (:func:`load_data`), seeded partition (:func:`partition`), model and algorithm, in
that order. ``bnfl train``, the experiments, the torch.distributed ranks and the Flower apps
(:func:`bnfl.fl.flower.setup_from_config`) all build through it. :data:`ENGINES` names the
backends a run can execute on (:func:`resolve_engine`).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from bnfl.data.partition_kinds import PARTITIONS
from bnfl.fl.config_schema import RunConfig, as_config
from bnfl.fl.engine import FederatedData, Simulation

__all__ = ["ENGINES", "build", "check_labels", "load_data", "partition", "resolve_engine"]


def load_data(cfg: RunConfig, data_root: str | Path | None = None) -> Any:
    """The :class:`bnfl.data.Split` of ``cfg.data`` (``data_root`` overrides ``data.root``)."""
    from bnfl.data import load

    opts = dict(cfg.data)
    name = opts.pop("name", "digits")
    root = opts.pop("root", None)
    return load(name, root=data_root if data_root is not None else root, **opts)


def partition(cfg: RunConfig, split: Any) -> tuple[list, list | None]:
    """Client index arrays of ``cfg.partition`` on ``split``, and per-client test indices
    (``by_domain`` only: each client's domain in the test set)."""
    from bnfl.data import partition as P

    opts = dict(cfg.partition)
    kind = opts.pop("kind", "classes_per_client")
    n = opts.pop("num_clients", 5)
    seed = opts.pop("seed", cfg.seed)
    y = split.y_train.numpy()
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= len(y):
        raise ValueError(f"partition.num_clients must be an integer from 1 to the {len(y)} training samples of "
                         f"{getattr(split, 'name', 'the data')}, got {n!r}")
    fn = PARTITIONS.lookup(kind).split
    try:
        if fn is not None:
            return fn(y, n, seed, **opts), None
    except TypeError as err:
        raise TypeError(f"partition: bad option for {kind}: {err}") from None
    except ValueError as err:  # e.g. a k that does not fit num_clients: name the table
        raise ValueError(f"partition ({kind}): {err}") from None
    if split.domain_train is None:
        raise ValueError(f"partition.kind 'by_domain' needs data with domains ({split.name} has none); "
                         f"use e.g. data.name = 'digit_domains'")
    try:
        clients = P.by_domain(split.domain_train.numpy(), seed=seed, **opts)
    except TypeError as err:
        raise TypeError(f"partition: bad option for by_domain: {err}") from None
    if "num_clients" in cfg.partition and n != len(clients):
        n_dom = len(split.domains) if split.domains else len(set(split.domain_train.tolist()))
        raise ValueError(f"partition.num_clients = {n} but {split.name} gives {len(clients)} clients from {n_dom} domains "
                         f"({len(clients) // max(n_dom, 1)} per domain); drop num_clients or choose {len(clients)}")
    if split.domain_test is None:
        return clients, None
    per_domain = P.by_domain(split.domain_test.numpy())
    domain_of = split.domain_train.numpy()
    tests = [per_domain[int(domain_of[c[0]])] for c in clients]  # each client: its domain's test set
    return clients, tests


def check_labels(split: Any, num_classes: Any, *, given: bool) -> None:
    """Refuse, in one line, class labels the model cannot score: each training and test label of a
    classification split (one label per sample) must lie in ``0 .. num_classes - 1``."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 1:
        raise ValueError(f"model.num_classes must be a positive int, got {num_classes!r}")
    for part in ("y_train", "y_test"):
        y = getattr(split, part, None)
        if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.numel() == 0 or y.is_floating_point():
            continue
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= num_classes:
            fix = (f"drop model.num_classes or set it to {hi + 1}" if given and lo >= 0 else
                   f"the data set's loader must give labels 0 .. {num_classes - 1}")
            raise ValueError(f"data: {split.name if hasattr(split, 'name') else 'the data'}'s {part} holds label "
                             f"{lo if lo < 0 else hi}, but the model scores {num_classes} classes "
                             f"(model.num_classes, labels 0 .. {num_classes - 1}); {fix}")


ENGINES = ("auto", "simulation", "distributed", "flower")


def resolve_engine(engine: str | None) -> str:
    """``"simulation"``, ``"distributed"`` or ``"flower"``; ``None``/``"auto"``: distributed when
    started by torchrun, else simulation."""
    from bnfl.fl.distributed import in_torchrun

    if engine not in (None, *ENGINES):
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine in (None, "auto"):
        return "distributed" if in_torchrun() else "simulation"
    return engine


def build(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None = None,
          split: Any = None, engine: str | None = "simulation") -> Simulation:
    """The :class:`Simulation` of a run config (a :class:`RunConfig`, a dict or a TOML path).

    Data, partition, model (initialised after ``torch.manual_seed(seed)``) and algorithm, in
    that order. ``split`` is an already loaded :class:`bnfl.data.Split` of ``cfg.data`` (the
    experiments reuse one per process); ``data_root`` is the folder of local data sets.
    ``engine``: ``"simulation"`` (one process), ``"distributed"`` (this process is one rank of
    the torch.distributed job that torchrun started: :mod:`bnfl.fl.distributed`) or ``"auto"``.
    """
    return _build(cfg, data_root=data_root, split=split, engine=resolve_engine(engine))


def _build(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None, split: Any,
           engine: str) -> Simulation:
    """:func:`build` on an ``engine`` already resolved (:func:`resolve_engine`, once per run)."""
    from bnfl import models
    from bnfl.method_table import get_method as get

    cfg = as_config(cfg)
    method = get(cfg.method)
    if split is None:
        split = load_data(cfg, data_root)
    clients, client_test = partition(cfg, split)
    data = FederatedData.from_split(split, clients, client_test)
    mopts = dict(cfg.model)
    name = mopts.pop("name")
    mopts["norm"] = method.norm
    mopts.setdefault("num_classes", split.num_classes)
    check_labels(split, mopts["num_classes"], given="num_classes" in cfg.model)
    torch.manual_seed(cfg.seed)
    try:
        model = models.build_for(name, split.input_shape, **mopts)
    except TypeError as err:
        raise TypeError(f"model: bad option for {name}: {err}") from None
    except ValueError as err:
        raise ValueError(f"model: {err}") from None
    tc = cfg.train_config()
    run_meta = {"method": method.id, "method_options": dict(cfg.method_options), "model": dict(cfg.model),
                "data": {k: v for k, v in cfg.data.items() if k != "root"}, "partition": dict(cfg.partition)}
    if engine == "flower":
        raise ValueError("build() makes a Simulation in this process; for the Flower engine use "
                         "bnfl.fl.run(cfg, engine='flower') or bnfl.fl.flower.setup_from_config + run_flower")
    if engine == "simulation":
        sim = Simulation(model, data, method.algorithm(**cfg.method_options), tc)
        sim.run_config = run_meta  # what resuming checks against, besides the Simulation's own (bnfl.fl._rundir)
        return sim
    from bnfl.fl.distributed import DistributedSimulation, init_from_env

    init_from_env()
    if tc.device.startswith("cuda") and torch.cuda.is_available():
        tc = dataclasses.replace(tc, device=f"cuda:{torch.cuda.current_device()}")  # one GPU per local rank
    sim = DistributedSimulation(model, data, method.algorithm(**cfg.method_options), tc)
    sim.run_config = run_meta
    return sim
