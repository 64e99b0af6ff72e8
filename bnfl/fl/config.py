"""Run configuration (TOML, dict or Python), the one builder of a Simulation, and ``bnfl train``.

A run is described by a :class:`RunConfig`; :func:`build` turns it (or a dict, or a TOML file)
into a :class:`~bnfl.fl.engine.Simulation` and :func:`run` runs it. ``bnfl train`` and the
experiments (:mod:`bnfl.experiments.training`) use this one builder. Example ``run.toml``::

    method = "fedtan"               # an id of bnfl.methods.METHODS (sets algorithm and norm),
                                    # or an import string "mypkg.algos:MyAlgorithm" (docs/own-fix.md)
    seed = 0
    device = "cpu"
    rounds = 50
    out = "runs/fedtan"             # history.json / history.csv / checkpoint

    [method_options]                # algorithm options, e.g. mu (fedprox), switch (fedtan2), lam (hbn)

    [model]
    name = "q_mlp_bn"               # bnfl.models.available(); norm comes from the method
    # groups = 2                    # other options of bnfl.models.build
    # init = "he_normal"            # "pytorch" (default), "he_normal", "authors" (bnfl.models.inits)

    [data]
    name = "digits"                 # bnfl.data.DATASETS; other keys are options of bnfl.data.load
    form = "flat"
    # root = "~/data"               # local data sets (cifar10, mnist, office_caltech10, ...)

    [partition]
    kind = "classes_per_client"     # iid | classes_per_client | dirichlet | shards | by_domain
    num_clients = 5
    k = 2                           # phi (dirichlet), shards_per_client (shards); seed: default `seed`

    [train]                         # any TrainConfig field, plus schedule fields
    batched = "auto"                # auto (default) | off (the bitwise sequential reference) | on
    local_steps = 5
    batch_size = 32
    lr = 0.1
    milestones = []                 # rounds after which lr *= gamma
    fractions = []                  # the same as fractions of `rounds`
    gamma = 0.1
    steps = []                      # [[after_round, rate], ...] (FedTAN-II)
    decay = 1.0                     # per-round factor (HBN's 0.998)
    # augment = "cifar"             # random crop (4 px padding) + flip of every training batch

Every unknown key, name or wrongly typed value is an error naming the field and the valid choices.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib
import torch

from bnfl.data.partition_kinds import PARTITIONS  # [partition] kind: a Registry of PartitionKind
from bnfl.fl.engine import FederatedData, History, Simulation, TrainConfig
from bnfl.fl.schedules import Schedule

__all__ = ["PARTITIONS", "RunConfig", "build", "load_config", "register", "run"]

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
        from bnfl import models
        from bnfl.data import DATASETS
        from bnfl.methods import get

        for name in ("method_options", "model", "data", "partition", "train"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a table (dict), got {type(getattr(self, name)).__name__}")
        method = get(self.method)  # ValueError listing the ids
        self.method = method.id
        _check_device(self.device)
        for name in ("rounds", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "rounds" else 0):
                raise ValueError(f"{name} must be a {'positive' if name == 'rounds' else 'non-negative'} integer, "
                                 f"got {v!r}")
        if "name" not in self.model:
            raise ValueError(f"model.name is required; valid: {', '.join(models.available())}")
        _lookup(models.MODELS, self.model["name"], "model.name", "valid")
        norm = self.model.get("norm", method.norm)
        if norm != method.norm:
            same = [m.id for m in _methods_like(method, norm)]
            raise ValueError(f"model.norm {norm!r} contradicts method {method.id!r} (norm {method.norm!r}): the "
                             f"norm is part of the method; " + (f"use method {same[0]!r}" if same else
                                                                "drop model.norm"))
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
            want = type(default) if default is not None else str
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


def _methods_like(method: Any, norm: str) -> list[Any]:
    from bnfl.methods import METHODS

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
    with p.open("rb") as f:
        try:
            d = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{p}: not valid TOML: {err}") from None
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
    from bnfl import models
    from bnfl.methods import get

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
    torch.manual_seed(cfg.seed)
    try:
        model = models.build_for(name, split.input_shape, **mopts)
    except TypeError as err:
        raise TypeError(f"model: bad option for {name}: {err}") from None
    tc = cfg.train_config()
    run_meta = {"method": method.id, "method_options": dict(cfg.method_options), "model": dict(cfg.model),
                "data": {k: v for k, v in cfg.data.items() if k != "root"}, "partition": dict(cfg.partition)}
    if resolve_engine(engine) == "flower":
        raise ValueError("build() makes a Simulation in this process; for the Flower engine use "
                         "bnfl.fl.run(cfg, engine='flower') or bnfl.fl.flower.setup_from_config + run_flower")
    if resolve_engine(engine) == "simulation":
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


def run(cfg: RunConfig | Mapping[str, Any] | str | Path, *, resume: bool = False,
        engine: str | None = "simulation", overwrite: bool = False) -> History:
    """Build and run ``cfg``; write ``history.json`` and ``history.csv`` into ``cfg.out`` (on
    a distributed run, rank 0 writes; on ``engine="flower"`` the ServerApp, after running the
    config through Flower's simulation runtime, one node per client: :mod:`bnfl.fl.flower`).
    ``resume``/``overwrite``: a folder holding a run needs one of them (:mod:`bnfl.fl._rundir`)."""
    cfg = as_config(cfg)
    if resolve_engine(engine) == "flower":
        from bnfl.fl._rundir import prepare

        if not resume:
            prepare(cfg.out, resume=False, overwrite=overwrite)
        return _run_flower(cfg, resume=resume)
    sim = build(cfg, engine=engine)
    hist = sim.run(resume=resume, overwrite=overwrite)
    if cfg.out and getattr(sim, "rank", 0) == 0:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        hist.to_json(out / "history.json")
        hist.to_csv(out / "history.csv")
    return hist


def _run_flower(cfg: RunConfig, *, resume: bool) -> History:
    if resume:
        raise ValueError("--resume does not work with --engine flower: the clients' state lives in the Flower "
                         "nodes and ends with the run (no checkpoints); rerun, or use the simulation engine")
    try:
        from bnfl.fl.flower import run_flower, setup_from_config
    except ImportError as err:
        raise ValueError(f"--engine flower needs Flower ({err}); install the extra: pip install -e '.[flower]'") from None
    return run_flower(setup_from_config(cfg)).history


def _cli(args: argparse.Namespace) -> int:
    from bnfl.fl._cli_guard import guarded

    return guarded(_cli_run, args)


def _cli_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config) if args.config else RunConfig()
    d = cfg.to_dict()
    for key in ("method", "rounds", "seed", "device", "out"):
        v = getattr(args, key)
        if v is not None:
            d[key] = v
    if args.method is not None and args.method != cfg.method:
        d["model"].pop("norm", None)  # the new method brings its own norm
    for key in ("model", "data"):  # a new model or data set starts from its own defaults
        v = getattr(args, key)
        if v is not None and v != d[key].get("name"):
            d[key] = {"name": v}
    if args.init is not None:
        d["model"]["init"] = args.init
    for key in ("lr", "local_steps", "batch_size"):
        v = getattr(args, key)
        if v is not None:
            d["train"][key] = v
    if args.quiet:
        d["train"]["progress"] = False
    if args.batched is not None:
        d["train"]["batched"] = args.batched
    cfg = RunConfig.from_dict(d)
    engine = resolve_engine(args.engine)
    hist = run(cfg, resume=args.resume, engine=engine, overwrite=args.overwrite)
    if engine == "distributed":
        import torch.distributed as dist

        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return 0
    last = hist.rows[-1] if hist.rows else {}
    print(f"{cfg.method}: {len(hist)} rounds, test_acc={last.get('test_acc')}, "
          f"comm_rounds={last.get('comm_rounds')}, bytes={last.get('bytes_total')}"
          + (f"; wrote {cfg.out}/history.json" if cfg.out else "")
          + (f"\n{hist.meta['batched']['line']}" if "line" in hist.meta.get("batched", {}) else ""))
    return 0


def register(subparsers: Any) -> None:
    """Add ``bnfl train`` to the ``bnfl`` command line."""
    from bnfl.methods import METHODS

    p = subparsers.add_parser("train", help="run a federated simulation from a TOML config or flags",
                              description="Run a federated simulation; writes history.json/.csv to --out. "
                                          "--method, --model and --data also take an import string "
                                          "'package.module:Name' (docs/own-fix.md).")
    p.add_argument("--config", help="TOML file (see bnfl.fl.config)")
    p.add_argument("--method", "--algorithm", dest="method", metavar="METHOD",
                   help=f"method id (overrides the config's; --algorithm is an alias): {', '.join(METHODS.available())}")
    p.add_argument("--model", help="model name or import string (replaces the config's [model] table)")
    p.add_argument("--data", help="data set name or import string (replaces the config's [data] table)")
    p.add_argument("--init", choices=("pytorch", "he_normal", "authors"),
                   help="weight initialisation (overrides model.init; default pytorch; bnfl.models.inits)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--device")
    p.add_argument("--out", help="output directory")
    p.add_argument("--lr", type=float)
    p.add_argument("--local-steps", dest="local_steps", type=int)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out (none: a warning, "
                   "and round 1)")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --out (without it or --resume, "
                   "a folder holding a run is an error)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--batched", choices=("off", "auto", "on"),
                   help="engine of the clients' local steps (overrides train.batched; default auto): auto trains a "
                        "round's clients as one computation where the run allows it (the faster engine, equal to off "
                        "up to rounding, not bitwise), off is the sequential reference (bitwise), on is batched or "
                        "an error naming what cannot be batched; history.json's meta.batched.line says what ran")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="simulation (one process), distributed (one rank of a torchrun job; docs/distributed.md), "
                        "flower (Flower's simulation runtime, one node per client; docs/flower.md) "
                        "or auto (default: distributed when started by torchrun)")
    p.set_defaults(func=_cli)

