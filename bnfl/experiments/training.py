"""One training run of :mod:`bnfl.fl` from a plain, hashable specification, cached.

A *run spec* is a JSON-able dict in the vocabulary of :class:`bnfl.train.RunConfig` (what the
registry stores and hashes)::

    {"method": "fedtan", "method_options": {},              # bnfl.methods.METHODS ids
     "data": {"name": "digits", "form": "flat"},            # bnfl.data.DATASETS names
     "partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5},
     "model": {"name": "q_mlp_bn"},                         # norm comes from the method
     "rounds": 300, "seed": 0,
     "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1, "milestones": [], "fractions": [],
               "gamma": 0.1, "steps": [], "momentum": 0.0, "weight_decay": 0.0, "eval_every": 10}}

:func:`train` builds the run with :func:`bnfl.train.build` (the one builder), runs it, and returns
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

from bnfl import train as run_layer
from bnfl.data import DATASETS, load
from bnfl.experiments.core import Context, config_hash, deep_merge
from bnfl.experiments.observers import Observer, observer_keys
from bnfl.fl import lockstep
from bnfl.fl.device_options import DeviceOptions
from bnfl.fl.engine import DivergenceError, accuracy
from bnfl.methods import get

__all__ = ["canonical", "device_options", "domain_accuracies", "final", "load_data", "mean_over_clients", "mean_std",
           "seed_groups", "train", "train_grid", "train_seeds"]

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

    The Method table says what else is the same run: a method that pools all training data
    for the experiments (:attr:`~bnfl.methods.Method.iid_pool`, centralized training) gets one
    iid partition (seed 0); a method that is another for short runs is that one
    (:meth:`~bnfl.methods.Method.for_rounds`: FedTAN-II whose switch M >= R never switches, it
    is FedTAN).
    """
    out = copy.deepcopy(dict(spec))
    for key in ("data", "partition", "model", "method", "rounds"):
        if key not in out:
            raise ValueError(f"run spec lacks {key!r}: {dict(spec)}")

    method = get(out["method"])
    out["method"] = method.id
    if out["data"].get("name") not in DATASETS:
        raise ValueError(f"run spec data.name: unknown {out['data'].get('name')!r}; valid: {', '.join(DATASETS)}")
    out.setdefault("method_options", {})
    out.setdefault("seed", 0)
    out["train"] = {**copy.deepcopy(TRAIN_DEFAULTS), **dict(out.get("train") or {})}
    part = out["partition"] = dict(out["partition"])
    if part.get("kind") != "by_domain":  # by_domain: one client per domain of the data
        part.setdefault("num_clients", 5)
    part.setdefault("seed", int(out["seed"]))
    if method.iid_pool and part.get("kind") != "by_domain":  # the table says which (bnfl.methods.Method)
        out["partition"] = {"kind": "iid", "num_clients": part["num_clients"], "seed": 0}
    out["method"], out["method_options"] = method.for_rounds(out["rounds"], out["method_options"])
    t = out["train"]
    t["steps"] = [[int(r), float(lr)] for r, lr in t["steps"]]
    t["milestones"] = [int(m) for m in t["milestones"]]
    t["fractions"] = [float(f) for f in t["fractions"]]
    return out


# ------------------------------------------------------------------------------------------ data


@lru_cache(maxsize=16)
def _load_cached(key: tuple, data_root: str | None) -> Any:
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


def device_options(ctx: Context) -> Any:
    """The :class:`~bnfl.fl.device_options.DeviceOptions` of ``ctx``'s batched runs: its own, or
    CUDA graphs when the entry's runs are stacked (``ctx.stack == "entry"``) on a CUDA device, or
    none (the default everywhere else: the quick profile's runs are as they were)."""
    if ctx.device_options is not None:
        return ctx.device_options
    return DeviceOptions(cuda_graphs=ctx.stack == "entry" and str(ctx.device).startswith("cuda"))


