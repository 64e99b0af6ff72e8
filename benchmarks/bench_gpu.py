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
    data show a lower bound (">=").

Usage::

    python benchmarks/bench_gpu.py [--device cuda] [--out DIR]        # on a GPU, a few minutes
    python benchmarks/bench_gpu.py --tiny --device cpu --out DIR      # the code path, seconds

``--tiny`` shrinks everything (2 clients of 4 images, 8x8 inputs, one local step, one timed
round, the entries of ``--entries``, inputs capped at 8x8 and batches at 2): its numbers mean
nothing, it checks that the benchmark runs. Writes ``bench_gpu.md`` (both tables) and
``bench_gpu.json`` to ``--out`` (default ``$OUT``, else ``./gpu-check-out``). Exit status 3: skipped
(no tqdm, which bnfl's training loop needs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_plan import paper_plan, run_work, training_entries  # noqa: E402

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


def budget(device: torch.device, table: dict, entries: list[str], *, tiny: bool, warmup: int, timed: int) -> dict:
    """Part (b): per entry, its runs and estimated hours on ``device`` (module docstring)."""
    from bnfl import models
    from bnfl.methods import get

    eff = {r["method"]: r["efficiency"] for r in table["rows"] if r["batched"]}
    plans = [paper_plan(i) for i in entries]
    rate: dict[tuple, float | str] = {}
    rows = []
    for plan in plans:
        if plan.note.startswith("no training"):
            continue
        hours, missing = 0.0, set()
        for spec in plan.specs:
            try:
                w = run_work(spec)
            except KeyError as err:  # a data set the plan's size table lacks: named in the table, not fatal
                missing.add(f"no size for data set {err.args[0]!r} in paper_plan.DATA")
                continue
            norm = get(spec["method"]).norm
            shape = _shrink(w.shape) if tiny else w.shape
            union = min(w.union, 2) if tiny else w.union
            key = (w.model, repr(w.model_options), shape, w.classes, norm, union)  # options may hold lists
            if key not in rate:
                try:
                    torch.manual_seed(0)
                    opts = dict(w.model_options)
                    if len(shape) == 1 and math.isqrt(shape[0]) ** 2 != shape[0]:
                        opts.setdefault("in_features", shape[0])  # a flat input that is no square image
                    m = models.build_for(w.model, shape, num_classes=w.classes, norm=norm, **opts)
                    x = torch.randn(union, *shape, device=device)
                    y = torch.randint(0, w.classes, (union,), device=device)
                    rate[key] = union / plain_step_seconds(m, x, y, warmup=warmup, timed=timed)
                    del m, x, y
                except Exception as err:  # noqa: BLE001 - reported in the table
                    rate[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            r = rate[key]
            if isinstance(r, str):
                missing.add(f"{w.model}: {r}")
                continue
            e = eff["fedtan"] if w.fedtan else eff["fedavg+bn"]
            hours += (w.images / (r * e) + w.eval_images / (3 * r)) / 3600
        rows.append({"id": plan.id, "runs": len(plan.specs), "complete": plan.complete, "seeds": plan.seeds,
                     "hours": hours, "note": "; ".join([plan.note, *sorted(missing)]).strip("; ")})
        print(f"  {plan.id}: {'' if plan.complete else '>='}{len(plan.specs)} runs, "
              f"{'' if plan.complete else '>='}{hours:.2f} h", flush=True)
    return {"entries": rows, "rates": {repr(k): v for k, v in rate.items()}}


def markdown(info: dict, table: dict, plan: dict | None) -> str:
    lines = [f"# bench_gpu on {info['device_name']}", "",
             f"torch {info['torch']}, {info['when']}{' (TINY: a code-path check, the numbers mean nothing)' if info['tiny'] else ''}",
             "", f"(a) ResNet-20 (BN), K = {table['clients']} clients, B = {table['batch']}, "
             f"E = {table['local_steps']} local steps, inputs {'x'.join(map(str, table['input']))}", "",
             "| what | ms per round (step) | images/s | vs plain loop |", "|---|---|---|---|"]
    for r in table["rows"]:
        lines.append(f"| {r['what']} | {r['seconds'] * 1e3:.1f} | {r['images_per_s']:.0f} | {r['efficiency']:.2f} |")
    p = table["plain"]
    lines.append(f"| {p['what']} | {p['seconds_per_step'] * 1e3:.2f} | {p['images_per_s']:.0f} | 1.00 |")
    if plan is not None:
        lines += ["", "(b) Estimated wall time of each paper-profile entry on this device (benchmarks/bench_gpu.py, "
                  "method in its docstring; '>=': runs enumerated up to where the entry needs its data)", "",
                  "| entry | seeds | runs | hours | note |", "|---|---|---|---|---|"]
        total = 0.0
        for r in plan["entries"]:
            ge = "" if r["complete"] else ">="
            total += r["hours"]
            lines.append(f"| {r['id']} | {r['seeds']} | {ge}{r['runs']} | {ge}{r['hours']:.2f} | {r['note']} |")
        lines.append(f"| all | | | >={total:.1f} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes: checks the code path in seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out")
    ap.add_argument("--warmup", type=int, default=None, help="untimed rounds (default 2; tiny 1)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5; tiny 1)")
    ap.add_argument("--entries", default="", help="comma-separated entry ids (default: every entry)")
    ap.add_argument("--skip-budget", action="store_true", help="part (a) only")
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
    table = resnet20_table(device, tiny=args.tiny, warmup=warmup, timed=timed)
    plan = None
    if not args.skip_budget:
        try:
            entries = [e for e in args.entries.split(",") if e] or list(training_entries())
            plan = budget(device, table, entries, tiny=args.tiny, warmup=1 if args.tiny else 2,
                          timed=1 if args.tiny else 3)
        except ModuleNotFoundError as err:  # the registry imports every paper's plots and data code
            print(f"bench_gpu: part (b) SKIPPED: the entries' code needs the Python package {err.name!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_gpu.json").write_text(json.dumps({"info": info, "resnet20": table, "budget": plan}, indent=1,
                                                   default=str))
    (out / "bench_gpu.md").write_text(markdown(info, table, plan))
    print(f"bench_gpu: wrote {out / 'bench_gpu.md'}", flush=True)
    return 0 if all(math.isfinite(r["images_per_s"]) for r in table["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
