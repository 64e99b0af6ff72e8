"""``bnfl bench``: a method of your own on ``bench-bn-fixes``'s settings, beside the built-in ones.

The *protocol* is everything the comparison holds fixed: each setting's run specs (data, model,
partition, rounds, local steps, batch size, the shared recipe's rate), the seeds, and the tuning
rule (grid, tuning seeds, validation share, the edge extension). It is the protocol of the
``bench-bn-fixes`` entry (:mod:`.bn_fixes`, :mod:`.bn_fixes_settings`) at the chosen profile, and
its hash (:func:`protocol_hash`) names it: the method list is not part of it.

The built-in methods' outcomes under a protocol (per seed and setting: the accuracy at the tuned
rate, the tuning grid's validation scores, communication per round, wall time, and FedAvg+BN's
damage runs) are a *baseline file* (:func:`baseline_file`), stored with the package under
``baselines/<hash>.json`` (:data:`STORE`) or in a bench folder's ``baselines/``. A bench whose
protocol has a stored baseline file trains only the named methods, with the same seeds, partitions
and tuning rule; otherwise it trains the built-in methods too and stores them in its folder.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnfl import _atomic
from bnfl._checks import NonFiniteError
from bnfl.experiments import dryrun
from bnfl.experiments.benchmarks import bench_extended as ext
from bnfl.experiments.benchmarks.bn_fixes import METHODS as BUILT_IN
from bnfl.experiments.benchmarks.bn_fixes_settings import SETTINGS, metric, score, setting_spec
from bnfl.experiments.core import Context, config_hash, deep_merge, machine
from bnfl.experiments.curves import train_runs
from bnfl.experiments.domain_protocol import unseen_digit5
from bnfl.experiments.registry import get as get_entry
from bnfl.experiments.training import canonical
from bnfl.experiments.tuning import EXTEND, TUNE_SEEDS, VALIDATION, tuned_runs

__all__ = ["BUILT_IN", "DEFAULT_SUITE", "STORE", "SUITES", "baseline_file", "built_in", "dry_plan", "find_baselines",
           "method_record", "protocol", "protocol_hash", "read_baselines", "reference_record", "settings_of",
           "stored_files", "suite_of", "write_baselines"]

#: Where the committed baseline files live (shipped with the package: ``**/*.json``).
STORE = Path(__file__).with_name("baselines")
#: The entry whose protocol the bench runs.
ENTRY = "bench-bn-fixes"
#: The protocol version: raise it when the meaning of a field changes.
VERSION = 1


#: The benchmarks ``bnfl bench`` runs: ``extended`` (:mod:`.bench_extended`: five settings, a conv net,
#: 13 built-in methods) and ``bn-fixes`` (``bench-bn-fixes``' three settings on Q-MLP-BN, six methods).
SUITES: tuple[str, ...] = ("extended", "bn-fixes")
#: The suite ``bnfl bench`` runs unless ``--suite`` names another.
DEFAULT_SUITE = "extended"


def protocol(profile: str, suite: str = DEFAULT_SUITE) -> dict[str, Any]:
    """The frozen protocol of ``suite`` at ``profile`` (module docstring): per setting its scale, how
    it is scored, and the run specs (skewed split and iid control) without the method; the seeds;
    the tuning rule (``None``: every method at the shared recipe's rate). ``bn-fixes`` is
    ``bench-bn-fixes``' protocol (its hash unchanged since the first stored baselines); ``extended``
    adds the suite's name, its built-in methods and how each of them is trained."""
    if suite not in SUITES:
        raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
    if suite == "extended":
        return ext.protocol(profile) | {"version": VERSION}
    entry = get_entry(ENTRY)
    if profile not in entry.configs:
        raise ValueError(f"profile must be one of {', '.join(entry.configs)}, got {profile!r}")
    config = entry.config(profile)
    over = config.get("override") or {}
    settings = {}
    for s in SETTINGS:
        cand = config["settings"][s]
        skewed, control = (deep_merge(setting_spec(s, cand, "fedavg+bn", control=c), over) for c in (False, True))
        for spec in (skewed, control):
            del spec["method"]
        settings[s] = {"scale": cand, "metric": metric(s), "skewed": skewed, "control": control}
    tune = config.get("tune")
    if tune:
        tune = {"grid": [float(r) for r in tune["grid"]], "seeds": [int(x) for x in tune.get("seeds", TUNE_SEEDS)],
                "validation": float(tune.get("validation", VALIDATION)), "extend": int(tune.get("extend", EXTEND))}
    return {"version": VERSION, "entry": ENTRY, "settings": settings,
            "seeds": list(range(int(entry.default_seeds[profile]))), "tune": tune}


def protocol_hash(proto: Mapping[str, Any]) -> str:
    """The hash that names a protocol (:func:`bnfl.experiments.core.config_hash`)."""
    return config_hash(dict(proto))


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())


