"""One training run of :mod:`bnfl.fl` from a plain, hashable specification, cached.

A *run spec* is a JSON-able dict in the vocabulary of :class:`bnfl.fl.RunConfig` (what the
registry stores and hashes)::

    {"method": "fedtan", "method_options": {},              # bnfl.methods.METHODS ids
     "data": {"name": "digits", "form": "flat"},            # bnfl.data.DATASETS names
     "partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5},
     "model": {"name": "q_mlp_bn"},                         # norm comes from the method
     "rounds": 300, "seed": 0,
     "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1, "milestones": [], "fractions": [],
               "gamma": 0.1, "steps": [], "momentum": 0.0, "weight_decay": 0.0, "eval_every": 10}}

:func:`train` builds the run with :func:`bnfl.fl.build` (the one builder), runs it, and returns
a compact summary (curves at the evaluated rounds, final numbers, per-domain accuracies for
domain data). Identical specs, e.g. the FedTAN runs shared by Fig. 9, Table 2 and Fig. 10, are
computed once per :class:`~bnfl.experiments.cache.RunCache`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from bnfl.experiments.core import Context, config_hash

__all__ = ["canonical", "final", "load_data", "mean_std", "train", "train_seeds"]

#: Training defaults of the experiments (``spec["train"]``), filled in before hashing.
TRAIN_DEFAULTS: dict[str, Any] = {
    "local_steps": 5,
    "batch_size": 32,
    "lr": 0.1,
    "milestones": [],
    "fractions": [],
    "gamma": 0.1,
    "steps": [],
    "momentum": 0.0,
    "weight_decay": 0.0,
    "eval_every": 10,
}

def canonical(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with defaults filled in and irrelevant fields normalised, so equal runs hash equal.

    Centralized training pools all training data: its partition is irrelevant and set to iid
    (seed 0). FedTAN-II whose switch M >= R never switches: it is FedTAN.
    """
    from bnfl.methods import get

    out = copy.deepcopy(dict(spec))
    for key in ("data", "partition", "model", "method", "rounds"):
        if key not in out:
            raise ValueError(f"run spec lacks {key!r}: {dict(spec)}")
    from bnfl.data import DATASETS

    out["method"] = get(out["method"]).id
    if out["data"].get("name") not in DATASETS:
        raise ValueError(f"run spec data.name: unknown {out['data'].get('name')!r}; valid: {', '.join(DATASETS)}")
    out.setdefault("method_options", {})
    out.setdefault("seed", 0)
    out["train"] = {**copy.deepcopy(TRAIN_DEFAULTS), **dict(out.get("train") or {})}
    part = out["partition"] = dict(out["partition"])
    if part.get("kind") != "by_domain":  # by_domain: one client per domain of the data
        part.setdefault("num_clients", 5)
    part.setdefault("seed", int(out["seed"]))
    if out["method"] == "centralized" and part.get("kind") != "by_domain":
        out["partition"] = {"kind": "iid", "num_clients": part["num_clients"], "seed": 0}
    if out["method"] == "fedtan2" and int(out["method_options"].get("switch", 1)) >= int(out["rounds"]):
        out["method"], out["method_options"] = "fedtan", {}
    t = out["train"]
    t["steps"] = [[int(r), float(lr)] for r, lr in t["steps"]]
    t["milestones"] = [int(m) for m in t["milestones"]]
    t["fractions"] = [float(f) for f in t["fractions"]]
    return out


# ------------------------------------------------------------------------------------------ data


@lru_cache(maxsize=16)
def _load_cached(key: tuple, data_root: str | None) -> Any:
    from bnfl.data import DATASETS, load

    d = _thaw(key)
    name = d.pop("name")
    local = name in DATASETS and DATASETS[name].local
    return load(name, root=data_root if local else None, **d)


def _freeze(x: Any) -> Any:
    if isinstance(x, Mapping):
        return ("__dict__", tuple(sorted((k, _freeze(v)) for k, v in x.items())))
    if isinstance(x, list | tuple):
        return tuple(_freeze(v) for v in x)
    return x


def _thaw(x: Any) -> Any:
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "__dict__":
        return {k: _thaw(v) for k, v in x[1]}
    if isinstance(x, tuple):
        return [_thaw(v) for v in x]
    return x


def load_data(data: Mapping[str, Any], *, data_root: str | None = None) -> Any:
    """The :class:`bnfl.data.Split` named by a spec's ``data`` entry (memoised per process)."""
    return _load_cached(_freeze(dict(data)), data_root)


# ------------------------------------------------------------------------------------------ run


def _round(xs: Sequence[Any], nd: int = 5) -> list[Any]:
    return [None if x is None else round(float(x), nd) for x in xs]


