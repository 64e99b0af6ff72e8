"""The run configuration's schema: :class:`RunConfig` (TOML, dict or Python) and its checks.

Every field has a documented default; every unknown key, name or wrongly typed value is an error
naming the field and the valid choices. :func:`bnfl.train.builder.build` turns a config into a
Simulation; :mod:`bnfl.train.config` documents the TOML file and runs it (``bnfl train``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib
import torch

from bnfl import models
from bnfl._input_checks import unreadable
from bnfl.data import DATASETS
from bnfl.data.partition_kinds import PARTITIONS  # [partition] kind: a Registry of PartitionKind
from bnfl.fl._run import MAX_ROUNDS, TrainConfig
from bnfl.fl.schedules import Schedule
from bnfl.methods import METHODS, Method, check

__all__ = ["RunConfig", "as_config", "check_norm", "load_config"]

_SCHEDULE_KEYS = ("milestones", "fractions", "gamma", "decay", "steps")
_NOT_TRAIN = {"rounds", "seed", "device", "schedule", "checkpoint_dir"}


@dataclass
class RunConfig:
    """Everything a run needs, with documented defaults.

    Attributes
    ----------
    method : str, default "fedavg+bn"
        An id of :data:`bnfl.methods.METHODS`: the algorithm and the model's normalisation.
    method_options : dict, default {}
        Keyword options of the method's algorithm (``mu``, ``switch``, ``switch_fraction``,
        ``momentum``, ``lam``, ``stat_samples``).
    model : dict, default {"name": "q_mlp_bn"}
        ``name`` plus keyword options of :func:`bnfl.models.build` (``groups``, ``eps``...).
        ``norm`` is the method's; stating another one is an error.
    data : dict, default {"name": "digits", "form": "flat"}
        ``name`` (a key of :data:`bnfl.data.DATASETS`), optional ``root``, and options of
        :func:`bnfl.data.load`.
    partition : dict, default {"kind": "classes_per_client", "num_clients": 5, "k": 2}
        ``kind`` (a key of :data:`PARTITIONS`), ``num_clients``, ``seed`` (default: ``seed``)
        and the kind's options.
    train : dict, default {}
        :class:`~bnfl.fl.engine.TrainConfig` fields and :class:`~bnfl.fl.Schedule` fields.
    rounds : int, default 10
    seed : int, default 0
        Model initialisation, batches and (by default) the partition.
    device : str, default "cpu"
    out : str, optional
        Output directory (history.json, history.csv, checkpoint).
    """

    method: str = "fedavg+bn"
    method_options: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=lambda: {"name": "q_mlp_bn"})
    data: dict[str, Any] = field(default_factory=lambda: {"name": "digits", "form": "flat"})
    partition: dict[str, Any] = field(default_factory=lambda: {"kind": "classes_per_client", "num_clients": 5,
                                                               "k": 2})
    train: dict[str, Any] = field(default_factory=dict)
    rounds: int = 10
    seed: int = 0
    device: str = "cpu"
    out: str | None = None

    def __post_init__(self) -> None:
        for name in ("method_options", "model", "data", "partition", "train"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a table (dict), got {type(getattr(self, name)).__name__}")
        for name, kinds in (("method", str), ("device", str), ("out", str | None)):
            if not isinstance(getattr(self, name), kinds):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")
        self.method = check(self.method)  # ValueError listing the ids; the builder looks it up
        _check_device(self.device)
        for name in ("rounds", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "rounds" else 0) \
                    or name == "seed" and v >= 2**32:
                raise ValueError(f"{name} must be a {'positive' if name == 'rounds' else 'non-negative'} integer"
                                 f"{' below 2**32' if name == 'seed' else ''}, got {v!r}")
        if self.rounds > MAX_ROUNDS:
            raise ValueError(f"rounds must be at most {MAX_ROUNDS:,}, got {self.rounds!r}")
        if "name" not in self.model:
            raise ValueError(f"model.name is required; valid: {', '.join(models.available())}")
        _lookup(models.MODELS, self.model["name"], "model.name", "valid")
        if self.method in METHODS:  # a row of the table (a plug-in's norm: checked where it is resolved)
            check_norm(self.model, METHODS[self.method])
        _lookup(DATASETS, self.data.get("name", "digits"), "data.name", "valid names")
        kind = self.partition.get("kind", "classes_per_client")
        options = _lookup(PARTITIONS, kind, "partition.kind", "valid").options
        _check_keys(self.partition, {"kind", "num_clients", "seed", *options}, f"partition ({kind})")
        fields = {f.name for f in dataclasses.fields(TrainConfig)} - _NOT_TRAIN
        _check_keys(self.train, fields | set(_SCHEDULE_KEYS), "train")
        self.train_config()  # validates types and values now

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """From a plain dict (e.g. a parsed TOML file); unknown keys are errors."""
        _check_keys(d, {f.name for f in dataclasses.fields(cls)}, "config")
        return cls(**{k: (dict(v) if isinstance(v, Mapping) else v) for k, v in d.items()})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (``RunConfig.from_dict(cfg.to_dict()) == cfg``)."""
        return dataclasses.asdict(self)

    def train_config(self) -> TrainConfig:
        """The :class:`TrainConfig` this run uses."""
        t = dict(self.train)
        sched = {k: t.pop(k) for k in _SCHEDULE_KEYS if k in t}
        lr = t.get("lr", TrainConfig.lr)
        for k, v in t.items():
            default = getattr(TrainConfig, k)
            want = float if k == "max_loss" else type(default) if default is not None else str
            ok = (isinstance(v, bool) if want is bool else
                  isinstance(v, int) and not isinstance(v, bool) if want is int else
                  isinstance(v, int | float) and not isinstance(v, bool) if want is float else
                  isinstance(v, want))
            if not ok:
                raise TypeError(f"train.{k} must be of type {want.__name__}, got {v!r}")
        if isinstance(lr, int | float) and (not math.isfinite(lr) or lr <= 0):
            raise ValueError(f"train.lr must be a positive number, got {lr!r}")
        try:
            schedule = Schedule(lr=lr, **sched)
            return TrainConfig(rounds=self.rounds, seed=self.seed, device=self.device, schedule=schedule,
                               checkpoint_dir=self.out, **t)
        except (ValueError, TypeError) as err:
            raise type(err)(f"train: {err}") from None