def suite_of(proto: Mapping[str, Any]) -> str:
    """The suite a protocol belongs to (``bn-fixes`` for the protocols that predate suites)."""
    return str(proto.get("suite", "bn-fixes"))


def settings_of(proto: Mapping[str, Any]) -> list[str]:
    """The protocol's settings, in the leaderboard's order."""
    return list(proto["settings"])


def built_in(proto: Mapping[str, Any]) -> tuple[str, ...]:
    """The built-in methods a baseline file of ``proto`` holds."""
    return tuple(proto.get("built_in", BUILT_IN))


#: Per suite: how a setting scores a test run, how it scores a tuning run, and how a spec trains over
#: the seeds (``(ctx, setting, spec, unseen) -> runs``).
_SUITE_FUNCS: dict[str, tuple[Callable[..., float], Callable[..., float], Callable[..., list[dict[str, Any]]]]] = {
    "extended": (ext.score, ext.tune_score, ext.train),
    "bn-fixes": (score, score, lambda ctx, setting, spec, unseen: train_runs(ctx, spec)),
}


def _score(proto: Mapping[str, Any], setting: str, run: Mapping[str, Any]) -> float:
    return _SUITE_FUNCS[suite_of(proto)][0](setting, run)


def _tune_score(proto: Mapping[str, Any], setting: str, run: Mapping[str, Any]) -> float:
    return _SUITE_FUNCS[suite_of(proto)][1](setting, run)


def _train(proto: Mapping[str, Any], setting: str) -> Callable[[Context, Mapping[str, Any]], list[dict[str, Any]]]:
    train, unseen = _SUITE_FUNCS[suite_of(proto)][2], list(proto["settings"][setting].get("unseen") or [])
    return lambda ctx, spec: train(ctx, setting, spec, unseen)


def method_spec(proto: Mapping[str, Any], setting: str, method: str) -> dict[str, Any]:
    """The run spec of ``method`` in ``setting`` (a built-in method of the extended suite may name
    another model and method id: FixUp trains FedAvg without normalisation on its residual net)."""
    how = (proto.get("method_specs") or {}).get(method) or {"method": method}
    return deep_merge(proto["settings"][setting]["skewed"], how)


def method_record(ctx: Context, proto: Mapping[str, Any], setting: str, method: str) -> dict[str, Any]:
    """One method in one setting under ``proto``: its rate tuned by the protocol's rule, then its runs
    on the protocol's seeds (``ctx.seeds``). The record: ``scores`` (per seed, the setting's score),
    ``stopped`` (the round each diverged run stopped at), ``lr``, ``tuning`` (the grid in words),
    ``comm_per_round`` (bytes up and down over all clients per round, measured by the engine on the
    first seed's run), ``seconds`` (wall time of the tuning and the runs) and ``n_test``; or, for a
    method that does not apply here, ``why`` (one line) and no scores."""
    s = proto["settings"][setting]
    why = (proto.get("not_applicable") or {}).get(setting, {}).get(method)
    if why:
        return {"why": f"does not apply here: {why}"}
    spec = method_spec(proto, setting, method)
    train = _train(proto, setting)
    start = time.perf_counter()
    tuned = None
    try:
        if proto.get("tune"):
            tuned, runs = tuned_runs(ctx, spec, proto["tune"], score=lambda r: _tune_score(proto, setting, r),
                                     train=train)
        else:
            runs = train(ctx, spec)
    except RuntimeError as err:  # tune_rate: every rate diverged on some seed
        return {"why": f"diverged at every rate of the grid ({_one_line(err)})"}
    except NonFiniteError as err:  # a statistics check refused what a diverging run produced
        return {"why": f"diverged: non-finite values in its training ({' '.join(str(err).split())})"}
    except (ValueError, TypeError, NotImplementedError) as err:  # the method refuses this setting
        return {"why": f"does not apply here: {_one_line(err)}"}
    first = runs[0]
    rounds = max(1, int(first.get("rounds_done") or 0))
    comm = float(first["bytes_total"][-1]) / rounds if first.get("bytes_total") else None
    return {"scores": [float(_score(proto, setting, r)) for r in runs],
            "stopped": [int(r.get("rounds_done", 0)) for r in runs if r.get("diverged")],
            "lr": tuned.rate if tuned else float(spec["train"]["lr"]),
            "tuning": tuned.describe() if tuned else "the shared recipe's rate (no tuning at this profile)",
            "at_edge": bool(tuned.at_edge) if tuned else False,
            "comm_per_round": comm, "seconds": round(time.perf_counter() - start, 2),
            "n_test": _n_test(setting, s, first)}