def _run(spec: dict[str, Any], *, device: str, data_root: str | None, progress: bool,
         batched: str = "off") -> dict[str, Any]:
    from bnfl import fl
    from bnfl.fl.engine import accuracy

    start = time.perf_counter()
    split = load_data(spec["data"], data_root=data_root)
    cfg = fl.RunConfig.from_dict({**spec, "device": device,
                                  "train": {**spec["train"], "progress": progress, "batched": batched}})
    sim = fl.build(cfg, data_root=data_root, split=split)
    diverged = False
    try:
        history = sim.run()
    except fl.DivergenceError as err:
        history, diverged = err.history, True
    rows = history.rows
    evaluated = [r for r in rows if "test_acc" in r]
    out: dict[str, Any] = {
        "method": spec["method"],
        "diverged": diverged,
        "rounds_done": len(rows),
        "round": [int(r["round"]) for r in evaluated],
        "test_acc": _round([100 * r["test_acc"] for r in evaluated], 3),
        "comm_rounds": [int(r["comm_rounds"]) for r in evaluated],
        "bytes_total": [int(r["bytes_total"]) for r in evaluated],
        "train_loss": _round([r["train_loss"] for r in rows]),
        "n_test": int(sim.y_test.shape[0]),  # one test sample = 100 / n_test accuracy points
        "seconds": round(time.perf_counter() - start, 2),
    }
    if batched != "off":  # (summaries of sequential runs stay as they were)
        out["batched"] = history.meta["batched"]
    if evaluated and "client_test_acc" in evaluated[-1]:
        out["client_test_acc"] = _round([100 * a for a in evaluated[-1]["client_test_acc"]], 3)
        out["client_own_acc"] = _round([100 * a for a in evaluated[-1]["client_own_acc"]], 3)
        out["global_model_test_acc"] = round(100 * evaluated[-1]["global_model_test_acc"], 3)
    if split.domain_test is not None and not diverged:
        # Every model on every domain's test set (FedTAN Figs. 8 and 13).
        x_te, y_te = sim.x_test, sim.y_test
        dom = split.domain_test.to(x_te.device)
        subsets = [(x_te[dom == j], y_te[dom == j]) for j in range(len(split.domains))] + [(x_te, y_te)]

        def accs(model: Any) -> list[float]:
            return [round(100 * accuracy(model, x, y)[0], 3) for x, y in subsets]

        out["domains"] = list(split.domains)
        dom_train = split.domain_train.numpy()
        out["client_domain"] = [int(dom_train[int(idx[0])]) for idx in sim.client_indices]
        if sim.algorithm.personalized:
            # one copy per client (AlexNet-BN is 58M parameters)
            out["domain_acc_clients"] = [accs(sim.client_model(c)) for c in range(sim.num_clients)]
        else:
            out["domain_acc_global"] = accs(sim.global_model())
    return out


def train(ctx: Context, spec: Mapping[str, Any]) -> dict[str, Any]:
    """Run (or fetch from ``ctx.cache``) one training run; see the module docstring for ``spec``."""
    from bnfl.data import DATASETS

    spec = canonical(spec)
    key = {"spec": spec, "device": ctx.device}
    if DATASETS[spec["data"]["name"]].local:
        key["data_root"] = ctx.data_root
    if ctx.batched != "off":  # rounding differs from the sequential engine: another cached run
        key["batched"] = ctx.batched

    def compute() -> dict[str, Any]:
        return _run(spec, device=ctx.device, data_root=ctx.data_root, progress=ctx.progress, batched=ctx.batched)

    out = compute() if ctx.cache is None else ctx.cache.get_or_compute(key, compute)
    ctx.runs_used[config_hash(key)] = float(out.get("seconds", 0.0))
    return out


def train_seeds(ctx: Context, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """:func:`train` once per seed of ``ctx.seeds`` (the seed sets init, batches and partition)."""
    runs = []
    for s in ctx.seeds:
        one = dict(spec)
        one["seed"] = int(s)
        part = dict(one["partition"])
        part.setdefault("seed", int(s))
        one["partition"] = part
        runs.append(train(ctx, one))
    return runs


def final(run: Mapping[str, Any], key: str = "test_acc") -> float:
    """Last evaluated value of ``key`` (NaN when the run diverged before any evaluation)."""
    if run.get("diverged"):
        return float("nan")
    vals = run.get(key) or []
    return float(vals[-1]) if vals else float("nan")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1). One value has no spread: its std is NaN
    (shown as "1 seed", never as a misleading 0); any NaN value (a diverged run) gives NaN mean."""
    arr = np.asarray([v for v in values], dtype=float)
    if arr.size == 0 or np.isnan(arr).any():
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else float("nan")
