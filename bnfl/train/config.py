"""Run configuration (TOML, dict or Python): the TOML file, :func:`run` on an engine, and ``bnfl train``.

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
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from bnfl import _fit_checks, _folder_lock
from bnfl.data.partition_kinds import PARTITIONS  # [partition] kind: a Registry of PartitionKind
from bnfl.fl._run import TRAIN_MAX_LOSS, History
from bnfl.fl._rundir import prepare
from bnfl.fl.distributed import DistributedSimulation, init_from_env
from bnfl.fl.engine import Simulation
from bnfl.methods import METHODS
from bnfl.train._cli_guard import guarded
from bnfl.train._provenance import describe

# The schema (RunConfig, load_config, as_config) is bnfl.train.config_schema; the builder and the
# engine table (build_parts, load_data, partition, ENGINES, resolve_engine) are bnfl.train.builder;
# this module picks the backend a config runs on (build, run) and is ``bnfl train``.
from bnfl.train.builder import (
    ENGINES,
    build_parts,
    build_simulation,
    load_data,
    partition,
    resolve_engine,
)
from bnfl.train.config_schema import _SCHEDULE_KEYS as _SCHEDULE_KEYS
from bnfl.train.config_schema import RunConfig, as_config, load_config

if TYPE_CHECKING:
    from bnfl.fl.flower_setup import FlowerSetup

__all__ = ["ENGINES", "PARTITIONS", "RunConfig", "as_config", "build", "load_config", "load_data", "partition",
           "register", "resolve_engine", "run", "setup_from_config"]


def build(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None = None,
          split: Any = None, engine: str | None = "simulation") -> Simulation:
    """The :class:`~bnfl.fl.Simulation` of a run config (a :class:`RunConfig`, a dict or a TOML path).

    Data, partition, model (initialised after ``torch.manual_seed(seed)``) and algorithm, in
    that order (:func:`bnfl.train.builder.build_parts`). ``split`` is an already loaded
    :class:`bnfl.data.Split` of ``cfg.data`` (the experiments reuse one per process);
    ``data_root`` is the folder of local data sets. ``engine``: ``"simulation"`` (one process),
    ``"distributed"`` (this process is one rank of the torch.distributed job that torchrun
    started: :mod:`bnfl.fl.distributed`) or ``"auto"``.
    """
    return _build(cfg, data_root=data_root, split=split, engine=resolve_engine(engine))


def _build(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None, split: Any,
           engine: str) -> Simulation:
    """:func:`build` on an ``engine`` already resolved (:func:`resolve_engine`, once per run)."""
    if engine == "flower":
        raise ValueError("build() makes a Simulation in this process; for the Flower engine use "
                         "bnfl.fl.run(cfg, engine='flower') or bnfl.train.config.setup_from_config + bnfl.fl.flower.run_flower")
    if engine == "simulation":
        return build_simulation(cfg, data_root=data_root, split=split)
    built = build_parts(cfg, data_root=data_root, split=split)
    init_from_env()
    tc = built.config
    if tc.device.startswith("cuda") and torch.cuda.is_available():
        tc = dataclasses.replace(tc, device=f"cuda:{torch.cuda.current_device()}")  # one GPU per local rank
    sim = DistributedSimulation(built.model, built.data, built.algorithm, tc)
    sim.run_config = built.run_meta
    return sim


def run(cfg: RunConfig | Mapping[str, Any] | str | Path, *, resume: bool = False,
        engine: str | None = "simulation", overwrite: bool = False) -> History:
    """Build and run ``cfg``; write ``history.json`` and ``history.csv`` into ``cfg.out`` (on
    a distributed run, rank 0 writes; on ``engine="flower"`` the ServerApp, after running the
    config through Flower's simulation runtime, one node per client: :mod:`bnfl.fl.flower`).
    ``resume``/``overwrite``: a folder holding a run needs one of them (:mod:`bnfl.fl._rundir`).
    The folder is locked while the run writes to it (:mod:`bnfl._folder_lock`): a second run into
    it is refused in one line naming this one's pid."""
    return _run(as_config(cfg), resume=resume, engine=resolve_engine(engine), overwrite=overwrite)


def _run(cfg: RunConfig, *, resume: bool, engine: str, overwrite: bool) -> History:
    """:func:`run` on an ``engine`` already resolved (:func:`resolve_engine`, once per run)."""
    writer = engine != "distributed" or os.environ.get("RANK", "0") == "0"  # rank 0 writes
    with _folder_lock.locked(cfg.out if writer else None):
        return _run_locked(cfg, resume=resume, engine=engine, overwrite=overwrite)


def _run_locked(cfg: RunConfig, *, resume: bool, engine: str, overwrite: bool) -> History:
    if engine == "flower":
        if not resume:
            prepare(cfg.out, resume=False, overwrite=overwrite)
        hist = _run_flower(cfg, resume=resume)
        hist.meta.update(describe(cfg, "flower"))
        if cfg.out:
            hist.to_json(Path(cfg.out) / "history.json")
        return hist
    sim = _build(cfg, data_root=None, split=None, engine=engine)
    sim.history.meta.update(describe(cfg, engine))  # what ran, where: the folder says it
    hist = sim.run(resume=resume, overwrite=overwrite)
    if cfg.out and sim.clients.writes:
        hist.write(cfg.out)
    return hist


def setup_from_config(cfg: RunConfig | Mapping[str, Any] | str | Path, *, data_root: str | Path | None = None,
                      **options: Any) -> FlowerSetup:
    """The :class:`~bnfl.fl.flower_setup.FlowerSetup` of a run config (a :class:`RunConfig`, dict or
    TOML path) for :func:`bnfl.fl.flower.run_flower` or the apps of :func:`bnfl.fl.flower.flower_apps`,
    built by the same builder as ``bnfl train`` (:func:`bnfl.train.builder.build_parts`): data, seeded
    partition, model, algorithm; no Simulation is made here. ``options`` are further
    :class:`~bnfl.fl.flower_setup.FlowerSetup` fields; ``out`` defaults to the config's. Needs Flower
    (the ``[flower]`` extra)."""
    from bnfl.fl.flower_setup import (
        FlowerSetup,  # Flower is an optional dependency: imported when asked for
    )

    cfg = as_config(cfg)
    built = build_parts(cfg, data_root=data_root)
    options.setdefault("out", cfg.out)
    return FlowerSetup(model=built.model, data=built.data, algorithm=built.algorithm,
                       config=dataclasses.replace(built.config, checkpoint_dir=None), **options)


def _run_flower(cfg: RunConfig, *, resume: bool) -> History:
    if resume:
        raise ValueError("--resume does not work with --engine flower: the clients' state lives in the Flower "
                         "nodes and ends with the run (no checkpoints); rerun, or use the simulation engine")
    try:  # Flower is an optional dependency (the [flower] extra): imported when a run asks for it
        from bnfl.fl.flower import run_flower
    except ImportError as err:
        raise ValueError(f"--engine flower needs Flower ({err}); install the extra: pip install -e '.[flower]'") from None
    return run_flower(setup_from_config(cfg)).history


def _cli(args: argparse.Namespace) -> int:
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
    if isinstance(d.get("train"), dict):
        d["train"].setdefault("max_loss", TRAIN_MAX_LOSS)  # bnfl train stops a diverging run (TrainConfig.max_loss)
    cfg = RunConfig.from_dict(d)
    engine = resolve_engine(args.engine)
    with _fit_checks.warnings_on():  # a batch larger than a client: one line (bnfl train only)
        hist = _run(cfg, resume=args.resume, engine=engine, overwrite=args.overwrite)
    if engine == "distributed":
        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return 0
    last = hist.rows[-1] if hist.rows else {}
    acc = last.get("test_acc")
    print(f"{cfg.method}: {len(hist)} rounds, test accuracy "
          + ("-" if acc is None else f"{100 * acc:.2f}%")
          + f", {last.get('comm_rounds')} communication rounds, {_bytes(last.get('bytes_total'))} communicated"
          + (f"; wrote {cfg.out}/history.json" if cfg.out else "")
          + (f"\n{hist.meta['batched']['line']}" if "line" in hist.meta.get("batched", {}) and not args.quiet else ""))
    return 0


def _bytes(n: int | None) -> str:
    """``"279.7 KiB"``: a byte count at a readable precision."""
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.1f} {unit}"


