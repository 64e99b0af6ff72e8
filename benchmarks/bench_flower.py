"""Seconds per round of FedBN on digits: bnfl's simulator vs the same run through Flower's
simulation runtime (bnfl.fl.flower: one node per client, Ray actors of one CPU).

    python benchmarks/bench_flower.py [--rounds 10] [--clients 5]

Prints a Markdown table: the median round time over the rounds after the first (warm-up), with
evaluation (FedBN evaluates every client's own model, on its node under Flower); the first
round apart; and Flower's start-up (Ray, the actors, every node answering) apart. Both runs
use the same config and seed and give the same history (checked here too).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from bnfl.fl import build  # noqa: E402
from bnfl.fl.engine import TIME_FIELDS  # noqa: E402


def config(rounds: int, clients: int) -> dict:
    return {"method": "fedbn", "seed": 0, "rounds": rounds, "data": {"name": "digits", "form": "flat"},
            "partition": {"kind": "dirichlet", "num_clients": clients, "phi": 1.0},
            "train": {"local_steps": 5, "batch_size": 32, "lr": 0.05, "progress": False,
                      "batched": "off"}}  # Flower runs its clients one by one: compare like with like


def per_round(rows: list[dict]) -> tuple[float, float]:
    """(first round, median of the later rounds) in seconds."""
    times = [r["round_time"] for r in rows if not r.get("statistics_only")]
    return times[0], statistics.median(times[1:] if len(times) > 1 else times)


def main() -> None:
    from bnfl.fl.flower import run_flower
    from bnfl.train.config import setup_from_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = config(args.rounds, args.clients)

    t0 = time.perf_counter()
    sim = build(cfg)
    hist = sim.run()
    sim_total = time.perf_counter() - t0
    res = run_flower(setup_from_config(cfg, out=None))
    same = [{k: v for k, v in r.items() if k not in TIME_FIELDS} for r in hist.rows] == \
        [{k: v for k, v in r.items() if k not in TIME_FIELDS} for r in res.history.rows]

    s1, s = per_round(hist.rows)
    f1, f = per_round(res.history.rows)
    print(f"FedBN, digits, {args.clients} clients, {args.rounds} rounds, 5 local steps of 32; "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), torch {torch.__version__}, "
          f"same history: {same}\n")
    print("| engine | start-up (s) | round 1 (s) | s/round (median, rounds 2..) | whole run (s) |")
    print("|---|---|---|---|---|")
    print(f"| bnfl simulator | - | {s1:.3f} | {s:.3f} | {sim_total:.1f} |")
    print(f"| Flower (run_simulation) | {res.startup_s:.1f} | {f1:.3f} | {f:.3f} | {res.total_s:.1f} |")
    print(f"\nFlower / simulator per round: {f / s:.1f}x")


if __name__ == "__main__":
    main()