def _n_test(setting: str, s: Mapping[str, Any], run: Mapping[str, Any]) -> int:
    """The test set's size behind one score (each domain's own for the own-domain protocol)."""
    n = int(run.get("n_test") or 0)
    if s["metric"] == "unseen domain":
        return int(run.get("n_test_unseen") or 0)
    if s["metric"] == "own domain":
        n //= max(1, len(s["skewed"]["data"].get("domains") or [1]))
    return n


def reference_record(ctx: Context, proto: Mapping[str, Any], setting: str) -> dict[str, list[float]]:
    """FedAvg+BN at the shared recipe's rate on the skewed split (``damaged``) and on its iid split
    (``control``), per seed: the damage the fixes repair, as the calibration measured it."""
    s = proto["settings"][setting]
    train = _train(proto, setting)
    return {name: [float(_score(proto, setting, r)) for r in train(ctx, deep_merge(s[part], {"method": "fedavg+bn"}))]
            for name, part in (("damaged", "skewed"), ("control", "control"))}


def baseline_file(proto: Mapping[str, Any], profile: str, methods: Mapping[str, Mapping[str, Any]],
                  reference: Mapping[str, Any], *, source: str, machine_info: Mapping[str, Any] | None = None
                  ) -> dict[str, Any]:
    """The baseline file of ``proto``: the built-in methods' records ``{method: {setting: record}}``
    (:func:`method_record`) and the damage runs ``{setting: record}`` (:func:`reference_record`)."""
    names = built_in(proto)
    missing = [m for m in names if m not in methods or set(methods[m]) != set(settings_of(proto))]
    if missing:
        raise ValueError(f"a baseline file needs every built-in method in every setting; missing: {', '.join(missing)}")
    return {"protocol_hash": protocol_hash(proto), "profile": profile, "protocol": dict(proto),
            "machine": dict(machine_info or machine()), "source": source,
            "methods": {m: dict(methods[m]) for m in names}, "reference": dict(reference)}