def _build(spec: dict[str, Any], *, device: str, data_root: str | None, progress: bool,
           batched: str = "off", observers: Sequence[Observer] = (), options: Any = None) -> tuple[Any, Any]:
    """The :class:`bnfl.fl.Simulation` of ``spec`` and its data split (``observers`` attached;
    ``options``: the batched engine's :class:`~bnfl.fl.device_options.DeviceOptions`, default none)."""
    split = load_data(spec["data"], data_root=data_root)
    cfg = run_layer.RunConfig.from_dict({**spec, "device": device,
                                  "train": {**spec["train"], "progress": progress, "batched": batched}})
    sim = run_layer.build(cfg, data_root=data_root, split=split)
    if options is not None and sim.batched_engine is not None:
        sim.batched_engine.options = options
    for obs in observers:
        obs.attach(sim)
    return sim, split


def _run(spec: dict[str, Any], *, device: str, data_root: str | None, progress: bool,
         batched: str = "off", observers: Sequence[Observer] = (), options: Any = None) -> dict[str, Any]:
    start = time.perf_counter()
    sim, split = _build(spec, device=device, data_root=data_root, progress=progress, batched=batched,
                        observers=observers, options=options)
    return _summary(spec, sim, split, _outcome(sim), batched=batched, seconds=time.perf_counter() - start,
                    observers=observers)


def _outcome(sim: Any) -> Any:
    """``sim.run()``: its History, or the DivergenceError it stopped with (which keeps the
    history so far)."""
    try:
        return sim.run()
    except DivergenceError as err:
        return err


def _summary(spec: dict[str, Any], sim: Any, split: Any, outcome: Any, *, batched: str,
             seconds: float, observers: Sequence[Observer] = ()) -> dict[str, Any]:
    """The compact record of a finished run (``outcome``: its History, or the DivergenceError
    it stopped with; any other exception is raised), with the fields each of ``observers``
    records (:meth:`~bnfl.experiments.observers.Observer.record`)."""
    if isinstance(outcome, BaseException) and not isinstance(outcome, DivergenceError):
        raise outcome
    diverged = isinstance(outcome, DivergenceError)
    history = outcome.history if diverged else outcome
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
        "seconds": round(seconds, 2),
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
    for obs in observers:
        out.update(obs.record(sim, split, history, diverged=diverged))
    return out


def _key(ctx: Context, spec: dict[str, Any], group: Sequence[int] | None = None,
         observers: Sequence[Observer] = (), grid: Sequence[float] | None = None) -> dict[str, Any]:
    """The cache key of the canonical ``spec`` run under ``ctx`` (``group``: the seeds it trained
    beside, :func:`train_seeds`; ``grid``: and the learning rates, :func:`train_grid`;
    ``observers``: what it records beyond the summary)."""
    key = {"spec": spec, "device": ctx.device}
    if DATASETS[spec["data"]["name"]].local:
        key["data_root"] = ctx.data_root
    if ctx.batched != "off":  # rounding differs from the sequential engine: another cached run
        key["batched"] = ctx.batched
    if ctx.stack == "entry":  # stacked with the entry's other runs (bnfl.experiments.stacking)
        key["stack"] = "entry"
    elif group is not None:  # and from one seed's own batched run (the padding depends on the group)
        key["seed_group"] = [int(s) for s in group]
        if grid is not None:  # trained beside the other rates of a grid: another padding again
            key["lr_grid"] = [float(r) for r in grid]
    opts = device_options(ctx)
    if opts.any:  # CUDA graphs (equal to rounding), TF32, bf16, channels-last: cached apart
        key["device_options"] = opts.describe()
    if observers:  # (keys of runs without observers stay as they were)
        key["observers"] = observer_keys(observers)
    return key


def train(ctx: Context, spec: Mapping[str, Any], *, ready: Mapping[str, dict[str, Any]] | None = None,
          group: Sequence[int] | None = None, observers: Sequence[Observer] = (),
          grid: Sequence[float] | None = None) -> dict[str, Any]:
    """Run (or fetch from ``ctx.cache``) one training run; see the module docstring for ``spec``.
    ``ready``: summaries already computed by :func:`train_seeds` for the seeds ``group``, by
    cache key. ``observers``: :class:`~bnfl.experiments.observers.Observer` instances whose
    round hooks run inside the training loop and whose fields join the summary (default none)."""
    spec = canonical(spec)
    observers = tuple(observers)
    key = _key(ctx, spec, group, observers, grid)

    def compute() -> dict[str, Any]:
        done = (ready or {}).get(config_hash(key))
        if done is not None:
            return done
        return _run(spec, device=ctx.device, data_root=ctx.data_root, progress=ctx.progress, batched=ctx.batched,
                    observers=observers, options=device_options(ctx))

    out = compute() if ctx.cache is None else ctx.cache.get_or_compute(key, compute)
    ctx.runs_used[config_hash(key)] = float(out.get("seconds", 0.0))
    return out


