"""Throughput on one device (a GPU; CPU for a code-path check): federated rounds against a plain
PyTorch training loop, and what every paper-profile entry would cost there (issue 27 item 5).

(a) ResNet-20 (BN) on CIFAR-sized random inputs (3x32x32, 10 classes), K = 5 clients, B = 32,
    E = 5 local steps per round: a FedTAN round and a FedAvg+BN round, batched (the default
    engine) and sequential, against a plain PyTorch loop (``torch.optim.SGD``) of E steps on the
    union batch (K x B images) on the same device; images per second (K x B x E per round),
    ``--warmup`` rounds (steps) excluded, ``torch.cuda.synchronize()`` around every timing.
(b) The estimated wall time of every paper-profile entry on this device
    (:mod:`paper_plan`: each entry's runs enumerated from its registered paper profile, each run's
    images): for every distinct (model, input shape, norm, union batch) of the runs, the plain
    loop's training images per second are measured here; a run's time is its training images over
    that rate times the FL round's efficiency measured in (a) (FedTAN's for FedTAN's runs,
    FedAvg+BN's, batched, for every other method), plus its evaluations (test images at a third
    of a training image's cost). Entries whose runs could not all be enumerated without their
    data show a lower bound (">="). Beside it, the same entry *stacked* as ``bnfl run --profile
    paper --device cuda`` trains it (issue 38): its runs of one model, input, norm, mini-batch and
    participants form a stack of depth S = min(runs, what memory allows
    (:func:`bnfl.fl.stack_depth.max_rows`), the deepest measured in (c)); a stacked run's time is
    its images over the plain loop's rate at the stacked batch (S x union, measured here; halved
    depth if it does not fit) times the stacked round's efficiency at that depth, measured in (c)
    against the plain loop at the same stacked batch (interpolated in log S).
(c) S = 1, 5, 25 runs of ResNet-20 stacked (FedAvg+BN and FedTAN; seeds and learning rates
    0.05/0.1/0.2 in turn, one rate per row), eager and with the steady steps replayed as CUDA
    graphs (:mod:`bnfl.fl.device_options`): images per second against the plain loop on the
    union batch and on the stacked batch, and the share of the GPU's float32 peak (FLOPs per
    training image counted by ``torch.utils.flop_counter``; the peak from :data:`PEAK_FP32`).
(d) The options channels-last, TF32 and bf16 (and all with CUDA graphs) on a stacked FedAvg+BN
    round: images per second and the final training loss against the same runs without them.

Usage::

    python benchmarks/bench_gpu.py [--device cuda] [--out DIR]        # on a GPU, a few minutes
    python benchmarks/bench_gpu.py --tiny --device cpu --out DIR      # the code path, seconds

``--tiny`` shrinks everything (2 clients of 4 images, 8x8 inputs, one local step, one timed
round, stack depths 1 and 2, the entries of ``--entries``, inputs capped at 8x8 and batches at
2): its numbers mean nothing, it checks that every part runs. Writes ``bench_gpu.md`` (the tables) and
``bench_gpu.json`` to ``--out`` (default ``$OUT``, else ``./gpu-check-out``). Exit status 3: skipped
(no tqdm, which bnfl's training loop needs).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_plan import paper_plan, price_group, run_work, stack_groups, training_entries  # noqa: E402

torch.set_num_threads(1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fl_round_seconds(method: str, batched: str, *, device: torch.device, clients: int, batch: int, steps: int,
                     side: int, warmup: int, timed: int) -> float:
    """Seconds per round of ``method`` on ResNet-20 (BN), median-free: total of ``timed`` rounds
    after ``warmup`` rounds, synchronised, divided by ``timed``."""
    from bnfl import fl, models
    from bnfl.methods import get

    g = torch.Generator().manual_seed(0)
    n = clients * batch * steps  # one epoch per round
    x = torch.randn(n, 3, side, side, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    data = fl.FederatedData(x, y, x[:batch], y[:batch], np.split(np.arange(n), clients))
    torch.manual_seed(0)
    m = get(method)
    model = models.build("resnet20", norm=m.norm, num_classes=10)
    cfg = fl.TrainConfig(rounds=warmup + timed + 1, local_steps=steps, batch_size=batch, lr=0.05, eval_every=10**6,
                         progress=False, device=str(device), batched=batched)
    sim = fl.Simulation(model, data, m.algorithm(), cfg)
    assert sim.history.meta["batched"]["used"] is (batched == "on"), sim.history.meta["batched"]
    sim.run(stop_after=warmup)
    _sync(device)
    t0 = time.perf_counter()
    sim.run(stop_after=warmup + timed)
    _sync(device)
    return (time.perf_counter() - t0) / timed


#: dense float32 peak (no tensor cores) of GPUs by name, FLOP/s: the vendors' data sheets (H100 and
#: H200 SXM 67 TFLOP/s, H100 PCIe 51, A100 19.5, L4 30.3, L40S 91.6, RTX 4090 82.6)
PEAK_FP32 = {"H200": 67e12, "H100 PCIe": 51e12, "H100": 67e12, "A100": 19.5e12, "L40S": 91.6e12, "L4": 30.3e12,
             "4090": 82.6e12}


def peak_flops(name: str) -> float | None:
    """The float32 peak of the GPU named ``name`` (:data:`PEAK_FP32`), or None (unknown, or a CPU)."""
    for key, v in PEAK_FP32.items():  # (the more specific names first)
        if key in name:
            return v
    return None


def train_flops_per_image(model: torch.nn.Module, shape: tuple[int, ...], *, classes: int = 10) -> float:
    """FLOPs of one training image (forward and backward), counted by ``torch.utils.flop_counter``
    on a batch of 4 on the CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    m = copy.deepcopy(model).cpu().train()
    x, y = torch.randn(4, *shape), torch.randint(0, classes, (4,))
    with FlopCounterMode(display=False) as fc:
        torch.nn.functional.cross_entropy(m(x), y).backward()
    return fc.get_total_flops() / 4