def check_norm(model: Mapping[str, Any], method: Method) -> None:
    """A model table's ``norm``, if it gives one, is the method's (the norm is part of the method)."""
    norm = model.get("norm", method.norm)
    if norm != method.norm:
        same = [m.id for m in _methods_like(method, norm)]
        raise ValueError(f"model.norm {norm!r} contradicts method {method.id!r} (norm {method.norm!r}): the "
                         f"norm is part of the method; " + (f"use method {same[0]!r}" if same else
                                                            "drop model.norm"))


def _methods_like(method: Any, norm: str) -> list[Any]:
    return [m for m in METHODS.values() if m.algorithm_name == method.algorithm_name and m.norm == norm
            and dict(m.options) == dict(method.options)]


def _lookup(registry: Any, name: Any, where: str, listing: str) -> Any:
    """``registry.lookup(name)``; an unknown name names the field (an import string that fails
    names its module and the error)."""
    if not registry.knows(name) and not (isinstance(name, str) and ":" in name):
        raise ValueError(f"{where}: unknown {name!r}; {listing}: {', '.join(registry.available())}")
    try:
        return registry.lookup(name)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _check_device(device: Any) -> None:
    try:
        torch.empty(0, device=torch.device(device))
    except (RuntimeError, TypeError, AssertionError) as err:  # not a device, or not on this machine
        raise ValueError(f"device: {device!r} cannot be used here ({str(err).splitlines()[0][:100]}); "
                         f"use e.g. 'cpu' or 'cuda'") from None


def _check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for k in table:
        if k not in allowed:
            raise ValueError(f"{where}.{k}: unknown field; valid: {', '.join(sorted(allowed))}")


def load_config(path: str | Path) -> RunConfig:
    """Read a TOML file into a :class:`RunConfig` (unknown keys are errors)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"config file {p} does not exist")
    if p.is_dir():
        raise ValueError(f"config file {p} is a folder; give the path of a TOML file")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        kind = ("UTF-16 text" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else
                "binary data" if b"\x00" in data[:1024] else "text in another encoding (latin-1?)")
        raise ValueError(f"{p}: not UTF-8 text: byte {data[err.start]:#04x} at position {err.start} looks like "
                         f"{kind}; save the config as UTF-8 (TOML files are UTF-8)") from None
    try:
        d = tomllib.loads(text.removeprefix("\ufeff"))
    except ValueError as err:  # TOMLDecodeError, and a number too long to read (bnfl._input_checks)
        raise ValueError(f"{p}: not valid TOML: {unreadable(err)}") from None
    except RecursionError:
        raise ValueError(f"{p}: nested too deeply to read (a config's tables go a few levels deep at most)") from None
    if not d:  # an empty file trains every default: say so
        print(f"bnfl: warning: {p} sets nothing; every field takes its default (see examples/run.annotated.toml)",
              file=sys.stderr)
    return RunConfig.from_dict(d)


def as_config(cfg: RunConfig | Mapping[str, Any] | str | Path) -> RunConfig:
    """A :class:`RunConfig` from itself, a dict, or the path of a TOML file."""
    if isinstance(cfg, RunConfig):
        return cfg
    if isinstance(cfg, Mapping):
        return RunConfig.from_dict(cfg)
    if isinstance(cfg, str | Path):
        return load_config(cfg)
    raise TypeError(f"a run config is a RunConfig, a dict or a TOML path, got {type(cfg).__name__}")
