r"""Cross-silo federated learning on ``torch.distributed``: each rank reads only its own silo.

:func:`~bnfl.fl.distributed.DistributedSimulation` is a simulation spread over ranks: every rank
loads the whole data set, computes the seeded partition and then keeps its clients' rows.
:func:`CrossSiloSimulation` is the other mode: rank ``r`` is given a :class:`Silo` (its own
training samples, split into one or more clients, and the evaluation set), read from a folder of
its own (:func:`load_silo`) or returned by a loader called with the rank. No rank ever holds
another silo's samples; what the ranks tell each other before training is metadata only: each
silo's number of samples and its clients' sizes (the server's aggregation weights
:math:`p_i = n_i/N` need them in every method), the sample shape and a digest of the evaluation
set.

Everything after that is the distributed engine unchanged: the same rounds, the algorithm's own
``aggregate`` on the gathered uploads, FedTAN's coupled first step with all-reduced statistics
(eqs. 39-41), the same checkpoints. Client ``j`` of rank ``r`` is global client
``sum(clients of ranks < r) + j``, and its samples have the ids ``offset_r + i`` (``offset_r``:
the samples of the silos before ``r``), so a run equals the one-process simulator on the union of
the silos (concatenated in rank order, each client's ids shifted by its silo's offset):
``tests/test_fl_cross_silo.py`` checks it bit for bit in float64 on 3 gloo ranks.

The evaluation set must be the same on every rank (a common held-out set; each rank evaluates
the global model on it, as the spread mode does): a rank whose set differs stops the run with an
error naming it. "Own data" accuracy is measured on each client's training samples, on its rank.
The history's ``meta["mode"]`` is ``"cross-silo"`` (``"simulation-over-ranks"`` for the
spread mode).

On disk, a silo is a folder with ``train.npz`` (arrays ``x``, ``y`` and optionally ``client``:
each sample's client within the silo, ``0..m-1``; without it the silo is one client) and
``test.npz`` (``x``, ``y``). Run a config under ``torchrun``, one silo folder per rank::

    torchrun --nproc-per-node 3 -m bnfl.train.cross_silo --config run.toml --silo-root 'silos/rank{rank}'

(the config's ``method``, ``model``, ``train``, ``rounds``, ``seed``, ``device`` and ``out`` are
used; its ``data`` and ``partition`` tables are not: the silos are the partition).
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from bnfl import models
from bnfl._input_checks import npz_arrays
from bnfl.fl._run import FederatedData, History, TrainConfig
from bnfl.fl.algorithms import Algorithm
from bnfl.fl.distributed import RankClients, init_from_env
from bnfl.fl.engine import Simulation
from bnfl.train.builder import resolve
from bnfl.train.config_schema import as_config, load_config

__all__ = ["CrossSiloSimulation", "Silo", "build_cross_silo", "load_silo", "save_silo"]


@dataclass
class Silo:
    """One rank's own data.

    Attributes
    ----------
    x_train, y_train : Tensor
        The silo's training samples, of shape (n, ...) and (n,).
    x_test, y_test : Tensor
        The evaluation set (the same on every rank).
    clients : list of 1-D int arrays, optional
        The silo's clients as index arrays into ``x_train``; default: one client holding every
        sample.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    clients: list[np.ndarray] | None = field(default=None)

    def __post_init__(self) -> None:
        for name in ("x_train", "y_train", "x_test", "y_test"):
            if not isinstance(getattr(self, name), Tensor):
                raise TypeError(f"Silo.{name} must be a Tensor, got {type(getattr(self, name)).__name__}")
        if self.x_train.shape[0] != self.y_train.shape[0]:
            raise ValueError(f"Silo: {self.x_train.shape[0]} training samples but {self.y_train.shape[0]} labels")
        if self.x_test.shape[0] != self.y_test.shape[0]:
            raise ValueError(f"Silo: {self.x_test.shape[0]} test samples but {self.y_test.shape[0]} labels")
        if self.x_train.shape[0] == 0:
            raise ValueError("Silo: no training sample; a silo must hold data")
        clients = [np.arange(self.x_train.shape[0])] if self.clients is None else list(self.clients)
        # FederatedData's checks: every index in range, no empty client, every sample finite
        self.clients = FederatedData(self.x_train, self.y_train, self.x_test, self.y_test, clients).clients


