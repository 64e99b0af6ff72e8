"""Where a quick run's time goes: cProfile of one run, sequential vs batched engine (issue 15).

One training run in the shape of a quick reproduction is profiled twice, with
``TrainConfig.batched`` "off" (the sequential reference) and "on", after one untimed warm-up
round each, with an evaluation and a checkpoint every round. The run's wall time is split by
the engine's entry points, measured inclusively (cProfile's cumtime):

* ``local training``: the clients' ``train`` (:class:`bnfl.fl.clients.Sequential` or the batched
  engine's: every participant's local steps and the uploads) and, sequentially, FedTAN's coupled
  first step (``Simulation.coupled_step``);
* ``server``: the rest of ``Simulation._train_round`` (download, aggregation);
* ``evaluation``: ``Simulation.evaluate``;
* ``checkpoint``: ``Simulation.save_checkpoint`` (torch.save of the states and the history);
* ``other``: what is left (round hooks, the history, the progress bar).

A second line splits the whole run by kind: torch's own operators (the own time of torch's
built-in functions and tensor methods: the arithmetic, and the C++ dispatch around it) against
Python (everything else: the engine, the layers' Python, torch's Python wrappers). A last part
times a checkpoint written every round against none on the digits MLP, the smallest model,
where a checkpoint weighs most.

Usage::

    python benchmarks/profile_round.py [--rounds 10] [--setting hbn-quick|fedtan-quick]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from bnfl import fl  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_seeds import SETTINGS  # noqa: E402  (HBN's and FedTAN's quick bases)

torch.set_num_threads(1)

PHASES = ("local training", "server", "evaluation", "checkpoint", "other")


def _sim(base: dict, rounds: int, batched: str, *, eval_every: int, out: str | None = None) -> fl.Simulation:
    spec = copy.deepcopy(base)
    spec.update(rounds=rounds, seed=0)
    spec["train"].update(eval_every=eval_every, progress=False, batched=batched)
    if out is not None:
        spec["out"] = out
    return fl.build(spec)


def _cum(stats: dict, file_end: str, name: str) -> float:
    return sum(cum for (f, _, n), (_, _, _, cum, _) in stats.items()
               if n == name and f.replace("\\", "/").endswith(file_end))


def _is_torch_op(filename: str, name: str) -> bool:
    # cProfile names C functions "<built-in method ...>" / "<method '...' of 'torch._C...' objects>"
    return filename == "~" and ("torch" in name or "Tensor" in name)


def profile(base: dict, rounds: int, batched: str) -> tuple[float, dict[str, float], float]:
    """Wall seconds of ``rounds`` rounds (after a warm-up round), seconds per phase, and the
    seconds spent in torch's own operators."""
    _sim(base, 1, batched, eval_every=1).run()  # warm-up: first calls, caches
    with tempfile.TemporaryDirectory() as tmp:
        sim = _sim(base, rounds, batched, eval_every=1, out=tmp)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        sim.run()
        prof.disable()
        wall = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    local = (_cum(stats, "bnfl/fl/clients.py", "train") + _cum(stats, "bnfl/fl/batched.py", "train")
             + _cum(stats, "bnfl/fl/engine.py", "coupled_step"))
    rnd = _cum(stats, "bnfl/fl/engine.py", "_train_round")
    phases = {"local training": local, "server": max(rnd - local, 0.0),
              "evaluation": _cum(stats, "bnfl/fl/_evaluate.py", "evaluate"),
              "checkpoint": _cum(stats, "bnfl/fl/_checkpoint.py", "save_checkpoint")}
    phases["other"] = max(wall - sum(phases.values()), 0.0)
    ops = sum(tt for (f, _, n), (_, _, tt, _, _) in stats.items() if _is_torch_op(f, n))
    return wall, phases, ops


def checkpoint_cost(rounds: int, repeats: int = 3) -> tuple[float, float]:
    """Median seconds per round of the digits MLP (FedAvg+BN) with a checkpoint every round and without."""
    base = SETTINGS["fedtan-quick"]
    with_ckpt, without = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            sim = _sim(base, rounds, "on", eval_every=rounds, out=tmp)
            t0 = time.perf_counter()
            sim.run()
            with_ckpt.append((time.perf_counter() - t0) / rounds)
        sim = _sim(base, rounds, "on", eval_every=rounds)
        t0 = time.perf_counter()
        sim.run()
        without.append((time.perf_counter() - t0) / rounds)
    return statistics.median(with_ckpt), statistics.median(without)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="hbn-quick")
    args = ap.parse_args()
    base = SETTINGS[args.setting]
    print(f"{args.setting}: {args.rounds} rounds, evaluation and a checkpoint every round, one torch thread\n")
    rows = {mode: profile(base, args.rounds, mode) for mode in ("off", "on")}
    print(f"{'':16s}{'sequential':>20s}{'batched':>20s}")
    for ph in PHASES:
        print(f"{ph:16s}" + "".join(f"{v[ph]:10.2f} s ({100 * v[ph] / w:4.1f}%)" for w, v, _ in rows.values()))
    print(f"{'wall':16s}" + "".join(f"{w:10.2f} s{'':8s}" for w, _, _ in rows.values()))
    print(f"{'torch operators':16s}" + "".join(f"{o:10.2f} s ({100 * o / w:4.1f}%)" for w, _, o in rows.values()))
    print(f"\nsequential / batched wall: {rows['off'][0] / rows['on'][0]:.2f} "
          "(under cProfile, which inflates Python-heavy code most)")
    ck, no = checkpoint_cost(rounds=100)
    print(f"\ndigits MLP, FedAvg+BN, batched, 100 rounds: {1e3 * ck:.2f} ms per round with a checkpoint every round, "
          f"{1e3 * no:.2f} ms without ({100 * (ck - no) / ck:.0f}% of a round)")


if __name__ == "__main__":
    main()