def _seed_spec(spec: Mapping[str, Any], seed: int) -> dict[str, Any]:
    one = dict(spec)
    one["seed"] = int(seed)
    part = dict(one["partition"])
    part.setdefault("seed", int(seed))
    one["partition"] = part
    return one


def _lockstep(ctx: Context, specs: Sequence[dict[str, Any]], group: Sequence[int],
              observers: Sequence[Observer] = (), grid: Sequence[float] | None = None) -> dict[str, dict[str, Any]]:
    """The summaries of ``specs`` (canonical, one per seed of ``group``), trained together unless
    ``ctx.cache`` holds all of them: :func:`bnfl.fl.lockstep.run_lockstep` trains every seed's
    clients in one batched computation per round. A seed's run then equals its own batched run
    up to rounding (float64: 1e-12, ``tests/test_fl_lockstep.py``), not bitwise (the clients are
    padded to the largest batch of the group), so it is cached under its group
    (:func:`_key`), and the same seeds always train in the same group. Runs the batched engine
    cannot take (:func:`bnfl.fl.batched_choice.batched_obstacle`) run one by one."""
    if ctx.cache is None:
        return _lockstep_compute(ctx, specs, group, observers, grid)
    keys = [_key(ctx, s, group, observers, grid) for s in specs]
    if all(ctx.cache.get(k) is not None for k in keys):
        return {}
    # One process trains the group; another that needs it waits (or, in `reproduce --jobs N`'s
    # workers, runs another entry meanwhile) and then reads the stored runs.
    with ctx.cache.hold({"lockstep": keys}):
        if all(ctx.cache.get(k) is not None for k in keys):
            return {}
        done = _lockstep_compute(ctx, specs, group, observers, grid)
        for k in keys:
            ctx.cache.put(k, done[config_hash(k)])
    return done


def _lockstep_compute(ctx: Context, specs: Sequence[dict[str, Any]], group: Sequence[int],
                      observers: Sequence[Observer], grid: Sequence[float] | None = None) -> dict[str, dict[str, Any]]:
    start = time.perf_counter()
    built = [(s, *_build(s, device=ctx.device, data_root=ctx.data_root, progress=ctx.progress,
                         batched=ctx.batched, observers=observers, options=device_options(ctx))) for s in specs]
    together = [sim for _, sim, _ in built if sim.batched_engine is not None]
    outcomes = dict(zip(map(id, together), lockstep.run_lockstep(together), strict=True)) if len(together) > 1 else {}
    for _, sim, _ in built:
        if id(sim) not in outcomes:
            outcomes[id(sim)] = _outcome(sim)
    seconds = (time.perf_counter() - start) / len(built)  # each run's share of the joint time
    return {config_hash(_key(ctx, s, group, observers, grid)): _summary(s, sim, split, outcomes[id(sim)],
                                                                  batched=ctx.batched, seconds=seconds,
                                                                  observers=observers)
            for s, sim, split in built}


def train_seeds(ctx: Context, spec: Mapping[str, Any], *, observers: Sequence[Observer] = ()) -> list[dict[str, Any]]:
    """:func:`train` once per seed of ``ctx.seeds`` (the seed sets init, batches and partition).
    With the batched engine (``ctx.batched`` ``"auto"``/``"on"``) and several seeds, the seeds
    train together, their clients in one batched computation per round (:func:`_lockstep`).
    ``observers``: as in :func:`train`; their round hooks run in each seed's own loop."""
    observers = tuple(observers)
    if ctx.batched == "off" or len(ctx.seeds) < 2:
        return [train(ctx, canonical(_seed_spec(spec, s)), observers=observers) for s in ctx.seeds]
    out = []
    for group in seed_groups(ctx.seeds, ctx.seed_groups):
        specs = [canonical(_seed_spec(spec, s)) for s in group]
        if len(specs) < 2:
            out += [train(ctx, one, observers=observers) for one in specs]
            continue
        ready = _lockstep(ctx, specs, group, observers)
        out += [train(ctx, one, ready=ready, group=group, observers=observers) for one in specs]
    return out


