"""Result and run-context types of bnfl's reproductions, and the hashes that key them.

A :class:`Result` carries our numbers (``rows``), the paper's reported numbers beside
them (``paper``, verbatim), and :class:`~bnfl.experiments.claims.Claim` verdicts: each
claim encodes one "Check" line of the catalog and records the measured value, the
threshold and the margin (``margin >= 0`` passes). A failing claim is a finding, not an
error. The registry of entries is :mod:`bnfl.experiments.registry`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnfl.experiments.claims import Claim

__all__ = [
    "PROFILES",
    "Context",
    "Result",
    "code_fingerprint",
    "config_hash",
    "deep_merge",
]

#: Profiles every entry defines. ``paper``: the paper's setup (local datasets, GPU if
#: asked); ``quick``: embedded data on 2 CPU cores, minutes; ``smoke``: seconds, for CI.
PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")

@dataclass
class Result:
    """What one entry's run produced (all JSON-serialisable).

    Attributes
    ----------
    id, title, profile : str
    seeds : list of int
        The seeds averaged over (their number is the repeat count).
    rows : list of dict
        Our numbers, one dict per table row / plotted point; keys are column names.
    paper : list of dict
        The paper's reported numbers, verbatim (empty when the paper gives none).
    claims : list of Claim
    series : dict
        Curves and other arrays the plot needs (``{name: {"x": [...], "y": [...]}}``).
    config : dict
        The full configuration that ran; ``config_hash`` identifies it.
    protocol_hash : str
        The hash of the protocol declaration it ran under (:func:`bnfl.experiments.protocols.protocol_hash`;
        empty in results stored before protocols were declared and not stamped since).
    deviations : list of str
        Where this run departs from the catalog's recipe for the profile, and why.
    notes : list of str
        Explanations (inconsistencies in the paper, caveats of the proxy).
    runs : dict
        ``{run hash: seconds}`` of the training runs behind the numbers, with the time each
        took when it was computed (runs shared with other entries appear in each of them).
    machine : dict
        Where the numbers were computed (:func:`machine`): CPU, the vector instruction set
        torch's CPU kernels used, Python, torch and numpy versions (results stored before the Python
        version was recorded lack ``python``). Results are bitwise reproducible on
        the same kind of machine; another instruction set rounds differently (last digits of
        losses, now and then one test sample of accuracy).
    """

    id: str
    title: str
    profile: str
    seeds: list[int]
    rows: list[dict[str, Any]]
    paper: list[dict[str, Any]]
    claims: list[Claim]
    series: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    protocol_hash: str = ""
    deviations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    device: str = "cpu"
    duration_s: float = 0.0
    git_commit: str | None = None
    command: str = ""
    runs: dict[str, float] = field(default_factory=dict)
    machine: dict[str, str] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``"fail"`` if any claim failed, else ``"inconclusive"`` if any was, else ``"pass"`` if at
        least one passed, else ``"n/a"``."""
        verdicts = [c.verdict for c in self.claims]
        for v in ("fail", "inconclusive", "pass"):
            if v in verdicts:
                return v
        return "n/a"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["claims"] = [c.to_dict() for c in self.claims]
        d["verdict"] = self.verdict
        return d

    def to_json(self) -> str:
        # Keys in the order the entry wrote them (deterministic): a table's columns read as the
        # entry laid them out (results saved before kept their keys sorted).
        return json.dumps(_jsonable(self.to_dict()), indent=1) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Result:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["claims"] = [Claim.from_dict(c) for c in d.get("claims", [])]
        return cls(**kw)


def labels_first(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with their text columns (every present value a string: method, setting, ...)
    moved before the numbers, each group in first-seen order: results saved with sorted keys
    otherwise show e.g. ``method`` after the accuracies."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    text = [c for c in cols if all(isinstance(r[c], str) for r in rows if r.get(c) is not None)
            and any(r.get(c) is not None for r in rows)]
    order = text + [c for c in cols if c not in text]
    return [{c: r[c] for c in order if c in r} for r in rows]


