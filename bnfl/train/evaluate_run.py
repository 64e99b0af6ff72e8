"""Score a finished run's model on other data: another data set, or a new client (``bnfl evaluate``).

A run folder's ``checkpoint.pt`` holds the server's model (``global_state``) and, for a method
whose BN layers stay on the clients (FedBN, SiloBN: :attr:`bnfl.methods.Method.local_state`),
each client's own BN layers (``client_local``). A *new* client has no BN layers of its own, so
which ones it uses is a choice the method leaves open; ``--client-stats`` names it:

``own``
    The new client's own statistics: each BN layer's running mean and variance recomputed on the
    new client's training samples (one train-mode forward of up to ``stat_samples`` of them, so
    every layer sees the statistics the layers before it produce; the unbiased variance, as
    PyTorch stores it). The BN weights and biases are the clients' average (weighted by their
    training samples) for a per-client method, the server's otherwise. This is what FedBN's
    "local BN" means for a client that joins after training, and it needs only the client's
    unlabelled data (AdaBN, Li et al. 2016).
``global``
    The clients' averaged BN layers (statistics and, for FedBN, weights and biases; weighted by
    the clients' training samples), as FedAvg would have sent them; for a method that shares BN
    this is the server's model as it is.
``client:K``
    Client K's own BN layers, unchanged (a per-client method only).

Checkpoints are read with :func:`bnfl.fl._rundir.load` (``weights_only``: a checkpoint never runs code).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl import models
from bnfl.data import load
from bnfl.data.stored import decode
from bnfl.fl import _rundir
from bnfl.fl._evaluate import accuracy
from bnfl.methods import get as get_method
from bnfl.runs import load_run

__all__ = ["CLIENT_STATS", "evaluate_run", "recompute_bn_statistics", "register"]

#: The choices of ``client_stats`` (``client:K`` besides: client K's own BN layers).
CLIENT_STATS = ("own", "global")


@torch.no_grad()
def recompute_bn_statistics(model: nn.Module, x: torch.Tensor) -> None:
    """Set every BN layer's running mean and (unbiased) variance to those of its input on ``x``,
    in one train-mode forward (each layer sees what the layers before it, normalised with the
    statistics of ``x``, produce). Weights and biases are left as they are; ``model`` ends in
    eval mode."""
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    saved = [m.momentum for m in bns]
    for m in bns:
        m.momentum = 1.0  # running <- this batch's statistics
    model.train()
    try:
        model(x)
    finally:
        for m, mom in zip(bns, saved, strict=True):
            m.momentum = mom
        model.eval()


def _bn_keys(model: nn.Module) -> set[str]:
    """State keys of the BN layers (selected by type)."""
    keys = set()
    for name, m in model.named_modules():
        if isinstance(m, _BatchNorm):
            keys |= {f"{name}.{k}" if name else k for k in m.state_dict()}
    return keys


def _average(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    total = sum(weights)
    out = {}
    for k, v in states[0].items():
        if v.is_floating_point():
            out[k] = sum(w / total * s[k].double() for s, w in zip(states, weights, strict=True)).to(v.dtype)
        else:
            out[k] = v.clone()
    return out


def evaluate_run(folder: str | Path, *, data: str, data_options: dict[str, Any] | None = None,
                 client_stats: str = "own", stat_samples: int = 2048) -> dict[str, Any]:
    """Test accuracy and loss of the model in ``folder``'s checkpoint on data set ``data``.

    Parameters
    ----------
    folder : path
        A ``bnfl train --out`` folder (``history.json`` says what ran; ``checkpoint.pt`` holds the model).
    data : str
        A data set name of :data:`bnfl.data.DATASETS` or an import string ``"pkg.mod:loader"``;
        its test split is scored, its training split gives the new client's statistics (``own``).
    data_options : dict, optional
        Options of that loader (as a config's ``[data]`` table; default: the run's own data
        options when ``data`` is the run's data set, else none).
    client_stats : {"own", "global"} or "client:K", default "own"
        Which BN layers the new client uses (module docstring).
    stat_samples : int, default 2048
        Training samples of the new data that ``own`` recomputes the statistics on.

    Returns
    -------
    dict
        ``accuracy``, ``loss``, ``samples``, ``client_stats``, ``method``, ``data``, ``round``.
    """

    folder = Path(folder)
    hist = load_run(folder)
    run = hist.meta.get("run")
    if not isinstance(run, dict):
        raise ValueError(f"{folder}/history.json does not say which model ran (written by an older bnfl): "
                         f"train the run again with this bnfl to evaluate it")
    state = _rundir.load(folder)
    if state is None:
        raise ValueError(f"{folder} holds no {_rundir.CHECKPOINT}: train with --out to keep the model")
    method = get_method(run["method"])
    # BN layers kept per client (FedBN: statistics and affine; SiloBN: statistics), by state group
    per_client = bool(set(method.local_state) & {"bn_stats", "bn_affine"})
    clients = sorted(int(k) for k in state.get("client_local", {})) if per_client else []
    if client_stats not in CLIENT_STATS:
        k = client_stats.removeprefix("client:")
        if not client_stats.startswith("client:") or not k.isdigit():
            raise ValueError(f"--client-stats must be own, global or client:K (K a client number), got {client_stats!r}")
        if int(k) not in clients:
            raise ValueError(f"--client-stats {client_stats}: this run keeps no BN layers of client {k}"
                             + (f" (its clients: {clients[0]}..{clients[-1]})" if clients else
                                f"; {run['method']} shares its BN layers: use own or global"))
    options = dict(data_options if data_options is not None else
                   ({k: v for k, v in run["data"].items() if k != "name"} if data == run["data"].get("name") else {}))
    split = load(data, **options)
    mopts = {k: v for k, v in run["model"].items() if k not in ("name", "norm")}
    mopts.setdefault("num_classes", split.num_classes)
    model = models.build_for(run["model"]["name"], split.input_shape, norm=method.norm, **mopts)
    weights = state["global_state"]
    if clients:
        sizes = hist.meta.get("client_sizes") or [1] * (max(clients) + 1)
        bn = _bn_keys(model)
        local = [{k: v for k, v in state["client_local"][c].items() if k in bn} for c in clients]
        if client_stats.startswith("client:"):
            weights = {**weights, **local[clients.index(int(client_stats[7:]))]}
        else:
            weights = {**weights, **_average(local, [float(sizes[c]) for c in clients])}
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"{data} does not fit the run's model {run['model']['name']!r} ({first}): "
                         f"pass a data set of the run's input shape and classes") from None
    model = model.to(torch.float32)
    meta = getattr(split, "meta", None) or {}
    norm = ((torch.as_tensor(meta["mean"]).reshape(-1), torch.as_tensor(meta["std"]).reshape(-1))
            if meta.get("stored") == "uint8" else None)

    def prepare(x: torch.Tensor) -> torch.Tensor:  # stored uint8 pixels standardised, as training saw them
        return decode(x, norm, "cpu", torch.float32) if x.dtype == torch.uint8 else x.float()

    if client_stats == "own":
        n = min(stat_samples, int(split.x_train.shape[0]))
        if n < 2:
            raise ValueError(f"{data} has {split.x_train.shape[0]} training samples; 'own' statistics need at least 2")
        recompute_bn_statistics(model, prepare(split.x_train[:n]))
    acc, loss = accuracy(model, split.x_test, split.y_test, prepare=prepare)
    return {"accuracy": acc, "loss": loss, "samples": int(split.x_test.shape[0]), "client_stats": client_stats,
            "method": run["method"], "per_client_bn": per_client, "data": data, "data_options": options,
            "round": int(state["round"])}


def _parse_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--data-option {text!r}: write KEY=VALUE, e.g. --data-option 'domains=[\"D5\"]'")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a plain string


def _main(args: argparse.Namespace) -> int:
    options = dict(_parse_option(o) for o in args.data_option) if args.data_option else None
    for choice in args.client_stats:
        r = evaluate_run(args.dir, data=args.data, data_options=options, client_stats=choice,
                         stat_samples=args.stat_samples)
        print(f"{r['method']} (round {r['round']}) on {r['data']}, {r['samples']} test samples, "
              f"BN statistics {choice}: accuracy {100 * r['accuracy']:.2f}%, loss {r['loss']:.3f}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``bnfl evaluate`` to the ``bnfl`` command line."""
    p = subparsers.add_parser(
        "evaluate", help="score a run's model on another data set or a new client",
        description="Score the model in a bnfl train --out folder on the test split of another data set (a new "
                    "client). A new client has no BN layers of its own; --client-stats says which it uses: "
                    "own (statistics recomputed on its training samples), global (the clients' average), or "
                    "client:K (client K's, for FedBN and SiloBN). docs/runs.md")
    p.add_argument("dir", metavar="DIR", help="a bnfl train --out folder with its checkpoint.pt")
    p.add_argument("--data", required=True,
                   help="data set name (bnfl.data.DATASETS) or import string 'package.module:loader'")
    p.add_argument("--data-option", action="append", metavar="KEY=VALUE",
                   help="an option of the data set's loader, VALUE in JSON (repeatable); default: the run's own "
                        "options when --data is the run's data set")
    p.add_argument("--client-stats", nargs="+", default=["own"], metavar="CHOICE",
                   help="own, global or client:K; several give one line each (default own)")
    p.add_argument("--stat-samples", type=int, default=2048,
                   help="training samples of the new data that 'own' recomputes the BN statistics on (default 2048)")
    p.set_defaults(func=_main)
