"""The run shapes that dominate ``make run``, timed on two engines side by side (issue 48).

The ten committed quick entries with the largest stored ``duration_s`` (``figures/*/result.json``)
each give one run shape: the base configuration in the entry's stored ``config`` (its model,
data, partition, batch, local steps, momentum), the method whose runs dominate it, and the
entry's seeds trained together as its runs train (:func:`bnfl.fl.lockstep.run_lockstep`; FixBN's
entries run the sequential engine seed by seed). A shape is a few rounds of that, not the entry.

Per shape and engine (:data:`ENGINES`: ``reference`` the engine before :mod:`bnfl.fl.fast_path`,
``fast`` the fast path with each FedTAN seed's coupled rounds alone, ``stacked`` the default:
FedTAN's seeds stacked where that is bitwise; all in this process, the rounds of the engines
timed alternately so that load hits each):

* ``rounds/s``: rounds per second of the whole stack (all seeds): ``R - 1`` over the time of an
  ``R``-round run minus a one-round run (build, start-up and the one evaluation at the end
  cancel), after an untimed warm-up run, ``R`` chosen so that a run takes about ``--seconds``
  (at least ``--rounds``); each run's time the best of ``--repeats`` (steadiest where other work
  shares the cores), the runs of both engines alternated (where noise leaves the difference not
  positive, the whole ``R``-round run's rate: a lower bound);
* ``ops``: the share of a round's wall time in torch's operators (``torch.profiler``: the self
  CPU time of every ``aten::`` operator, over one profiled run);
* ``bound``: a lower bound from the arithmetic: every FLOP-carrying operator of a run
  (``torch.utils.flop_counter``'s registry: matmuls, convolutions and their backwards) replayed
  alone at its own shapes, its FLOPs divided by this core's rate at that size measured here
  (the calls of rounds 2 and 3: a three-round run's minus a one-round run's);
  printed as the rounds per second that the arithmetic alone would allow, with the GEMM rate
  (GFLOP/s) it implies.

Shapes are named after their entries; ``--shapes`` picks some, ``--quick`` runs three rounds once
(about a minute). Usage::

    python benchmarks/bench_quick.py [--shapes fedtan-tab1,hbn-tab1] [--seconds 1] [--repeats 3] [--quick]
        [--engines fast,stacked]

Times are the process's CPU time by default (``--clock wall`` for the wall clock): one thread
computes at a time in these runs, and CPU time is what other work on shared cores changes least.
Not a test: the numbers depend on the machine and on what else runs on it (``uptime`` is printed).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from bnfl import fl  # noqa: E402
from bnfl.experiments import training  # noqa: E402
from bnfl.fl import fast_path  # noqa: E402
from bnfl.fl.lockstep import run_lockstep  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: entry -> (key of its base configuration in the stored config, method, engine); the ten
#: largest ``duration_s`` of the committed quick results. FixBN's observed runs (fixbn-fig1, the
#: statistics dynamics) and Table 5 train on the sequential engine (``batched="off"``).
SHAPES: dict[str, tuple[str, str, str]] = {
    "hbn-tab1": ("base_c10", "hbn", "on"),
    "fedtan-tab2": ("base", "fedtan", "on"),
    "fedbn-fig4": ("base", "fedbn", "on"),
    "fixbn-fig1": ("base", "fixbn", "off"),
    "fedtan-tab1": ("base", "fedtan", "on"),
    "hbn-fig7": ("base", "hbn", "on"),
    "fixbn-fig4": ("base", "fixbn", "on"),
    "fedtan-fig3": ("base_b", "fedtan", "on"),
    "hbn-fig1": ("base", "hbn", "on"),
    "fixbn-tab5": ("base", "fixbn", "off"),
}
#: the round ratio of issue 27/48: FedTAN's round against FedAvg+BN's on the same shape
RATIO_SHAPE = "fedtan-tab1"
#: the clock of the timings: the process's CPU time (default: what other work on shared cores
#: changes least; one thread computes at a time here) or the wall clock
CLOCK = {"now": time.process_time}
#: what an entry's cells set on top of its base: fixbn-fig4's E grid (its middle E)
OVERRIDES: dict[str, dict[str, Any]] = {"fixbn-fig4": {"local_steps": 5}}


def entry_shape(entry: str, method: str | None = None) -> tuple[dict[str, Any], list[int], str]:
    """The entry's base spec (with ``method``), its seeds and the engine its runs use."""
    key, default_method, batched = SHAPES[entry]
    stored = json.loads((ROOT / "figures" / entry / "result.json").read_text())
    base = copy.deepcopy(stored["config"][key])
    if "partition" in stored["config"] and key == "base" and "kind" not in base.get("partition", {}):
        base["partition"] = {**base.get("partition", {}), **stored["config"]["partition"]}
    base["method"] = method or default_method
    base["train"] = {**base.get("train", {}), **OVERRIDES.get(entry, {})}
    return base, [int(s) for s in stored["seeds"]], batched


