"""What a simulation run is made of: its configuration (:class:`TrainConfig`), its data
(:class:`FederatedData`, validated at the door), its record (:class:`History`) and the
error that stops a diverging run (:class:`DivergenceError`)."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bnfl import (
    _atomic,
    _run_groups,  # the module, not its name: _run_groups draws with plots, which reads the
)

# method table in bnfl.fl, so a first import of bnfl.runs reaches this module while _run_groups is half made
from bnfl.data import as_index_array
from bnfl.data.augment import AUGMENTATIONS, black_value
from bnfl.fl.schedules import Schedule

#: History fields that depend on the machine, not the computation.
TIME_FIELDS = ("wall_time", "round_time")


#: The most rounds a run may ask for (a bound checked before anything is allocated).
MAX_ROUNDS = 10**9
#: ``bnfl train``'s divergence stop (:attr:`TrainConfig.max_loss`): a cross-entropy of 1000 means
#: logits off by about 1000, far past any run that still learns (chance is ln C, about 2.3 for 10 classes).
TRAIN_MAX_LOSS = 1000.0


class DivergenceError(RuntimeError):
    """A local loss became NaN or Inf. ``.history`` holds every completed round."""
    def __init__(self, message: str, history: History) -> None:
        super().__init__(message)
        self.history = history


@dataclass
class TrainConfig:
    """Hyper-parameters of a simulation (model, data and algorithm are passed separately).

    Attributes
    ----------
    rounds : int, default 10
        Communication iterations R (FedTAN's "iterations", HBN's T).
    local_steps : int, default 1
        E, local work per round, in ``local_unit``.
    local_unit : {"steps", "epochs"}, default "steps"
        FedTAN/FixBN count local SGD steps; HBN/FedBN count local epochs.
    batch_size : int, default 32
        Per-client mini-batch B (Centralized uses K*B).
    lr : float, default 0.1
        Learning rate of round 1 (see ``schedule``).
    schedule : Schedule, optional
        Learning-rate schedule; default constant ``lr``.
    momentum : float, default 0.0
        SGD momentum.
    weight_decay : float, default 0.0
        SGD weight decay.
    momentum_mode : {"reset", "local", "global"}, default "reset"
        SGD momentum buffers: reset every round, kept per client across rounds, or uploaded,
        averaged and broadcast (FixBN Sec. 5; an algorithm may fix its own, e.g. ``FixBN(momentum=)``).
    participation : float, default 1.0
        Fraction of clients per round (HBN's C).
    seed : int, default 0
    device : str, default "cpu"
    dtype : {"float32", "float64"}, default "float32"
        Model and data precision (float64 for exactness tests).
    eval_every : int, default 1
        Evaluate every this many rounds (and the last).
    eval_last : int, default 0
        Also evaluate each of the last this many rounds (a "mean of the last 10 rounds" report).
    checkpoint_dir : str, optional
        Write a checkpoint there after every round; ``Simulation.run(resume=True)`` continues.
    progress : bool, default True
        Show a tqdm progress bar.
    batched : {"off", "auto", "on"}, default "auto"
        Train a round's clients as one batched computation (:mod:`bnfl.fl.batched`): never (the
        sequential reference engine), where the algorithm and model allow it (else
        sequentially), or always (an error naming what cannot be batched). The batched engine
        is the faster one and equals the sequential one up to rounding, not bitwise: ``"off"``
        gives the bitwise reference back. What ran and why is recorded in
        ``History.meta["batched"]["line"]``.
    augment : {"none", "cifar", "flip"}, default "none"
        Training-time augmentation of every training batch (:mod:`bnfl.data.augment`): none, the
        CIFAR recipe of FedTAN's and HBN's code (random crop with 4 pixels of black padding and a
        horizontal flip) or a flip only; on the device, seeded by the batch's place in its
        client's stream, the same on every engine. Test data and statistics requests are never
        augmented.
    max_loss : float, optional
        Divergence stop: a round whose mean training loss exceeds this (or is not a number) stops
        the run with :class:`DivergenceError`, and ``history.json``'s ``meta["stopped"]`` says
        why. Off (None) by default and in the experiments, whose runs may diverge on purpose;
        ``bnfl train`` sets :data:`TRAIN_MAX_LOSS` unless ``[train] max_loss`` is given
        (``inf`` turns it off). A non-finite local loss stops every run, whatever this is.
    """
    rounds: int = 10
    local_steps: int = 1
    local_unit: str = "steps"
    batch_size: int = 32
    lr: float = 0.1
    schedule: Schedule | None = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    momentum_mode: str = "reset"
    participation: float = 1.0
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    eval_every: int = 1
    eval_last: int = 0
    checkpoint_dir: str | None = None
    progress: bool = True
    batched: str = "auto"
    augment: str = "none"
    max_loss: float | None = None

    def __post_init__(self) -> None:
        def pos_int(name: str) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("rounds", "local_steps", "batch_size", "eval_every"):
            pos_int(name)
        if isinstance(self.eval_last, bool) or not isinstance(self.eval_last, int) or self.eval_last < 0:
            raise ValueError(f"eval_last must be an integer >= 0, got {self.eval_last!r}")
        if self.local_unit not in ("steps", "epochs"):
            raise ValueError(f"local_unit must be 'steps' or 'epochs', got {self.local_unit!r}")
        for name in ("lr", "momentum", "weight_decay", "participation"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise TypeError(f"{name} must be a finite number, got {v!r}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.momentum < 0 or self.weight_decay < 0:
            raise ValueError("momentum and weight_decay must be >= 0")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {self.participation}")
        if self.momentum_mode not in ("reset", "local", "global"):
            raise ValueError(f"momentum_mode must be 'reset', 'local' or 'global', got {self.momentum_mode!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if self.batched not in ("off", "auto", "on"):
            raise ValueError(f"batched must be 'off', 'auto' or 'on', got {self.batched!r}")

        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be one of {', '.join(map(repr, AUGMENTATIONS))}, got {self.augment!r}")
        if self.max_loss is not None and (isinstance(self.max_loss, bool) or not isinstance(self.max_loss, int | float)
                                          or not self.max_loss > 0):
            raise ValueError(f"max_loss must be a positive number (inf: no stop), got {self.max_loss!r}")
        if self.rounds > MAX_ROUNDS:
            raise ValueError(f"rounds must be at most {MAX_ROUNDS:,}, got {self.rounds:,}")
        if self.schedule is None:
            self.schedule = Schedule(lr=self.lr)

    def lr_at(self, r: int) -> float:
        """Learning rate of round ``r``."""
        assert self.schedule is not None
        return self.schedule.at(r, self.rounds)


@dataclass
class FederatedData:
    """Tensors plus the clients' index lists.

    Attributes
    ----------
    x_train, y_train, x_test, y_test : Tensor
    clients : list of 1-D int arrays
        Training indices of each client (a partition from :mod:`bnfl.data.partition`).
    client_test : list of 1-D int arrays, optional
        Each client's own test indices (FedBN's per-domain protocol); when absent, "own data"
        accuracy is measured on the client's training data.
    pad_value : Tensor of shape (C,), optional
        The stored value of a black pixel per channel, the padding of random crops
        (:func:`bnfl.data.augment.black_value`; default 0).
    stored_norm : (Tensor, Tensor), optional
        Per-channel mean and std of stored uint8 pixels (``x_train``/``x_test`` uint8): each batch
        is standardised with them on the device (:mod:`bnfl.data.stored`).
    """
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    clients: list[np.ndarray]
    client_test: list[np.ndarray] | None = None
    pad_value: Tensor | None = None
    stored_norm: tuple[Tensor, Tensor] | None = None

    def __post_init__(self) -> None:
        if len(self.clients) == 0:
            raise ValueError("FederatedData needs at least one client")
        n = self.x_train.shape[0]
        clients = []
        for i, c in enumerate(self.clients):
            try:
                arr = as_index_array(c, n)
            except (TypeError, ValueError) as err:
                raise type(err)(f"client {i}: {err}") from None
            if arr.size == 0:
                raise ValueError(f"client {i} has 0 samples; drop it or give it data")
            clients.append(arr)
        self.clients = clients
        if self.client_test is not None and len(self.client_test) != len(self.clients):
            raise ValueError("client_test must have one index array per client")
        self._check_finite()

    def _check_finite(self) -> None:
        """Raise ValueError naming the client (or test set) and first sample that is NaN or Inf.

        Only samples something reads are checked: each client's training rows, the test set and
        the clients' own test rows; floating-point labels too. Runs before anything is trained.
        """
        def bad_rows(t: Tensor) -> Tensor:  # (N, ...) -> (N,) bool: row holds a NaN or Inf
            if not t.is_floating_point() and not t.is_complex():
                return torch.zeros(t.shape[0], dtype=torch.bool, device=t.device)
            return ~torch.isfinite(t.reshape(t.shape[0], -1)).all(dim=1)

        def kind(t: Tensor, row: int) -> str:
            v = t[row].reshape(-1)
            return "nan" if bool(torch.isnan(v).any()) else "inf"

        def check(t: Tensor, name: str, owners: list[tuple[str, np.ndarray | None]]) -> None:
            bad = bad_rows(t)
            if not bool(bad.any()):
                return
            for who, idx in owners:
                rows = bad if idx is None else bad[torch.as_tensor(idx, device=bad.device)]
                hit = torch.nonzero(rows).flatten()
                if hit.numel() == 0:
                    continue
                j = int(hit[0])
                g = j if idx is None else int(idx[j])
                where = f"sample {j}" if idx is None else f"sample {j} (global index {g})"
                raise ValueError(
                    f"{who}: {name} {where} is not finite ({kind(t, g)}); clean or drop it before training"
                )

        clients = [(f"client {i}", c) for i, c in enumerate(self.clients)]
        for t, name in ((self.x_train, "x_train"), (self.y_train, "y_train")):
            check(t, name, clients)
        owners: list[tuple[str, np.ndarray | None]] = []
        for i, c in enumerate(self.client_test or []):  # the most specific owner first
            try:
                owners.append((f"client {i}'s test set", as_index_array(c, self.x_test.shape[0])))
            except (TypeError, ValueError) as err:
                raise type(err)(f"client {i}'s test set: {err}") from None
        owners.append(("test set", None))
        for t, name in ((self.x_test, "x_test"), (self.y_test, "y_test")):
            check(t, name, owners)

    @classmethod
    def from_split(cls, split: Any, clients: Sequence[Sequence[int]], client_test=None) -> FederatedData:
        """From a :class:`bnfl.data.Split` and a partition."""
        meta = getattr(split, "meta", None) or {}  # a Split, or any object with its four tensors
        pad = black_value(meta, int(split.x_train.shape[1])) if split.x_train.dim() == 4 else None
        norm = (torch.as_tensor(meta["mean"]).reshape(-1), torch.as_tensor(meta["std"]).reshape(-1)) \
            if meta.get("stored") == "uint8" else None
        return cls(split.x_train, split.y_train, split.x_test, split.y_test,
                   [np.asarray(c) for c in clients], client_test, pad, norm)


@dataclass
class History:
    """One dict per round; JSON/CSV convertible."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]

    def column(self, name: str) -> list[Any]:
        """Values of one field over the rounds (None where missing)."""
        return [row.get(name) for row in self.rows]

    def without_time(self) -> list[dict[str, Any]]:
        """Rows without machine-dependent fields (for determinism checks)."""
        return [{k: v for k, v in row.items() if k not in TIME_FIELDS} for row in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "rows": self.rows}

    def write(self, folder: str | os.PathLike) -> Path:
        """Write ``history.json`` and ``history.csv`` into ``folder`` (made if missing); returns the
        JSON file's path."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        self.to_json(out / "history.json")
        self.to_csv(out / "history.csv")
        return out / "history.json"

    def final_accuracy(self) -> str:
        """The last round's test accuracy as a percentage (``"87.50%"``), ``"-"`` where none was measured."""
        acc = self.rows[-1].get("test_acc") if self.rows else None
        return "-" if acc is None else f"{100 * acc:.2f}%"

    def to_json(self, path: str | os.PathLike) -> None:
        """Write ``{"meta": ..., "rows": [...]}``, one row per line.

        Each piece goes through json's C encoder (an ``indent`` would select the pure-Python one,
        which made a checkpoint every round cost a small model's round several times over).
        Atomic: an interrupted write leaves the previous file."""
        _atomic.write_text(path, self.dumps(), fsync=False)

    def dumps(self) -> str:
        """The JSON text of :meth:`to_json`."""
        rows = ",\n".join(json.dumps(row) for row in self.rows)
        return f'{{"meta": {json.dumps(self.meta)},\n "rows": [\n{rows}\n]}}\n'

    def to_csv(self, path: str | os.PathLike) -> None:
        """Scalar fields as CSV columns; lists are JSON-encoded cells."""
        fields: list[str] = []
        for row in self.rows:
            fields += [k for k in row if k not in fields]

        with _atomic.atomic_path(path, fsync=False) as tmp, open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for row in self.rows:
                w.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()})

    def plot(self, *others: History, loss: str = "auto"):
        """Test accuracy and loss against rounds, of this run and ``others`` on one figure (the
        seeds of one configuration as a band: :func:`bnfl.runs.plot_runs`); returns the Figure,
        nothing is written (``fig.savefig("curves.png")``; ``.svg``, ``.pdf`` too)."""
        return _run_groups.plot_runs([self, *others], loss=loss)

    def compare(self, *others: History, baseline: str) -> list[Any]:
        """Final test accuracy of each configuration among this run and ``others`` minus the
        ``baseline`` method's, paired by seed, with its 95% interval in points and a verdict
        (:func:`bnfl.runs.compare_to`: a list of :class:`bnfl.runs.Difference`)."""
        from bnfl import _paired  # here: bnfl._paired reads bnfl.plots, which reads bnfl.fl
        return _paired.compare_to([self, *others], baseline)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> History:
        d = json.loads(Path(path).read_text())
        return cls(rows=d["rows"], meta=d.get("meta", {}))