def save_silo(root: str | Path, silo: Silo) -> Path:
    """Write ``silo`` as ``root/train.npz`` (``x``, ``y``, ``client``) and ``root/test.npz``
    (``x``, ``y``), the layout :func:`load_silo` reads; returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    assert silo.clients is not None
    client = np.full(silo.x_train.shape[0], -1, dtype=np.int64)
    for j, idx in enumerate(silo.clients):
        if (client[idx] >= 0).any():
            raise ValueError(f"client {j} shares samples with another client; save_silo writes one client per sample")
        client[idx] = j
    np.savez(root / "train.npz", x=silo.x_train.numpy(), y=silo.y_train.numpy(), client=client)
    np.savez(root / "test.npz", x=silo.x_test.numpy(), y=silo.y_test.numpy())
    return root


def load_silo(root: str | Path) -> Silo:
    """Read a silo folder: ``train.npz`` (``x``, ``y``, optional ``client``) and ``test.npz``
    (``x``, ``y``). Samples of a client keep their order in the file."""
    root = Path(root).expanduser()
    arrays = {}
    for part in ("train", "test"):
        path = root / f"{part}.npz"
        if not path.is_file():
            raise FileNotFoundError(f"silo {root}: {path.name} is missing; a silo folder holds train.npz (x, y, "
                                    "optional client) and test.npz (x, y)")
        with np.load(path) as f:
            missing = [k for k in ("x", "y") if k not in f.files]
            if missing:
                raise ValueError(f"{path}: no array {' or '.join(missing)} (it has {', '.join(f.files)})")
            arrays[part] = npz_arrays(f, path)  # an object array: one line naming the file, not numpy's
    train = arrays["train"]
    clients = None
    if "client" in train:
        owner = np.asarray(train["client"])
        if owner.shape != (train["x"].shape[0],) or owner.dtype.kind not in "iu" or (owner < 0).any():
            raise ValueError(f"{root}/train.npz: 'client' must hold one non-negative integer per sample")
        clients = [np.flatnonzero(owner == j) for j in range(int(owner.max()) + 1)]
    return Silo(torch.from_numpy(train["x"]), torch.from_numpy(train["y"]).long(),
                torch.from_numpy(arrays["test"]["x"]), torch.from_numpy(arrays["test"]["y"]).long(), clients)


def _digest(*tensors: Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


@dataclass
class _SiloView:
    """What the engine reads of the data besides the training samples: the evaluation set and
    every client's sample ids (this rank's clients: their real ids; another rank's: placeholder
    ids of the right count, which this rank never reads)."""

    x_test: Tensor
    y_test: Tensor
    clients: list[np.ndarray]
    client_test: None = None
    pad_value: None = None  # no augmentation cross-silo (refused in CrossSiloSimulation)
    stored_norm: None = None  # a silo holds float samples, not stored uint8 pixels


def CrossSiloSimulation(model: nn.Module, silo: Silo | Callable[[int], Silo], algorithm: Algorithm,  # noqa: N802
                        config: TrainConfig | None = None, *, barrier_timeout_s: float | None = None,
                        **kwargs: Any) -> Simulation:
    """The distributed engine with each rank holding only its own :class:`Silo` (see the module
    docstring): a :class:`~bnfl.fl.engine.Simulation` with :class:`~bnfl.fl.distributed.RankClients`
    over the silos' clients, each rank keeping its silo's samples.

    Parameters
    ----------
    model : nn.Module
        The initial global model (the same on every rank: build it after the same seed).
    silo : Silo or callable
        This rank's data, or a loader called as ``silo(rank)`` that returns it.
    algorithm : Algorithm
        Any federated algorithm that does not pool the clients' data (centralised baselines
        cannot run cross-silo).
    config : TrainConfig, optional
    barrier_timeout_s : float, optional
        Seconds a round waits for every rank (:class:`~bnfl.fl.distributed.RankClients`).
    **kwargs
        Further options of the Simulation (``loss_fn``).
    """
    if not dist.is_initialized():
        raise RuntimeError("CrossSiloSimulation needs a process group: call bnfl.fl.distributed.init_from_env() "
                           "(or start the program with torchrun)")
    rank, world = dist.get_rank(), dist.get_world_size()
    if callable(silo) and not isinstance(silo, Silo):
        silo = silo(rank)
    if not isinstance(silo, Silo):
        raise TypeError(f"rank {rank}: silo must be a bnfl.train.cross_silo.Silo (or a loader returning one), "
                        f"got {type(silo).__name__}")
    if config is not None and getattr(config, "augment", "none") != "none":
        raise ValueError(f"augment={config.augment!r}: cross-silo runs do not augment yet (the rank sees its "
                         "silo, not the whole data set the augmenter is set up from); use augment='none'")
    if algorithm.round_plan(1).server_trains:
        raise ValueError(f"{type(algorithm).__name__} pools every client's data in one place; a centralised "
                         "baseline cannot run cross-silo (run it with the simulator on data you may pool)")
    assert silo.clients is not None
    mine = {"n": silo.x_train.shape[0], "sizes": [len(c) for c in silo.clients],
            "shape": tuple(silo.x_train.shape[1:]), "test": _digest(silo.x_test, silo.y_test)}
    got: list[Any] = [None] * world
    dist.all_gather_object(got, mine)  # metadata only: counts, a shape, a digest
    for r, other in enumerate(got):
        if other["test"] != got[0]["test"]:
            raise ValueError(f"rank {r}'s evaluation set differs from rank 0's: cross-silo runs evaluate the "
                             "global model on one common held-out set; give every silo the same test.npz")
        if other["shape"] != got[0]["shape"]:
            raise ValueError(f"rank {r}'s samples have shape {other['shape']}, rank 0's {got[0]['shape']}")
    offsets = np.cumsum([0] + [g["n"] for g in got])
    clients: list[np.ndarray] = []
    blocks: list[list[int]] = []
    for r, g in enumerate(got):
        blocks.append(list(range(len(clients), len(clients) + len(g["sizes"]))))
        if r == rank:
            clients += [offsets[r] + c for c in silo.clients]
        else:  # ids of the right count inside rank r's range (never read here)
            clients += [offsets[r] + np.arange(n) for n in g["sizes"]]
    own: Silo = silo
    offset, total = int(offsets[rank]), int(offsets[-1])

    def samples(device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """The silo's own samples; the rows map the global ids ``offset + i`` to them (-1: another silo's)."""
        n = own.x_train.shape[0]
        rows = torch.full((total,), -1, dtype=torch.long)
        rows[offset:offset + n] = torch.arange(n)
        return own.x_train.to(device, dtype), own.y_train.to(device), rows.to(device)

    ranks = RankClients(blocks, mode="cross-silo", barrier_timeout_s=barrier_timeout_s, samples=samples)
    return Simulation(model, _SiloView(silo.x_test, silo.y_test, clients), algorithm, config,  # type: ignore[arg-type]
                      clients=ranks, **kwargs)


def build_cross_silo(cfg: Any, silo: Silo | Callable[[int], Silo], **kwargs: Any) -> Simulation:
    """A :func:`CrossSiloSimulation` of a run config (a :class:`~bnfl.fl.RunConfig`, a dict or a
    TOML path) on this rank's ``silo``: the config's method, model (built after
    ``torch.manual_seed(seed)``, for the silo's sample shape; ``num_classes`` defaults to one
    more than the largest label of any silo), training options and seed. Needs the process
    group (:func:`bnfl.fl.distributed.init_from_env`)."""

    cfg = as_config(cfg)
    if not dist.is_initialized():
        raise RuntimeError("build_cross_silo needs a process group: call bnfl.fl.distributed.init_from_env()")
    if callable(silo) and not isinstance(silo, Silo):
        silo = silo(dist.get_rank())
    method, algorithm = resolve(cfg)  # the builder's one look-up
    mopts = dict(cfg.model)
    name = mopts.pop("name")
    mopts["norm"] = method.norm
    if "num_classes" not in mopts:
        top = torch.tensor([int(silo.y_train.max()), int(silo.y_test.max())]).max().reshape(1)
        dist.all_reduce(top, op=dist.ReduceOp.MAX)  # a count, not data
        mopts["num_classes"] = int(top) + 1
    torch.manual_seed(cfg.seed)
    model = models.build_for(name, tuple(silo.x_train.shape[1:]), **mopts)
    return CrossSiloSimulation(model, silo, algorithm, cfg.train_config(), **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bnfl.train.cross_silo --config FILE --silo-root PATTERN`` under torchrun."""

    p = argparse.ArgumentParser(prog="python -m bnfl.train.cross_silo", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="run TOML (method, model, train, rounds, seed, out)")
    p.add_argument("--silo-root", required=True,
                   help="this rank's silo folder; '{rank}' is replaced by the rank, e.g. 'silos/rank{rank}'")
    p.add_argument("--out", help="output directory (overrides the config's)")
    args = p.parse_args(argv)

    cfg = load_config(args.config)
    if args.out:
        cfg.out = args.out
    init_from_env()
    try:
        sim = build_cross_silo(cfg, lambda rank: load_silo(args.silo_root.format(rank=rank)))
        hist: History = sim.run()
        if cfg.out and sim.clients.writes:
            wrote = hist.write(cfg.out)
            print(f"{cfg.method} cross-silo on {dist.get_world_size()} ranks: {len(hist)} rounds, test accuracy "
                  f"{hist.final_accuracy()}; wrote {wrote}")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