def train_grid(ctx: Context, spec: Mapping[str, Any], rates: Sequence[float]) -> dict[float, list[dict[str, Any]]]:
    """``spec`` at every learning rate of ``rates``, once per seed of ``ctx.seeds``: ``{lr: runs}``.

    With the batched engine the whole grid (rates x seeds) trains as one lock-step group, its
    rows differing only in the learning rate (one per row, :func:`bnfl.fl.batched_together.stacks`),
    so a grid of four rates costs about one batched run of all of them, not four. Each run equals
    its own batched run up to rounding and is cached under its grid (:func:`_key`); with the
    batched engine off every run trains alone, exactly as :func:`train` would.
    """
    rates = [float(r) for r in rates]
    if len(set(rates)) != len(rates) or not rates:
        raise ValueError(f"train_grid: the rates must be distinct and at least one, got {rates}")
    specs = {(lr, int(s)): canonical(_seed_spec(deep_merge(spec, {"train": {"lr": lr}}), s))
             for lr in rates for s in ctx.seeds}
    if ctx.batched == "off" or len(specs) < 2:
        return {lr: [train(ctx, specs[(lr, int(s))]) for s in ctx.seeds] for lr in rates}
    group = [int(s) for s in ctx.seeds]
    ready = _lockstep(ctx, list(specs.values()), group, (), rates)
    return {lr: [train(ctx, specs[(lr, s)], ready=ready, group=group, grid=rates) for s in group] for lr in rates}


def seed_groups(seeds: Sequence[int], sizes: Sequence[int] = ()) -> list[list[int]]:
    """``seeds`` cut into lock-step groups of the given ``sizes`` in order; the rest is one more
    group (:attr:`bnfl.experiments.core.Context.seed_groups`). ``seed_groups([0, 1, 2, 3, 4], (3,))``
    is ``[[0, 1, 2], [3, 4]]``; no sizes: one group."""
    seeds, out, at = [int(s) for s in seeds], [], 0
    for n in sizes:
        if at >= len(seeds):
            break
        out.append(seeds[at:at + int(n)])
        at += int(n)
    return out + ([seeds[at:]] if at < len(seeds) else [])


def final(run: Mapping[str, Any], key: str = "test_acc") -> float:
    """Last evaluated value of ``key`` (NaN when the run diverged before any evaluation)."""
    if run.get("diverged"):
        return float("nan")
    vals = run.get(key) or []
    return float(vals[-1]) if vals else float("nan")


def domain_accuracies(run: Mapping[str, Any]) -> list[float]:
    """Test accuracy (%) of each client on its own domain's test set (FedBN's protocol).

    Personalised runs (``domain_acc_clients``): each client's model on its own domain (the mean over
    a domain's clients when it has several, ``client_domain``). Shared-model runs
    (``domain_acc_global``): the global model on each domain. A diverged run gives NaNs.
    """
    if run.get("diverged"):
        n = len(run.get("domains") or [])
        return [float("nan")] * n
    if "domain_acc" in run:  # recorded by bnfl.experiments.domain_protocol.FedBNProtocol
        return [float(v) for v in run["domain_acc"]]
    if "domain_acc_clients" in run:
        table = run["domain_acc_clients"]
        owner = run.get("client_domain") or list(range(len(table)))  # client -> its domain
        n = len(run.get("domains") or table)
        per = [[float(table[c][owner[c]]) for c in range(len(table)) if owner[c] == j] for j in range(n)]
        return [float(np.mean(v)) for v in per]  # several clients of a domain: their mean
    if "domain_acc_global" in run:
        return [float(v) for v in run["domain_acc_global"][:-1]]  # the last entry is the whole test set
    raise ValueError("run has no per-domain accuracies: train it on data with domains (partition kind 'by_domain')")


def mean_over_clients(run: Mapping[str, Any]) -> float:
    """The equal-weight mean over clients of :func:`domain_accuracies` (FedBN's row mean)."""
    return float(np.mean(domain_accuracies(run)))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1). One value has no spread: its std is NaN
    (shown as "1 seed", never as a misleading 0); any NaN value (a diverged run) gives NaN mean."""
    arr = np.asarray([v for v in values], dtype=float)
    if arr.size == 0 or np.isnan(arr).any():
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else float("nan")