def machine() -> dict[str, str]:
    """What decides the last bits of a CPU result: the CPU model, the instruction set torch's CPU
    kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``, e.g. ``AVX2``, ``AVX512``;
    ``ATEN_CPU_CAPABILITY`` overrides it), and the Python, torch and numpy versions (``bnfl compare``
    and ``REPORT.md`` show them beside the numbers)."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
        return _jsonable(x.item())
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def config_hash(obj: Any) -> str:
    """Stable 16-hex-digit hash of a JSON-able configuration (key order does not matter)."""
    text = json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """16-hex-digit hash of the source of the installed ``bnfl`` package.

    Part of every stored result's and cached run's key, so that a change to bnfl itself
    (the engine, a model, a partition) invalidates what it could have changed instead of
    silently reusing numbers computed by older code.
    """
    root = Path(__file__).resolve().parents[1]  # the bnfl package folder
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _resolve_data_root(data_root: str | os.PathLike[str] | None) -> str | None:
    """The data root a run uses: ``data_root``, else ``$BNFL_DATA``, else ``None`` (``~`` expanded)."""
    root = data_root if data_root is not None else os.environ.get("BNFL_DATA")
    return None if root in (None, "") else str(Path(root).expanduser())


def _seed_list(entry_seeds: int, seeds: int | Sequence[int] | None) -> list[int]:
    """The seeds a run uses: the entry's count (``seeds=None``), ``range(seeds)`` or the given list."""
    if seeds is None:
        return list(range(entry_seeds))
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        return list(range(seeds))
    out = [int(s) for s in seeds]
    if not out:
        raise ValueError("seeds is empty; give a count >= 1 or a list of seeds")
    return out


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``base`` with ``override`` merged in, recursively for nested mappings."""
    out = copy.deepcopy(dict(base))
    for k, v in (override or {}).items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


@dataclass
class Context:
    """What an entry's ``compute`` may use besides its configuration.

    Attributes
    ----------
    profile : str
    device : str
        ``"cpu"`` or ``"cuda"`` (any torch device string).
    seeds : list of int
    data_root : str or None
        Folder with the paper-profile datasets (``--data-root`` / ``BNFL_DATA``).
    cache : RunCache or None
        Shared training-run cache (see :mod:`bnfl.experiments.cache`).
    progress : bool
        Show per-run progress bars.
    batched : {"off", "auto", "on"}
        :attr:`bnfl.fl.TrainConfig.batched` of every training run (:mod:`bnfl.fl.batched`):
        ``"auto"`` trains a round's clients as one computation where the run allows it, and
        the seeds of :func:`~bnfl.experiments.training.train_seeds` together (equal to the
        sequential engine up to rounding, not bitwise).
    stack : {"seeds", "entry"}
        What trains as one batched computation: the seeds of one configuration (``"seeds"``,
        the default), or every run of the entry that shares a model shape: seeds, learning-rate
        grids, methods (``"entry"``, :mod:`bnfl.experiments.stacking`; what
        :func:`~bnfl.experiments.runner.run` chooses for the paper profile on a CUDA device).
    device_options : bnfl.fl.device_options.DeviceOptions or None
        How the batched engine runs its steps on a GPU (CUDA graphs, channels-last, TF32, bf16).
        ``None``: CUDA graphs with ``stack="entry"`` on a CUDA device, nothing otherwise
        (:func:`bnfl.experiments.training.device_options`).
    seed_groups : tuple of int
        Sizes of the lock-step groups :func:`~bnfl.experiments.training.train_seeds` trains the
        seeds in, in seed order; the seeds past the listed sizes form one more group. ``()`` (the
        default): all seeds one group. An entry that grew from 3 seeds to 5 declares ``(3,)``:
        its first three seeds are then the very runs (bitwise) of the 3-seed entries that share
        them, and seeds 3-4 train as a pair.
    """

    profile: str
    device: str = "cpu"
    seeds: list[int] = field(default_factory=lambda: [0])
    data_root: str | None = None
    cache: Any = None
    progress: bool = False
    batched: str = "off"
    stack: str = "seeds"
    device_options: Any = None
    seed_groups: tuple[int, ...] = ()
    #: ``{run hash: seconds}`` of every training run this entry used (fresh or from the cache).
    runs_used: dict[str, float] = field(default_factory=dict)
