"""An entry's training runs stacked on the device: seeds, learning-rate grids and methods that
share a model shape, trained as one batched computation of S x K models per round.

Today's lock-step (:func:`bnfl.experiments.training.train_seeds`) stacks the seeds of one
configuration. With ``Context.stack == "entry"`` (what :func:`bnfl.experiments.runner.run`
chooses for the paper profile on a CUDA device), :func:`stack_entry` first *plans* the entry: its
``compute`` runs against a recording run cache (:class:`bnfl.experiments.dryrun.PlanCache`,
nothing trained) and every run it asks :func:`~bnfl.experiments.training.train` for is noted.
The runs that share a model shape (data, model, the method's norm layers, mini-batch) are built
and trained together by :func:`bnfl.fl.lockstep.run_lockstep`: per round, the participants of all
of them that can share a computation (:func:`bnfl.fl.batched_together.stacks`: the same client
hooks, frozen phase and optimiser settings; the learning rate may differ per row) are rows of one
:class:`~bnfl.nn.batched.BatchedNet`. Memory decides the depth: :func:`bnfl.fl.stack_depth.max_rows`
estimates a model's bytes and the device's free memory, groups with more rows are split, and
each summary states the depth (``summary["stack"]``). Their summaries go into the run cache
under the keys ``train`` asks for, and the entry's real ``compute`` then finds every planned run
there; a run the plan did not foresee (chosen from another run's result) trains as before.

A stacked run equals its own run up to rounding (clients padded to the largest batch of the
stack sum BN moments in another order; float64 1e-12, ``tests/test_fl_stacking.py``), so its
cache key differs from a seed group's (``"stack": "entry"``) and the quick profile, which does
not stack this way, keeps its numbers bitwise.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from bnfl.experiments import training
from bnfl.experiments.core import Context, config_hash
from bnfl.experiments.dryrun import PlanCache
from bnfl.fl import lockstep
from bnfl.fl.stack_depth import max_rows
from bnfl.methods import get

__all__ = ["STACK_MODES", "default_stack", "stack_entry"]

#: ``Context.stack``: each entry's seeds in lock-step (today's), or every run of the entry that
#: can share a computation
STACK_MODES = ("seeds", "entry")


def default_stack(profile: str, device: str, batched: str) -> str:
    """``"entry"`` for the paper profile on a CUDA device with the batched engine, else ``"seeds"``."""
    return "entry" if profile == "paper" and str(device).startswith("cuda") and batched != "off" else "seeds"


def _plan(ctx: Context, compute: Callable[[Context], Any]) -> list[dict[str, Any]]:
    """The run keys ``compute`` asks ``train`` for (recorded, nothing trained); the global random
    states are restored afterwards (the real computation starts where it would have)."""
    cache = PlanCache(ctx.data_root)
    plan_ctx = dataclasses.replace(ctx, cache=cache, progress=False, runs_used={})
    state = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        compute(plan_ctx)
    except Exception:  # noqa: BLE001 - a plan that stops early stacks what it found; the rest trains as before
        pass
    finally:
        torch.set_rng_state(state[0])
        np.random.set_state(state[1])
        random.setstate(state[2])
    return [k for k in cache.keys.values() if k.get("stack") == "entry" and "spec" in k and "observers" not in k]


def _shape_key(spec: Mapping[str, Any]) -> str:
    """Runs with equal keys build the same architecture on the same samples and batch size."""
    t = spec.get("train") or {}
    return json.dumps([spec["data"], spec["model"], get(spec["method"]).norm, t.get("batch_size"),
                       t.get("dtype", "float32")], sort_keys=True, default=str)


def stack_entry(ctx: Context, compute: Callable[[Context], Any]) -> dict[str, Any]:
    """Train the runs of ``compute`` (an entry's compute with its configuration bound) stacked
    (module docstring) and store their summaries in ``ctx.cache``; returns what was stacked:
    ``{"planned": runs, "stacked": runs trained here, "groups": [{"runs", "depth", ...}]}``."""
    if ctx.stack != "entry" or ctx.cache is None or ctx.batched == "off":
        return {"planned": 0, "stacked": 0, "groups": []}
    keys = [k for k in _plan(ctx, compute) if ctx.cache.get(k) is None]
    groups: dict[str, list[dict[str, Any]]] = {}
    for k in keys:
        groups.setdefault(_shape_key(k["spec"]), []).append(k)
    report: dict[str, Any] = {"planned": len(keys), "stacked": 0, "groups": []}
    for members in groups.values():
        with ctx.cache.hold({"stack": [config_hash(k) for k in members]}):
            todo = [k for k in members if ctx.cache.get(k) is None]
            if not todo:
                continue
            first = training._build(todo[0]["spec"], device=ctx.device, data_root=ctx.data_root, progress=False,
                                    batched=ctx.batched)[0]
            batch = int(todo[0]["spec"]["train"]["batch_size"])
            depth = max_rows(first.model, tuple(first.x_train.shape[1:]), batch, device=ctx.device,
                             dtype=first.x_train.dtype)
            per_run = max(1, max(first.num_clients, 1))  # rows a run may stack (its participants at most)
            runs_at_once = max(1, depth.rows // per_run)
            del first
            for at in range(0, len(todo), runs_at_once):
                chunk = todo[at:at + runs_at_once]
                _train_chunk(ctx, chunk, depth.rows, depth.as_dict(), lockstep.run_lockstep)
                report["stacked"] += len(chunk)
                report["groups"].append({"runs": len(chunk), "method": sorted({k["spec"]["method"] for k in chunk}),
                                         **depth.as_dict()})
                if ctx.progress:
                    print(f"stacked {len(chunk)} runs ({', '.join(report['groups'][-1]['method'])}): "
                          f"{depth.describe()}", flush=True)
    return report


def _train_chunk(ctx: Context, keys: list[dict[str, Any]], rows: int, depth: dict[str, Any],
                 run_lockstep: Callable[..., Any]) -> None:
    start = time.perf_counter()
    options = training.device_options(ctx)
    built = [(k, *training._build(k["spec"], device=ctx.device, data_root=ctx.data_root, progress=False,
                                  batched=ctx.batched, options=options)) for k in keys]
    together = [sim for _, sim, _ in built if sim.batched_engine is not None]
    outcomes = dict(zip(map(id, together), run_lockstep(together, max_rows=rows, stack_coupled=True), strict=True)) \
        if len(together) > 1 else {}
    for _, sim, _ in built:
        if id(sim) not in outcomes:
            outcomes[id(sim)] = training._outcome(sim)
    seconds = (time.perf_counter() - start) / len(built)
    for k, sim, split in built:
        out = training._summary(k["spec"], sim, split, outcomes[id(sim)], batched=ctx.batched, seconds=seconds)
        out["stack"] = {"runs": len(together) if sim.batched_engine is not None and len(together) > 1 else 1, **depth}
        ctx.cache.put(k, out)