def duration(entry: str) -> float:
    return float(json.loads((ROOT / "figures" / entry / "result.json").read_text()).get("duration_s") or 0.0)


def build(base: dict[str, Any], seeds: list[int], rounds: int, batched: str) -> list[fl.Simulation]:
    """One simulation per seed, built as the entries build theirs (``bnfl.experiments.training``:
    the canonical spec, one data split shared by the seeds), one evaluation at the end."""
    sims = []
    for s in seeds:
        spec = copy.deepcopy(base)
        spec.update(rounds=rounds)
        spec["train"] = {**spec.get("train", {}), "eval_every": rounds}
        spec = training.canonical(training._seed_spec(spec, s))
        sims.append(training._build(spec, device="cpu", data_root=None, progress=False, batched=batched)[0])
    return sims


#: engine -> (the fast path's engine, lock-step's ``stack_coupled``): ``fast`` the engine before
#: FedTAN's coupled rounds stacked (each seed's alone), ``stacked`` today's default (stacked where
#: bitwise, :func:`bnfl.fl.batched_together.uniform_rows`)
ENGINES: dict[str, tuple[str, bool | None]] = {"reference": ("reference", False), "fast": ("fast", False),
                                                "stacked": ("fast", None)}


def run_stack(sims: list[fl.Simulation], stack_coupled: bool | None = None) -> list[Any]:
    if len(sims) > 1 and all(s.batched_engine is not None and s.clients is s.batched_engine for s in sims):
        return run_lockstep(sims, stack_coupled=stack_coupled)
    return [s.run() for s in sims]


def timed(base: dict, seeds: list[int], rounds: int, batched: str, engine: str) -> float:
    """Seconds of ``rounds`` rounds of the stack on ``engine`` (build excluded)."""
    sims = build(base, seeds, rounds, batched)
    path, coupled = ENGINES[engine]
    with fast_path.use(path):
        t0 = CLOCK["now"]()
        run_stack(sims, coupled)
        return CLOCK["now"]() - t0


def marginal(base: dict, seeds: list[int], rounds: int, batched: str, engine: str) -> float:
    """Seconds of rounds 2..``rounds``: a run of ``rounds`` rounds minus a run of one (the build,
    the threads' start, first draws and the final evaluation cancel)."""
    return timed(base, seeds, rounds, batched, engine) - timed(base, seeds, 1, batched, engine)


def op_share(base: dict, seeds: list[int], rounds: int, batched: str, engine: str) -> float:
    """Share of the wall time in torch's operators (self CPU time of ``aten::`` events)."""
    sims = build(base, seeds, rounds, batched)
    path, coupled = ENGINES[engine]
    with fast_path.use(path), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        run_stack(sims, coupled)
        wall = time.perf_counter() - t0  # (the profiler's times are wall times)
    ops = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key.startswith("aten::")) * 1e-6
    return ops / wall


class _Capture(TorchDispatchMode):
    """Records each FLOP-carrying operator call: the op and its tensor arguments' shapes."""

    def __init__(self, ops: set) -> None:
        super().__init__()
        self.ops, self.calls = ops, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func.overloadpacket in self.ops:
            sig = (func, _meta(args), _meta(kwargs))
            self.calls[sig] = self.calls.get(sig, 0) + 1
        return func(*args, **kwargs)


