"""Seconds per round of every bnfl.fl algorithm, and FedTAN's cost relative to FedAvg+BN.

Settings (B=32, E=1 local step, full participation):

* digits Q-MLP-BN (flat 64-d) and Q-SCNN (the Simple-CNN pattern at 8x8), 5 and 100 clients
  (k=2 classes per client for 5 clients, Dirichlet(0.5) for 100);
* ResNet-20 on random 3x32x32 inputs, 5 clients (64 samples each).

Each cell is the median wall time of the timed rounds (after one warm-up round), evaluation
excluded. The FedTAN / FedAvg+BN ratio is measured separately with the two runs advanced
alternately round by round (median and min over rounds), so load on a shared machine hits
both sides.

Usage::

    python benchmarks/bench_fl.py            # every algorithm (~ a few minutes on 2 CPU cores)
    python benchmarks/bench_fl.py --quick    # FedAvg, FedTAN, FedBN, HBN; fewer rounds
    python benchmarks/bench_fl.py --device cuda
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bnfl import data as bdata  # noqa: E402
from bnfl import fl, models  # noqa: E402


def _setting(name: str, clients: int):
    if name == "resnet20":
        g = torch.Generator().manual_seed(0)
        n = 64 * clients
        x = torch.randn(n, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (n,), generator=g)
        parts = [np.arange(i * 64, (i + 1) * 64) for i in range(clients)]
        return fl.FederatedData(x, y, x[:64], y[:64], parts), ("resnet20", {})
    form = "flat" if name == "q_mlp_bn" else "image"
    split = bdata.digits(form=form)
    y = split.y_train.numpy()
    if clients == 5:
        parts = bdata.partition.classes_per_client(y, 2, 5, 0)
    else:
        parts = bdata.partition.dirichlet(y, clients, 0.5, 0, min_size=4)
    kw = {"in_channels": 1, "input_size": 8}
    return fl.FederatedData.from_split(split, parts), (name, kw)


def time_round(setting: str, clients: int, algorithm: str, *, rounds: int, device: str) -> float:
    data, (mname, kw) = _setting(setting, clients)
    norm = {"hbn": "hbn", "fbn": "fbn"}.get(algorithm, "bn")
    torch.manual_seed(0)
    model = models.build(mname, norm=norm, num_classes=10, **kw)
    opts = {"fedtan2": {"switch": rounds + 1}}.get(algorithm, {})
    alg = fl.make_algorithm(algorithm, **opts)
    if algorithm == "hbn":
        alg.final_round = False
    cfg = fl.TrainConfig(rounds=rounds + 1, local_steps=1, batch_size=32, lr=0.01, momentum=0.9,
                         eval_every=10_000, progress=False, device=device, batched="off")
    sim = fl.Simulation(model, data, alg, cfg)
    hist = sim.run(stop_after=rounds)  # no evaluation before the last round
    times = [r["round_time"] for r in hist.rows[1:]]  # drop the warm-up round
    return statistics.median(times)


def _sim(setting: str, clients: int, algorithm: str, *, rounds: int, device: str) -> fl.Simulation:
    data, (mname, kw) = _setting(setting, clients)
    torch.manual_seed(0)
    model = models.build(mname, norm="bn", num_classes=10, **kw)
    cfg = fl.TrainConfig(rounds=rounds + 1, local_steps=1, batch_size=32, lr=0.01, momentum=0.9,
                         eval_every=10_000, progress=False, device=device, batched="off")
    return fl.Simulation(model, data, fl.make_algorithm(algorithm), cfg)


def interleaved_ratio(setting: str, clients: int, *, rounds: int, device: str) -> tuple[float, float]:
    """FedTAN / FedAvg+BN round time, the two runs advanced alternately round by round so that
    load changes on a shared machine hit both sides; returns (median, min) over rounds."""
    tan = _sim(setting, clients, "fedtan", rounds=rounds, device=device)
    avg = _sim(setting, clients, "fedavg", rounds=rounds, device=device)
    for r in range(1, rounds + 1):
        avg.run(stop_after=r)
        tan.run(stop_after=r)
    ratios = [t["round_time"] / a["round_time"] for t, a in zip(tan.history.rows[1:], avg.history.rows[1:],
                                                                strict=True)]
    return statistics.median(ratios), min(ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 algorithms, 2 timed rounds")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    algs = ["fedavg", "fedtan", "fedbn", "hbn"] if args.quick else sorted(fl.ALGORITHMS)
    rounds = 3 if args.quick else 4
    settings = [("q_mlp_bn", 5), ("q_mlp_bn", 100), ("q_scnn", 5), ("q_scnn", 100), ("resnet20", 5)]
    t0 = time.perf_counter()
    table: dict[tuple[str, int], dict[str, float]] = {}
    for s, k in settings:
        row = {a: time_round(s, k, a, rounds=rounds, device=args.device) for a in algs}
        table[(s, k)] = row
        print(f"{s:>9} K={k:<3} " + " ".join(f"{a}={row[a] * 1e3:.1f}ms" for a in algs), flush=True)
    ratios = {sk: interleaved_ratio(*sk, rounds=2 * rounds, device=args.device) for sk in table}
    print("\nseconds per round (B=32, E=1, full participation), device:", args.device)
    head = f"| {'setting':<14} | " + " | ".join(f"{a:>11}" for a in algs) + " | FedTAN/FedAvg+BN median (min) |"
    print(head)
    print("|" + "---|" * (len(algs) + 2))
    for (s, k), row in table.items():
        med, low = ratios[(s, k)]
        print(f"| {s + ' K=' + str(k):<14} | " + " | ".join(f"{row[a]:>11.4f}" for a in algs)
              + f" | {med:.2f} ({low:.2f}) |")
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