def read_baselines(path: str | Path) -> dict[str, Any]:
    """A baseline file, or one line naming the file and what is wrong with it."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: no such baseline file; give a file that bnfl bench wrote (<out>/baselines/"
                         "<hash>.json) or leave --baselines out") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{p}: not a readable baseline file ({_one_line(err)}); remove it or rerun bnfl bench") from None
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict) or "protocol_hash" not in data:
        raise ValueError(f"{p}: not a baseline file (no protocol_hash and methods); remove it or rerun bnfl bench")
    return data


def stored_files(*folders: str | Path | None) -> list[Path]:
    """Every baseline file of :data:`STORE` and of ``folders`` (a bench folder's ``baselines/``)."""
    out: list[Path] = []
    for folder in (STORE, *folders):
        if folder is not None and Path(folder).is_dir():
            out += sorted(Path(folder).glob("*.json"))
    return out


def find_baselines(key: str, *folders: str | Path | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The stored baseline file of protocol ``key`` (``None`` when there is none) and every stored
    file read (what the mismatch line lists)."""
    seen = []
    for path in stored_files(*folders):
        data = read_baselines(path)
        data["path"] = str(path)
        seen.append(data)
        if data["protocol_hash"] == key:
            return data, seen
    return None, seen


def write_baselines(folder: str | Path, data: Mapping[str, Any]) -> Path:
    """Write a baseline file as ``folder/<hash>.json`` (atomically)."""
    path = Path(folder) / f"{data['protocol_hash']}.json"
    _atomic.write_text(path, json.dumps({k: v for k, v in data.items() if k != "path"}, indent=1) + "\n")
    return path


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (NaN where a run diverged or there is one seed)."""
    if not values or not all(math.isfinite(v) for v in values):
        return float("nan"), float("nan")
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
    return float(np.mean(values)), sd


def work_units(methods: Sequence[str], with_reference: bool, settings: Sequence[str] = SETTINGS
               ) -> list[tuple[str, str]]:
    """``(method or "reference", setting)`` in the order the bench trains them."""
    units = [("reference", s) for s in settings] if with_reference else []
    return units + [(m, s) for m in methods for s in settings]


def dry_plan(proto: Mapping[str, Any], units: Sequence[tuple[str, str]], *, profile: str, data_root: str | None,
             device: str = "cpu", time_steps: int = 2) -> Any:
    """What ``units`` would train under ``proto``, without training (:mod:`bnfl.experiments.dryrun`):
    every data set the protocol names (the unseen Digit-5 domain too) loaded from ``data_root``, every
    run the bench would ask for recorded by a :class:`~bnfl.experiments.dryrun.PlanCache` (each
    tuning grid at its widest, as stand-in scores tie at the top rate), each distinct network timed
    on ``device``; a :class:`~bnfl.experiments.dryrun.Plan` (``plan.lines()``, ``plan.ok``)."""
    plan = dryrun.Plan(f"bnfl bench ({suite_of(proto)} suite)", profile, "training", device, list(proto["seeds"]))
    unseen = [{"data": unseen_digit5(u, s["skewed"]["data"])} for s in proto["settings"].values()
              for u in s.get("unseen") or () if u.startswith("digit5:")]
    plan.data, plan.missing = dryrun.check_data({"settings": proto["settings"], "unseen": unseen}, data_root)
    if plan.missing:
        return plan
    cache = dryrun.PlanCache(data_root)
    ctx = Context(profile=profile, device=device, seeds=list(proto["seeds"]), data_root=data_root, cache=cache,
                  batched="off")
    with warnings.catch_warnings():  # the stand-in numbers are constant: warnings about them are noise
        warnings.simplefilter("ignore")
        run_units(ctx, proto, units)
    return dryrun.price(plan, [canonical(k["spec"]) for k in cache.keys.values() if "spec" in k], data_root,
                        time_steps)


def _unit(ctx: Context, proto: Mapping[str, Any], unit: tuple[str, str]) -> dict[str, Any]:
    name, setting = unit
    return reference_record(ctx, proto, setting) if name == "reference" else method_record(ctx, proto, setting, name)


def _worker_unit(ctx: Context, proto: Mapping[str, Any], unit: tuple[str, str]) -> tuple[dict[str, Any], dict]:
    torch.set_num_threads(1)
    ctx.runs_used.clear()
    return _unit(ctx, proto, unit), dict(ctx.runs_used)


def run_units(ctx: Context, proto: Mapping[str, Any], units: Sequence[tuple[str, str]],
              step: Callable[[str], None] | None = None, *, jobs: int = 1
              ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Train ``units`` (:func:`work_units`): ``({method: {setting: record}}, {setting: reference})``;
    ``step(description)`` is called after each unit (a progress bar's update). ``jobs > 1`` trains
    that many units at once in worker processes (one torch thread each); a run is the same
    computation whichever process trains it, so the records are those of ``jobs=1``, and two units
    that need one run share it through ``ctx.cache`` (the second waits and reads it)."""
    if int(jobs) != jobs or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if jobs == 1 or len(units) < 2:
        for unit in units:
            out[unit] = _unit(ctx, proto, unit)
            if step is not None:
                step(f"{unit[0]} / {unit[1]}")
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=int(jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_worker_unit, ctx, dict(proto), unit): unit for unit in units}
            for fut in as_completed(futures):
                unit = futures[fut]
                out[unit], used = fut.result()
                ctx.runs_used.update(used)
                if step is not None:
                    step(f"{unit[0]} / {unit[1]}")
    records: dict[str, dict[str, Any]] = {}
    reference: dict[str, Any] = {}
    for unit in units:  # the order of units, whichever finished first
        name, setting = unit
        if name == "reference":
            reference[setting] = out[unit]
        else:
            records.setdefault(name, {})[setting] = out[unit]
    return records, reference
