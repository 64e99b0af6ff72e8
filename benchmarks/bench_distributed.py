"""Seconds per round of FedTAN and FedAvg+BN: the simulator vs the torch.distributed backend
with 1, 2 and 4 gloo ranks on this machine (digits, 10 clients, 5 local steps of batch 32).

    python benchmarks/bench_distributed.py [--rounds 4]

Prints a Markdown table: the median round time over the rounds after the first (warm-up),
evaluation included. Ranks are processes on 127.0.0.1; with fewer cores than ranks the
processes share cores, which the numbers show.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bnfl.fl import build

MODELS = {"q_mlp_bn": "flat", "q_scnn": "image"}


def config(method: str, model: str, rounds: int) -> dict:
    return {"method": method, "seed": 0, "rounds": rounds, "model": {"name": model},
            "data": {"name": "digits", "form": MODELS[model]},
            "partition": {"kind": "classes_per_client", "num_clients": 10, "k": 2},
            "train": {"local_steps": 5, "batch_size": 32, "lr": 0.05, "progress": False, "batched": "off"}}


def per_round(rows: list[dict]) -> float:
    times = [r["round_time"] for r in rows if not r.get("statistics_only")]
    return statistics.median(times[1:] if len(times) > 1 else times)


def _rank(rank: int, world: int, port: int, cfg: dict, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sim = build(cfg, engine="distributed")
    hist = sim.run()
    if rank == 0:
        torch.save(per_round(hist.rows), out)
    dist.destroy_process_group()


def distributed(cfg: dict, world: int) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.pt")
        mp.start_processes(_rank, args=(world, port, cfg, out), nprocs=world, start_method="spawn")
        return float(torch.load(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"cores: {os.cpu_count()}; s/round (median of rounds 2..{args.rounds})\n")
    print("| model | method | simulator | " + " | ".join(f"{w} rank{'s' * (w > 1)}" for w in args.ranks) + " |")
    print("|---|---|---|" + "---|" * len(args.ranks))
    for model in MODELS:
        for method in ("fedtan", "fedavg+bn"):
            cfg = config(method, model, args.rounds)
            sim = build(cfg).run()
            cells = [f"{per_round(sim.rows):.3f}"] + [f"{distributed(cfg, w):.3f}" for w in args.ranks]
            print(f"| {model} | {method} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