def stacked_round_seconds(method: str, depth: int, *, graphs: bool, device: torch.device, clients: int, batch: int,
                          steps: int, side: int, warmup: int, timed: int) -> tuple[float, str | None]:
    """Seconds per round of ``depth`` runs of ``method`` on ResNet-20 (BN) stacked in lock-step
    (:func:`bnfl.fl.lockstep.run_lockstep`, FedTAN's coupled steps stacked too): their own seeds
    and learning rates (0.05, 0.1, 0.2 in turn: one rate per row), one batched computation of
    ``depth x clients`` models per step, with or without the CUDA-graph replay of the steady
    steps. Timed from the end of round ``warmup`` to the end of round ``warmup + timed`` of the
    last run (every run has finished those rounds then), synchronised. Also returns why a
    capture failed (None when it did not)."""
    from bnfl import fl, models
    from bnfl.fl.device_options import DeviceOptions
    from bnfl.fl.lockstep import run_lockstep
    from bnfl.methods import get

    g = torch.Generator().manual_seed(0)
    n = clients * batch * steps
    x = torch.randn(n, 3, side, side, generator=g).to(device)  # on the device once: every run shares it
    y = torch.randint(0, 10, (n,), generator=g).to(device)
    data = fl.FederatedData(x, y, x[:batch], y[:batch], np.split(np.arange(n), clients))
    m = get(method)
    sims = []
    for s in range(depth):
        torch.manual_seed(s)
        model = models.build("resnet20", norm=m.norm, num_classes=10)
        cfg = fl.TrainConfig(rounds=warmup + timed, local_steps=steps, batch_size=batch, lr=0.05 * 2 ** (s % 3),
                             eval_every=10**6, progress=False, device=str(device), batched="on", seed=s)
        sim = fl.Simulation(model, data, m.algorithm(), cfg)
        sim.batched_engine.options = DeviceOptions(cuda_graphs=graphs, graph_max_images=10**9)  # captured at every depth
        sims.append(sim)
    marks: dict[int, float] = {}

    def mark(_sim: object, r: int) -> None:
        if r in (warmup, warmup + timed):
            _sync(device)
            marks[r] = time.perf_counter()

    sims[-1].round_hooks.append(mark)
    outcomes = run_lockstep(sims, stack_coupled=True)
    bad = [o for o in outcomes if isinstance(o, BaseException)]
    if bad:
        raise bad[0]
    errors = {s.batched_engine.graph_error for s in sims} - {None}
    return (marks[warmup + timed] - marks[warmup]) / timed, (sorted(errors)[0] if errors else None)