def _meta(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return ("T", tuple(obj.shape), obj.dtype)
    if isinstance(obj, (list, tuple)):
        return tuple(_meta(o) for o in obj)
    if isinstance(obj, dict):
        return tuple(sorted((k, _meta(v)) for k, v in obj.items()))
    return obj


def _fresh(meta: Any, g: torch.Generator) -> Any:
    if isinstance(meta, tuple) and len(meta) == 3 and meta[0] == "T":
        return torch.randn(meta[1], dtype=meta[2], generator=g) if meta[2].is_floating_point \
            else torch.zeros(meta[1], dtype=meta[2])
    if isinstance(meta, tuple):
        return tuple(_fresh(m, g) for m in meta)
    return meta


def _calls(base: dict, seeds: list[int], rounds: int, batched: str) -> dict:
    from torch.utils.flop_counter import flop_registry

    sims = build(base, seeds, rounds, batched)
    cap = _Capture(set(flop_registry))
    with cap:
        run_stack(sims)
    return cap.calls


def arithmetic_seconds(base: dict, seeds: list[int], batched: str) -> tuple[float, float]:
    """Seconds per round that the FLOP-carrying operators of rounds 2 and 3 take replayed alone at
    their shapes (the arithmetic's lower bound on this core), and their FLOPs per round."""
    one, three = _calls(base, seeds, 1, batched), _calls(base, seeds, 3, batched)
    g = torch.Generator().manual_seed(0)
    seconds = flops = 0.0
    for sig, n3 in three.items():
        count = (n3 - one.get(sig, 0)) / 2
        if count <= 0:
            continue
        func, args, kwargs = sig
        a, kw = _fresh(args, g), dict(_fresh(kwargs, g))
        with FlopCounterMode(display=False) as fc:
            func(*a, **kw)
        f = fc.get_total_flops()
        reps = max(3, min(200, int(2e8 / max(f, 1))))  # about 0.05-0.2 s per shape
        t0 = CLOCK["now"]()
        for _ in range(reps):
            func(*a, **kw)
        seconds += count * (CLOCK["now"]() - t0) / reps
        flops += count * f
    return seconds, flops


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "uptime unavailable"


def rate(long: list[float], short: list[float], rounds: int) -> float:
    """Rounds per second of rounds 2..``rounds`` from the best ``rounds``-round and one-round
    times; where noise leaves no positive difference, the whole run's rate (a lower bound)."""
    diff = min(long) - min(short)
    return (rounds - 1) / diff if diff > 0 else rounds / min(long)


def alternate(fns: dict[Any, Callable[[], float]], repeats: int) -> dict[Any, list[float]]:
    out: dict[Any, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            out[k].append(fn())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated entries (default: all ten)")
    ap.add_argument("--rounds", type=int, default=5, help="the fewest rounds a timed run has")
    ap.add_argument("--seconds", type=float, default=1.0, help="about how long a timed run takes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="fast,stacked", help=f"comma-separated, of {sorted(ENGINES)}")
    ap.add_argument("--quick", action="store_true", help="runs of about 0.3 s, 2 repeats, no FedTAN/FedAvg+BN ratio")
    ap.add_argument("--no-ratio", action="store_true")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="time the runs by the process's CPU time (default) or the wall clock")
    args = ap.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        raise SystemExit(f"bench_quick: unknown shape(s) {bad}; pick from {sorted(SHAPES)}")
    engines = [e.strip() for e in args.engines.split(",")]
    for e in engines:
        if e not in ENGINES:
            raise SystemExit(f"bench_quick: unknown engine {e!r}; pick from {sorted(ENGINES)}")
    if args.quick:
        args.rounds, args.seconds, args.repeats, args.no_ratio = 3, 0.3, 2, True
    torch.set_num_threads(1)
    CLOCK["now"] = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"clock: {args.clock}; ", end="")
    print(f"torch {torch.__version__}, 1 thread; {time.strftime('%Y-%m-%d %H:%M')}; runs of about {args.seconds} s "
          f"(at least {args.rounds} rounds), best of {args.repeats}; {uptime()}")
    head = f"{'shape':12s} {'model':9s} {'method':7s} {'S':>2s} {'dur_s':>6s}"
    for e in engines:
        head += f" | {e[:9]:>9s} r/s  ops"
    if len(engines) == 2:
        head += f" | {engines[1][:4]}/{engines[0][:4]}"
    head += " | bound r/s  GFLOP/s  bound/ref"
    print(head, flush=True)
    for entry in shapes:
        base, seeds, batched = entry_shape(entry)
        for e in engines:
            timed(base, seeds, 1, batched, e)  # warm-up: first calls, caches
        per_round = max(marginal(base, seeds, 3, batched, engines[0]) / 2, 1e-4)
        rounds = max(args.rounds, min(400, round(args.seconds / per_round)))  # each timed run about --seconds
        t = alternate({(e, n): partial(timed, base, seeds, n, batched, e) for e in engines for n in (rounds, 1)},
                      args.repeats)
        rps = {e: rate(t[e, rounds], t[e, 1], rounds) for e in engines}
        share = {e: op_share(base, seeds, 3, batched, e) for e in engines}
        sec, flops = arithmetic_seconds(base, seeds, batched)
        line = (f"{entry:12s} {base['model']['name']:9s} {base['method'][:7]:7s} {len(seeds):2d} "
                f"{duration(entry):6.0f}")
        for e in engines:
            line += f" | {rps[e]:13.2f} {100 * share[e]:3.0f}%"
        if len(engines) == 2:
            line += f" | {rps[engines[1]] / rps[engines[0]]:9.2f}"
        line += f" | {1 / sec:9.1f} {flops / sec / 1e9:8.1f} {1 / sec / rps[engines[0]]:9.1f}"
        print(line, flush=True)
    if not args.no_ratio:
        base, seeds, batched = entry_shape(RATIO_SHAPE)
        avg = {**base, "method": "fedavg+bn"}
        for e in engines:
            timed(base, seeds, 1, batched, e)
            t = alternate({(m, n): partial(timed, b, seeds, n, batched, e)
                           for m, b in (("fedtan", base), ("fedavg+bn", avg)) for n in (21, 1)}, args.repeats)
            sec = {m: 20 / rate(t[m, 21], t[m, 1], 21) for m in ("fedtan", "fedavg+bn")}
            print(f"{RATIO_SHAPE} round, FedTAN / FedAvg+BN on {e}: {sec['fedtan'] / sec['fedavg+bn']:.2f} "
                  f"({1e3 * sec['fedtan'] / 20:.1f} vs {1e3 * sec['fedavg+bn'] / 20:.1f} ms per round)", flush=True)
    print(uptime())


if __name__ == "__main__":
    main()
