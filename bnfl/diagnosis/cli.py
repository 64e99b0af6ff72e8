"""``bnfl diagnose --config FILE``: the diagnosis of a run config's model and partition.

Builds the config's data, partition and model exactly as ``bnfl train`` does (the model at
initialisation, with BN), or loads the global model of a ``bnfl train --out`` folder
(``--checkpoint``), and prints :func:`bnfl.diagnosis.report.format_table`; ``--json`` prints the
JSON instead, ``--figure PATH`` writes the figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from torch import nn

from bnfl import _safe_torch
from bnfl.diagnosis import diagnose, report
from bnfl.fl import FederatedData, _rundir
from bnfl.methods import get
from bnfl.train.builder import build_model
from bnfl.train.config import as_config, load_data, partition

__all__ = ["diagnose_config", "load_setting", "register"]


def load_setting(cfg: Any, *, checkpoint: str | Path | None = None, data_root: str | Path | None = None,
                 ) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The model, :class:`~bnfl.fl.FederatedData` and diagnosis options of a run config.

    Parameters
    ----------
    cfg : RunConfig, dict or path of a TOML file
    checkpoint : path, optional
        A ``bnfl train --out`` folder (or its ``checkpoint.pt``): the global model of its last
        saved round replaces the initialisation. The config must be the run's, with a BN method.
    data_root : path, optional
        Folder of local data sets (overrides ``data.root``).

    Returns
    -------
    model, data, options
        ``options``: ``batch_size``, ``local_steps``, ``lr``, ``seed`` of the config, and
        ``per_client_models`` (the method is personalised, e.g. FedBN) and ``sync_rounds_ok``
        (the method already exchanges statistics inside a step, e.g. FedTAN).
    """
    cfg = as_config(cfg)
    method = get(cfg.method)
    try:  # the config's method options are checked as bnfl train checks them, though nothing trains
        method.algorithm(**cfg.method_options)
    except TypeError as err:
        raise ValueError(f"method_options: {err}") from None
    split = load_data(cfg, data_root)
    clients, _ = partition(cfg, split)
    data = FederatedData.from_split(split, clients)
    if checkpoint is not None and method.norm != "bn":
        raise ValueError(f"the config's method {method.id!r} trains a model with norm {method.norm!r}; a checkpoint "
                         "can be diagnosed only from a BN method (norm 'bn')")
    try:  # BN even where the config's method replaces it (the diagnosis says what to use)
        name, model = build_model(cfg, split, norm="bn")
    except TypeError as err:
        raise ValueError(str(err)) from None
    if checkpoint is not None:
        _load_checkpoint(model, Path(checkpoint), cfg, name)
    tc = cfg.train_config()
    options = {"batch_size": tc.batch_size, "local_steps": tc.local_steps, "lr": tc.schedule.lr, "seed": cfg.seed,
               "per_client_models": method.personalized,
               "sync_rounds_ok": method.comm in ("fedtan", "stats", "fedtan2")}
    return model, data, options


def _load_checkpoint(model: nn.Module, path: Path, cfg: Any, name: str) -> None:
    """Load the global model of ``path`` (a run folder or its checkpoint.pt) into ``model``: a safe
    load (nothing in the file runs), refused in one line when the file is unreadable or of a run
    other than ``cfg`` (model, data, partition or seed differ; the method may differ: the
    diagnosis is of BN on the config's partition, whatever trained the weights)."""
    path = path / _rundir.CHECKPOINT if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; pass the --out folder of a bnfl train run")
    try:
        state = _safe_torch.load(path, numpy_arrays=True)
    except Exception as err:  # noqa: BLE001 - torch's zip reader, the safe unpickler, a truncated file
        raise ValueError(f"checkpoint {path} is unreadable ({_safe_torch.why(err)})") from None
    if not isinstance(state, dict) or not isinstance(state.get("global_state"), dict):
        raise ValueError(f"{path} is not a bnfl train checkpoint (no global_state)")
    saved = state.get("identity") if isinstance(state.get("identity"), dict) else {}
    ours = {"model": {k: v for k, v in cfg.model.items() if k != "norm"},
            "data": {k: v for k, v in cfg.data.items() if k != "root"}, "partition": dict(cfg.partition),
            "seed": cfg.seed}
    if isinstance(saved.get("model"), dict):
        saved = {**saved, "model": {k: v for k, v in saved["model"].items() if k != "norm"}}
    diff = _rundir.identity_diff(saved, _rundir._plain(ours))
    if diff:
        raise ValueError(f"{path} is of another run than the config: {'; '.join(diff)}; pass the config the run "
                         f"was trained with")
    try:
        model.load_state_dict(state["global_state"])
    except RuntimeError as err:
        raise ValueError(f"{path} does not fit the config's model {name!r}: "
                         f"{' '.join(str(err).split())[:200]}") from None


