"""The one builder of a run from a run config, and the engine table.

:func:`build_parts` turns a :class:`~bnfl.train.config_schema.RunConfig` (or a dict, or a TOML path)
into what every backend runs: data (:func:`load_data`), seeded partition (:func:`partition`), model
and algorithm, in that order (:class:`Built`); :func:`build_simulation` makes the simulator's
:class:`~bnfl.fl.engine.Simulation` of them. ``bnfl train`` and the experiments
(:func:`bnfl.fl.build`), the torch.distributed ranks and the Flower apps
(:func:`bnfl.train.config.setup_from_config`) all build through it. :data:`ENGINES` names the
backends a run can execute on (:func:`resolve_engine`); :func:`bnfl.fl.build` picks one.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bnfl import _fit_checks, models
from bnfl.data import load
from bnfl.data import partition as P
from bnfl.data.partition_kinds import PARTITIONS
from bnfl.fl._launch import in_torchrun
from bnfl.fl.algorithms import Algorithm
from bnfl.fl.engine import FederatedData, Simulation, TrainConfig
from bnfl.methods import Method, get
from bnfl.train.config_schema import RunConfig, as_config, check_norm

__all__ = ["ENGINES", "Built", "build_parts", "resolve", "build_simulation", "check_labels", "load_data", "partition",
           "resolve_engine"]


def load_data(cfg: RunConfig, data_root: str | Path | None = None) -> Any:
    """The :class:`bnfl.data.Split` of ``cfg.data`` (``data_root`` overrides ``data.root``)."""

    opts = dict(cfg.data)
    name = opts.pop("name", "digits")
    root = opts.pop("root", None)
    return load(name, root=data_root if data_root is not None else root, **opts)


def partition(cfg: RunConfig, split: Any) -> tuple[list, list | None]:
    """Client index arrays of ``cfg.partition`` on ``split``, and per-client test indices
    (``by_domain`` only: each client's domain in the test set)."""

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


def build_model(cfg: RunConfig, split: Any, *, norm: str) -> tuple[str, nn.Module]:
    """The config's model (``cfg.model``) for ``split``'s inputs and classes with normalisation
    ``norm``, initialised from ``cfg.seed`` as ``bnfl train`` initialises it; returns the model's
    name and the model.

    Raises
    ------
    TypeError
        An option the model's builder does not take (one line naming the model).
    ValueError
        A value the builder refuses, or labels outside the model's classes (:func:`check_labels`).
    """
    mopts = dict(cfg.model)
    name = mopts.pop("name")
    mopts["norm"] = norm
    mopts.setdefault("num_classes", split.num_classes)
    check_labels(split, mopts["num_classes"], given="num_classes" in cfg.model)
    shapes = {k: v for k, v in mopts.items() if k != "weights"}  # the estimate needs shapes, not a weights file
    _fit_checks.refuse_oversized(name, lambda: models.build_for(name, split.input_shape, **shapes), split.input_shape,
                                 cfg.train_config().batch_size, cfg.device)  # before the seed: RNG untouched
    torch.manual_seed(cfg.seed)
    try:
        model = models.build_for(name, split.input_shape, **mopts)
    except TypeError as err:
        raise TypeError(f"model: bad option for {name}: {err}") from None
    except ValueError as err:
        raise ValueError(f"model: {err}") from None
    return name, model


def resolve_engine(engine: str | None) -> str:
    """``"simulation"``, ``"distributed"`` or ``"flower"``; ``None``/``"auto"``: distributed when
    started by torchrun, else simulation."""
    if engine not in (None, *ENGINES):
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine in (None, "auto"):
        return "distributed" if in_torchrun() else "simulation"
    return engine


@dataclass(frozen=True)
class Built:
    """What a run config builds, for any backend: the initial ``model``, the federated ``data``,
    the ``algorithm``, the :class:`~bnfl.fl.TrainConfig` and the run's description ``run_meta``
    (what resuming checks against, besides the Simulation's own: :mod:`bnfl.fl._rundir`)."""

    model: nn.Module
    data: FederatedData
    algorithm: Algorithm
    config: TrainConfig
    run_meta: dict[str, Any]
    method: Method


def resolve(cfg: RunConfig) -> tuple[Method, Algorithm]:
    """The config's :class:`~bnfl.methods.Method` and a fresh algorithm of it with the config's
    options: the one place a method id is looked up (:func:`bnfl.methods.get`; the config only
    checked that it exists, :func:`bnfl.methods.check`). Every builder (the simulator's, the
    engines', cross-silo's) resolves through here, and the resolved method travels on from it."""
    method = get(cfg.method)
    check_norm(cfg.model, method)  # a plug-in's norm is known only now
    return method, method.algorithm(**cfg.method_options)


def build_parts(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None = None,
                split: Any = None) -> Built:
    """Data, partition, model (initialised after ``torch.manual_seed(seed)``) and algorithm of a run
    config, in that order. ``split`` is an already loaded :class:`bnfl.data.Split` of ``cfg.data``
    (the experiments reuse one per process); ``data_root`` is the folder of local data sets. The
    method id is looked up once, here."""

    cfg = as_config(cfg)
    method, algorithm = resolve(cfg)
    if split is None:
        split = load_data(cfg, data_root)
    clients, client_test = partition(cfg, split)
    _fit_checks.warn_batch(cfg.train_config().batch_size, clients)  # a line only under bnfl train
    data = FederatedData.from_split(split, clients, client_test)
    _, model = build_model(cfg, split, norm=method.norm)
    run_meta = {"method": method.id, "method_options": dict(cfg.method_options), "model": dict(cfg.model),
                "data": {k: v for k, v in cfg.data.items() if k != "root"}, "partition": dict(cfg.partition)}
    return Built(model, data, algorithm, cfg.train_config(), run_meta, method)


def build_simulation(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None = None,
                     split: Any = None) -> Simulation:
    """The simulator's :class:`~bnfl.fl.engine.Simulation` of a run config (:func:`build_parts`)."""
    built = build_parts(cfg, data_root=data_root, split=split)
    sim = Simulation(built.model, built.data, built.algorithm, built.config)
    sim.run_config = built.run_meta
    return sim