def register(subparsers: Any) -> None:
    """Add ``bnfl train`` to the ``bnfl`` command line."""
    p = subparsers.add_parser("train", help="run a federated simulation from a TOML config or flags",
                              description="Run a federated simulation; writes history.json/.csv to --out. "
                                          "--method, --model and --data also take an import string "
                                          "'package.module:Name' (docs/own-fix.md).")
    p.add_argument("--config", help="TOML file (see bnfl.train.config)")
    p.add_argument("--method", "--algorithm", dest="method", metavar="METHOD",
                   help=f"method id (overrides the config's; --algorithm is an alias): {', '.join(METHODS.available())}")
    p.add_argument("--model", help="model name or import string (replaces the config's [model] table)")
    p.add_argument("--data", help="data set name or import string (replaces the config's [data] table)")
    p.add_argument("--init", choices=("pytorch", "he_normal", "authors"),
                   help="weight initialisation (overrides model.init; default pytorch; bnfl.models.inits)")
    p.add_argument("--rounds", type=int, help="communication rounds R (overrides the config's rounds; default 10)")
    p.add_argument("--seed", type=int, help="seed of the model's initialisation, the partition and the batches "
                   "(overrides the config's seed; default 0)")
    p.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (overrides the config's device; default cpu)")
    p.add_argument("--out", help="run folder for history.json, history.csv and the checkpoints "
                   "(overrides the config's out; none: nothing is written)")
    p.add_argument("--lr", type=float, help="learning rate of round 1 (overrides train.lr; default 0.1)")
    p.add_argument("--local-steps", dest="local_steps", type=int,
                   help="local work E per round, in train.local_unit (overrides train.local_steps; default 1)")
    p.add_argument("--batch-size", dest="batch_size", type=int,
                   help="each client's mini-batch size B (overrides train.batch_size; default 32)")
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