def diagnose_config(cfg: Any, *, checkpoint: str | Path | None = None, data_root: str | Path | None = None,
                    **overrides: Any):
    """:func:`bnfl.diagnose` on a run config (``overrides``: its keyword options)."""
    model, data, options = load_setting(cfg, checkpoint=checkpoint, data_root=data_root)
    return diagnose(model, data, **{**options, **{k: v for k, v in overrides.items() if v is not None}})


def _main(args: argparse.Namespace) -> int:
    try:
        return _diagnose(args)
    except TypeError as err:  # wrong types in the config: one line, like bnfl train's (bnfl.train._cli_guard)
        raise ValueError(str(err)) from None


def _diagnose(args: argparse.Namespace) -> int:
    d = diagnose_config(
        args.config, checkpoint=args.checkpoint, data_root=args.data_root, batch_size=args.batch_size,
        local_steps=args.local_steps, lr=args.lr, seed=args.seed, stat_samples=args.stat_samples,
        per_client_models=args.per_client_models, sync_rounds_ok=args.sync_rounds_ok,
        progress=not args.quiet and not args.json,
    )
    if args.json:
        print(report.to_json(d))
    else:
        where = f"checkpoint {args.checkpoint}" if args.checkpoint else "model at initialisation"
        print(report.format_table(d, title=f"{args.config}, {where}"))
    if args.figure:
        fig = report.figure(d)
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure)
        plt.close(fig)
        if not args.json:
            print(f"wrote {args.figure}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bnfl diagnose``."""
    p = subparsers.add_parser(
        "diagnose", help="how much BN suffers on a config's partition, and which fix (seconds)",
        description="Per BN layer: between-client share of the statistics, bias of averaged variances, batch "
                    "noise; first-step gradient errors of FedAvg+BN, Algorithm 2 and FedTAN; label skew or "
                    "feature shift; a recommended fix and each fix's communication (docs/diagnose.md).")
    p.add_argument("--config", required=True, help="a bnfl train TOML config (model, data, partition, train)")
    p.add_argument("--checkpoint", help="a bnfl train --out folder: diagnose its saved global model")
    p.add_argument("--data-root", help="folder of local data sets (overrides data.root)")
    p.add_argument("--batch-size", type=int, help="override train.batch_size")
    p.add_argument("--local-steps", type=int, help="override train.local_steps")
    p.add_argument("--lr", type=float, help="override train.lr")
    p.add_argument("--seed", type=int, help="override the config's seed for the sampled batches")
    p.add_argument("--stat-samples", type=int, default=256, help="samples per client for the statistics (256)")
    p.add_argument("--per-client-models", action=argparse.BooleanOptionalAction, default=None,
                   help="each client may keep its own model (default: whether the config's method does)")
    p.add_argument("--sync-rounds-ok", action=argparse.BooleanOptionalAction, default=None,
                   help="clients can run FedTAN's 3L+1 synchronous rounds (default: whether the method does)")
    p.add_argument("--figure", help="write the figure to this path (.png, .svg, .pdf)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_main)