def stacked_table(device: torch.device, *, tiny: bool, warmup: int, timed: int, plain: float,
                  flops: float, peak: float | None) -> dict:
    """Part (c): images per second of stacked rounds at depths S, eager and graph-replayed, against
    the plain loop's (``plain`` images/s), and the share of the GPU's float32 peak they use."""
    k, b, e, side = (2, 4, 2, 8) if tiny else (5, 32, 5, 32)
    depths = (1, 2) if tiny else (1, 5, 25)
    graph_modes = (False, True) if device.type == "cuda" else (False,)
    out: dict = {"clients": k, "batch": b, "local_steps": e, "depths": list(depths), "rows": [],
                 "flops_per_image": flops, "peak_flops": peak}
    for method in ("fedavg+bn", "fedtan"):
        for depth in depths:
            for graphs in graph_modes:
                sec, err = stacked_round_seconds(method, depth, graphs=graphs, device=device, clients=k, batch=b,
                                                 steps=e, side=side, warmup=warmup, timed=timed)
                ips = depth * k * b * e / sec
                row = {"method": method, "depth": depth, "graphs": graphs, "seconds": sec, "images_per_s": ips,
                       "vs_plain": ips / plain, "peak_share": None if peak is None else ips * flops / peak,
                       "graph_error": err}
                out["rows"].append(row)
                print(f"  {method} S={depth}{' graphs' if graphs else ''}: {sec * 1e3:.1f} ms/round, {ips:.0f} images/s, "
                      f"{row['vs_plain']:.2f} x plain{'' if err is None else f' (capture failed: {err})'}", flush=True)
                gc.collect()  # the stacked runs' simulations and threads, before the next measurement
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return out


def options_table(device: torch.device, *, tiny: bool, warmup: int, timed: int) -> list[dict]:
    """Part (d): a stacked FedAvg+BN round (S = 5, or 2 tiny) with each of channels-last, TF32 and
    bf16 (and CUDA graphs with all three), its images per second and its final training loss
    against the same runs without the option (the option's effect on the arithmetic)."""
    from bnfl import fl, models
    from bnfl.fl.device_options import DeviceOptions
    from bnfl.fl.lockstep import run_lockstep
    from bnfl.methods import get

    k, b, e, side = (2, 4, 2, 8) if tiny else (5, 32, 5, 32)
    depth = 2 if tiny else 5
    g = torch.Generator().manual_seed(0)
    n = k * b * e
    x = torch.randn(n, 3, side, side, generator=g).to(device)
    y = torch.randint(0, 10, (n,), generator=g).to(device)
    data = fl.FederatedData(x, y, x[:b], y[:b], np.split(np.arange(n), k))
    variants = {"none": DeviceOptions(), "channels_last": DeviceOptions(channels_last=True),
                "tf32": DeviceOptions(tf32=True), "bf16": DeviceOptions(bf16=True),
                "graphs+all": DeviceOptions(cuda_graphs=True, channels_last=True, tf32=True, bf16=True)}
    rows: list[dict] = []
    base = None
    for name, opts in variants.items():
        sims = []
        for s in range(depth):
            torch.manual_seed(s)
            cfg = fl.TrainConfig(rounds=warmup + timed, local_steps=e, batch_size=b, lr=0.05, eval_every=10**6,
                                 progress=False, device=str(device), batched="on", seed=s)
            sim = fl.Simulation(models.build("resnet20", norm="bn", num_classes=10), data, get("fedavg+bn").algorithm(),
                                cfg)
            sim.batched_engine.options = opts
            sims.append(sim)
        marks: dict[int, float] = {}

        def mark(_sim: object, r: int, marks: dict = marks) -> None:
            if r in (warmup, warmup + timed):
                _sync(device)
                marks[r] = time.perf_counter()

        sims[-1].round_hooks.append(mark)
        run_lockstep(sims)
        gc.collect()
        sec = (marks[warmup + timed] - marks[warmup]) / timed
        losses = [float(s.history.rows[-1]["train_loss"]) for s in sims]
        if base is None:
            base = losses
        rows.append({"option": name, "seconds": sec, "images_per_s": depth * k * b * e / sec,
                     "train_loss": float(np.mean(losses)),
                     "max_loss_diff": float(max(abs(a - c) for a, c in zip(losses, base, strict=True)))})
        print(f"  options {name}: {sec * 1e3:.1f} ms/round, final train loss {rows[-1]['train_loss']:.6f} "
              f"(max diff vs none {rows[-1]['max_loss_diff']:.2e})", flush=True)
    return rows


def plain_step_seconds(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, warmup: int, timed: int) -> float:
    """Seconds per SGD step of a plain PyTorch training loop on the batch ``(x, y)``."""
    device = x.device
    model = model.to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if out.dim() > 2:  # segmentation: (N, C, H, W) logits against (N, H, W) labels
            loss_fn(out, y.view(-1, 1, 1).expand(-1, *out.shape[2:])).backward()
        else:
            loss_fn(out, y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(timed):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / timed


def resnet20_table(device: torch.device, *, tiny: bool, warmup: int, timed: int) -> dict:
    """Part (a): images per second of FL rounds and of the plain loop, and their ratios."""
    from bnfl import models

    k, b, e, side = (2, 4, 1, 8) if tiny else (5, 32, 5, 32)
    out: dict = {"clients": k, "batch": b, "local_steps": e, "input": [3, side, side], "rows": []}
    images = k * b * e
    for method in ("fedavg+bn", "fedtan"):
        for batched in ("on", "off"):
            s = fl_round_seconds(method, batched, device=device, clients=k, batch=b, steps=e, side=side,
                                 warmup=warmup, timed=timed)
            out["rows"].append({"what": f"{method} round, {'batched' if batched == 'on' else 'sequential'}",
                                "method": method, "batched": batched == "on", "seconds": s, "images_per_s": images / s})
            print(f"  {out['rows'][-1]['what']}: {s * 1e3:.1f} ms/round, {images / s:.0f} images/s", flush=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(k * b, 3, side, side, generator=g).to(device)
    y = torch.randint(0, 10, (k * b,), generator=g).to(device)
    s = plain_step_seconds(models.build("resnet20", norm="bn", num_classes=10), x, y, warmup=warmup * e, timed=timed * e)
    out["plain"] = {"what": f"plain PyTorch loop, union batch {k * b}", "seconds_per_step": s,
                    "images_per_s": k * b / s}
    print(f"  plain loop: {s * 1e3:.2f} ms/step, {k * b / s:.0f} images/s", flush=True)
    for row in out["rows"]:
        row["efficiency"] = row["images_per_s"] / out["plain"]["images_per_s"]
    return out


def _shrink(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) == 1 else (shape[0], *(min(s, 8) for s in shape[1:]))


def budget(device: torch.device, table: dict, stacked: dict, entries: list[str], *, tiny: bool, warmup: int,
           timed: int, report: dict | None = None, saved: Any = None) -> dict:
    """Part (b): per entry, its runs and estimated hours on ``device``, one after another as before
    (``hours``) and stacked (``stacked_hours``, module docstring). ``report``: the dict to fill
    (returned); ``saved()`` is called after every entry (what a time limit stops keeps those)."""
    from bnfl import models
    from bnfl.fl.stack_depth import max_rows
    from bnfl.methods import get

    eff = {r["method"]: r["efficiency"] for r in table["rows"] if r["batched"]}
    ratio: dict[str, dict[int, float]] = {"fedavg+bn": {}, "fedtan": {}}
    for r in stacked["rows"]:  # the best of eager and graph-replayed, per depth
        v = r["images_per_s"] / stacked["plain_at_depth"][str(r["depth"])]
        ratio[r["method"]][r["depth"]] = max(ratio[r["method"]].get(r["depth"], 0.0), v)
    top = max(stacked["depths"])
    plans = [paper_plan(i) for i in entries]
    gc.collect()  # (c)'s and (d)'s simulations gone before the plain loops are timed
    rate: dict[tuple, float | str] = {}
    mem: dict[tuple, int] = {}

    def build(key: tuple):
        model, opts, shape, classes, norm = key[0], dict(eval(key[1])), key[2], key[3], key[4]  # noqa: S307 (our own repr)
        if len(shape) == 1 and math.isqrt(shape[0]) ** 2 != shape[0]:
            opts.setdefault("in_features", shape[0])  # a flat input that is no square image
        torch.manual_seed(0)
        return models.build_for(model, shape, num_classes=classes, norm=norm, **opts)

    def plain_rate(key: tuple, batch: int) -> float | str:
        if (key, batch) not in rate:
            try:
                m = build(key)
                x = torch.randn(batch, *key[2], device=device)
                y = torch.randint(0, key[3], (batch,), device=device)
                rate[(key, batch)] = batch / plain_step_seconds(m, x, y, warmup=warmup, timed=timed)
                del m, x, y
            except Exception as err:  # noqa: BLE001 - reported in the table (an OOM halves the depth)
                rate[(key, batch)] = f"{type(err).__name__}: {str(err).splitlines()[0][:80] if str(err) else ''}"
            if device.type == "cuda":
                torch.cuda.empty_cache()
        return rate[(key, batch)]

    report = {} if report is None else report
    report.update(entries=[], rates={}, ratio=ratio)
    rows = report["entries"]
    for plan in plans:
        if plan.note.startswith("no training"):
            continue
        hours = stacked_hours = 0.0
        missing: set[str] = set()
        works, norms = [], []
        for spec in plan.specs:
            try:
                w = run_work(spec)
            except KeyError as err:  # a data set the plan's size table lacks: named in the table, not fatal
                missing.add(f"no size for data set {err.args[0]!r} in paper_plan.DATA")
                continue
            if tiny:
                w = dataclasses.replace(w, shape=_shrink(w.shape), batch=min(w.batch, 2), union=min(w.union, 2))
            works.append(w)
            norms.append(get(spec["method"]).norm)
        depths = []
        for key, idx in stack_groups(works, norms).items():
            w0 = works[idx[0]]
            rkey = key[:5]
            r1 = plain_rate(rkey, w0.union)
            if isinstance(r1, str):
                missing.add(f"{w0.model}: {r1}")
                continue
            if key not in mem:
                try:
                    d = max_rows(build(rkey), w0.shape, w0.batch, device=device)
                    mem[key] = max(1, d.rows // max(1, w0.union // w0.batch))
                except Exception:  # noqa: BLE001 - no estimate: no stacking for these runs
                    mem[key] = 1
            depth = max(1, min(len(idx), top, mem[key]))
            rs = plain_rate(rkey, w0.union * depth)
            while isinstance(rs, str) and depth > 1:  # did not fit after all: half as deep
                depth //= 2
                rs = plain_rate(rkey, w0.union * depth)
            if isinstance(rs, str):
                missing.add(f"{w0.model}: {rs}")
                continue
            depths.append(depth)
            one, st = price_group([works[i] for i in idx], plain=r1, plain_stacked=rs, depth=depth, efficiency=eff,
                                  stacked_efficiency=ratio)
            hours += one
            stacked_hours += st
        rows.append({"id": plan.id, "runs": len(plan.specs), "complete": plan.complete, "seeds": plan.seeds,
                     "hours": hours, "stacked_hours": stacked_hours, "depths": sorted(set(depths)),
                     "note": "; ".join([plan.note, *sorted(missing)]).strip("; ")})
        print(f"  {plan.id}: {'' if plan.complete else '>='}{len(plan.specs)} runs, "
              f"{'' if plan.complete else '>='}{hours:.2f} h one after another, {stacked_hours:.2f} h stacked "
              f"(depths {sorted(set(depths))})", flush=True)
        report["rates"] = {repr(k): v for k, v in rate.items()}
        if saved is not None:
            saved()
    return report


def markdown(info: dict, table: dict, stacked: dict | None, options: list[dict] | None, plan: dict | None) -> str:
    lines = [f"# bench_gpu on {info['device_name']}", "",
             f"torch {info['torch']}, {info['when']}{' (TINY: a code-path check, the numbers mean nothing)' if info['tiny'] else ''}",
             "", f"(a) ResNet-20 (BN), K = {table['clients']} clients, B = {table['batch']}, "
             f"E = {table['local_steps']} local steps, inputs {'x'.join(map(str, table['input']))}", "",
             "| what | ms per round (step) | images/s | vs plain loop |", "|---|---|---|---|"]
    for r in table["rows"]:
        lines.append(f"| {r['what']} | {r['seconds'] * 1e3:.1f} | {r['images_per_s']:.0f} | {r['efficiency']:.2f} |")
    p = table["plain"]
    lines.append(f"| {p['what']} | {p['seconds_per_step'] * 1e3:.2f} | {p['images_per_s']:.0f} | 1.00 |")
    if stacked is not None:
        peak = stacked["peak_flops"]
        lines += ["", f"(c) S runs stacked (lock-step, one computation of S x {stacked['clients']} models per step; "
                  f"B = {stacked['batch']}, E = {stacked['local_steps']}; rates 0.05/0.1/0.2 in turn), against the "
                  f"plain loop on the union batch ({table['clients'] * table['batch']}) and on the stacked batch; "
                  f"{stacked['flops_per_image'] / 1e9:.3f} GFLOP per training image (torch.utils.flop_counter); "
                  + (f"share of the float32 peak {peak / 1e12:.1f} TFLOP/s" if peak else "no peak known for this device"),
                  "", "| method | S | CUDA graphs | ms per round | images/s | vs plain loop (union) | "
                  "vs plain loop (S x union) | share of fp32 peak |", "|---|---|---|---|---|---|---|---|"]
        for r in stacked["rows"]:
            share = "" if r["peak_share"] is None else f"{r['peak_share']:.1%}"
            at = stacked["plain_at_depth"][str(r["depth"])]
            err = "" if r["graph_error"] is None else f" (capture failed: {r['graph_error']})"
            lines.append(f"| {r['method']} | {r['depth']} | {'yes' if r['graphs'] else 'no'}{err} | "
                         f"{r['seconds'] * 1e3:.1f} | {r['images_per_s']:.0f} | {r['vs_plain']:.2f} | "
                         f"{r['images_per_s'] / at:.2f} | {share} |")
        lines += ["", "plain loop at the stacked batch: " + ", ".join(
            f"S = {d}: {v:.0f} images/s" for d, v in stacked["plain_at_depth"].items())]
    if options:
        lines += ["", "(d) The options on a stacked FedAvg+BN round (same runs; final training loss against no option)",
                  "", "| option | ms per round | images/s | mean final train loss | max diff vs none |", "|---|---|---|---|---|"]
        for r in options:
            lines.append(f"| {r['option']} | {r['seconds'] * 1e3:.1f} | {r['images_per_s']:.0f} | "
                         f"{r['train_loss']:.6f} | {r['max_loss_diff']:.2e} |")
    if plan is not None:
        lines += ["", "(b) Estimated wall time of each paper-profile entry on this device (benchmarks/bench_gpu.py, "
                  "method in its docstring; '>=': runs enumerated up to where the entry needs its data): one run "
                  "after another, and stacked (runs of one model shape, input and batch in one computation, at "
                  "the depth memory allows, up to the deepest measured in (c))", "",
                  "| entry | seeds | runs | hours, one after another | hours, stacked | stack depths | note |",
                  "|---|---|---|---|---|---|---|"]
        total = total_s = 0.0
        for r in plan["entries"]:
            ge = "" if r["complete"] else ">="
            total += r["hours"]
            total_s += r["stacked_hours"]
            lines.append(f"| {r['id']} | {r['seeds']} | {ge}{r['runs']} | {ge}{r['hours']:.2f} | "
                         f"{ge}{r['stacked_hours']:.2f} | {', '.join(map(str, r['depths']))} | {r['note']} |")
        lines.append(f"| all | | | >={total:.1f} | >={total_s:.1f} | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes: checks the code path in seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out")
    ap.add_argument("--warmup", type=int, default=None, help="untimed rounds (default 2; tiny 1)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5; tiny 1)")
    ap.add_argument("--entries", default="", help="comma-separated entry ids (default: every entry)")
    ap.add_argument("--skip-budget", action="store_true", help="no part (b)")
    ap.add_argument("--skip-options", action="store_true", help="no part (d)")
    args = ap.parse_args(argv)
    try:
        import tqdm  # noqa: F401  (Simulation.run's progress bar)
    except ModuleNotFoundError:
        print("bench_gpu: SKIPPED: needs the Python package 'tqdm' (bnfl's training loop imports it)")
        return 3
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 2)
    timed = args.rounds if args.rounds is not None else (1 if args.tiny else 5)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    info = {"device": str(device), "device_name": name, "torch": torch.__version__, "tiny": args.tiny,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"bench_gpu: {name}, torch {torch.__version__}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stacked = options = plan = None

    def save() -> None:  # after every part: a time limit that stops a later part keeps the earlier ones
        (out / "bench_gpu.json").write_text(json.dumps({"info": info, "resnet20": table, "stacked": stacked,
                                                        "options": options, "budget": plan}, indent=1, default=str))
        (out / "bench_gpu.md").write_text(markdown(info, table, stacked, options, plan))

    table = resnet20_table(device, tiny=args.tiny, warmup=warmup, timed=timed)
    stacked = stacked_part(device, table, name, tiny=args.tiny, warmup=warmup, timed=timed)
    save()
    options = None if args.skip_options else options_table(device, tiny=args.tiny, warmup=warmup, timed=timed)
    save()
    if not args.skip_budget:
        try:
            entries = [e for e in args.entries.split(",") if e] or list(training_entries())
            plan = {}
            budget(device, table, stacked, entries, tiny=args.tiny, warmup=1, timed=1 if args.tiny else 2, report=plan,
                   saved=save)
        except ModuleNotFoundError as err:  # the registry imports every paper's plots and data code
            print(f"bench_gpu: part (b) SKIPPED: the entries' code needs the Python package {err.name!r}")
    save()
    print(f"bench_gpu: wrote {out / 'bench_gpu.md'}", flush=True)
    rows = table["rows"] + stacked["rows"]
    return 0 if all(math.isfinite(r["images_per_s"]) for r in rows) else 1


def stacked_part(device: torch.device, table: dict, name: str, *, tiny: bool, warmup: int, timed: int) -> dict:
    """Part (c) with its baselines: the plain loop at the stacked batches, and the FLOPs per image."""
    from bnfl import models

    k, b = table["clients"], table["batch"]
    side = table["input"][1]
    flops = train_flops_per_image(models.build("resnet20", norm="bn", num_classes=10), (3, side, side))
    peak = peak_flops(name) if device.type == "cuda" else None
    at_depth = {}
    for depth in (1, 2) if tiny else (1, 5, 25):  # first, in a clean process (a launch-bound loop is sensitive)
        torch.manual_seed(0)
        x = torch.randn(k * b * depth, 3, side, side, device=device)
        y = torch.randint(0, 10, (k * b * depth,), device=device)
        sec = plain_step_seconds(models.build("resnet20", norm="bn", num_classes=10), x, y,
                                 warmup=warmup * table["local_steps"], timed=timed * table["local_steps"])
        at_depth[str(depth)] = k * b * depth / sec
        print(f"  plain loop at batch {k * b * depth}: {k * b * depth / sec:.0f} images/s", flush=True)
        del x, y
        gc.collect()
    out = stacked_table(device, tiny=tiny, warmup=warmup, timed=timed, plain=table["plain"]["images_per_s"],
                        flops=flops, peak=peak)
    out["plain_at_depth"] = at_depth
    return out


if __name__ == "__main__":
    sys.exit(main())
