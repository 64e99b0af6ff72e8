"""Seeds of one configuration: one by one (sequential, batched) vs in lock-step (issue 15).

For each setting, S seeds of the same run are trained three ways, alternately (load on a
shared machine hits all three): each seed with the sequential engine, each seed with the batched
engine, and all seeds together with :func:`bnfl.fl.lockstep.run_lockstep` (every seed's clients
in one batched computation per round). Printed: the wall time of the S runs (build excluded),
the ratios, and the largest difference of a final test accuracy between a seed's lock-step run
and its own batched run (rounding; in test samples).

Settings (the quick profiles' shapes):

* ``hbn-quick``: HBN on Q-SCNN, digits as 1x8x8 images, 20 Dirichlet(0.6) clients, 5 per
  round, B = 4, one local epoch, momentum 0.9 (HBN's quick base, ``hbn/setups.py``);
* ``fedtan-quick``: FedAvg+BN on the digits MLP, 5 clients with 2 classes each, 5 local steps
  of 32 (FedTAN's quick base).

Usage::

    python benchmarks/bench_seeds.py [--seeds 3] [--rounds 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from bnfl import fl  # noqa: E402
from bnfl.fl.lockstep import run_lockstep  # noqa: E402

SETTINGS = {
    "hbn-quick": {"method": "hbn", "data": {"name": "digits", "form": "image"}, "model": {"name": "q_scnn"},
                  "partition": {"kind": "dirichlet", "phi": 0.6, "num_clients": 20},
                  "train": {"local_unit": "epochs", "local_steps": 1, "batch_size": 4, "lr": 0.005,
                            "momentum": 0.9, "participation": 0.25}},
    "fedtan-quick": {"method": "fedavg+bn", "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
                     "partition": {"kind": "classes_per_client", "k": 2, "num_clients": 5},
                     "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1}},
}


def _sims(base: dict, seeds: list[int], rounds: int, batched: str) -> list[fl.Simulation]:
    out = []
    for s in seeds:
        spec = copy.deepcopy(base)
        spec.update(rounds=rounds, seed=s)
        spec["partition"]["seed"] = s
        spec["train"].update(eval_every=rounds, progress=False, batched=batched)
        out.append(fl.build(spec))
    return out


def one_by_one(base: dict, seeds: list[int], rounds: int, batched: str) -> tuple[float, list[float], int]:
    """Wall time of the seeds' runs one after another, their final test accuracies, the test size."""
    sims = _sims(base, seeds, rounds, batched)
    t0 = time.perf_counter()
    accs = [sim.run().rows[-1]["test_acc"] for sim in sims]
    return time.perf_counter() - t0, accs, int(sims[0].y_test.shape[0])


def together(base: dict, seeds: list[int], rounds: int) -> tuple[float, list[float], int]:
    """The same, all seeds in lock-step."""
    sims = _sims(base, seeds, rounds, "on")
    t0 = time.perf_counter()
    outs = run_lockstep(sims)
    return time.perf_counter() - t0, [h.rows[-1]["test_acc"] for h in outs], int(sims[0].y_test.shape[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, CPU; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"{args.seeds} seeds, {args.rounds} rounds")
    summary = []
    for name, base in SETTINGS.items():
        one_by_one(base, seeds, 2, "on")  # warm-up
        together(base, seeds, 2)
        times: dict[str, list[float]] = {"sequential": [], "batched": [], "lock-step": []}
        accs: dict[str, list[float]] = {}
        for rep in range(args.repeats):
            for way in ("sequential", "batched", "lock-step"):
                if way == "lock-step":
                    sec, acc, n_test = together(base, seeds, args.rounds)
                else:
                    sec, acc, n_test = one_by_one(base, seeds, args.rounds, "off" if way == "sequential" else "on")
                times[way].append(sec)
                accs[way] = acc
                print(f"  {name} repeat {rep + 1}: {way:10s} {sec:6.2f} s  test acc {[round(a, 4) for a in acc]}",
                      flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        drift = max(abs(a - b) for a, b in zip(accs["lock-step"], accs["batched"], strict=True)) * n_test
        summary.append((name, med, drift))
    print(f"\n=== {args.seeds} seeds x {args.rounds} rounds, wall time of all seeds (median of {args.repeats}) ===")
    for name, med, drift in summary:
        print(f"{name:13s} sequential {med['sequential']:6.2f} s  batched {med['batched']:6.2f} s  "
              f"lock-step {med['lock-step']:6.2f} s   sequential/lock-step {med['sequential'] / med['lock-step']:.2f}  "
              f"batched/lock-step {med['batched'] / med['lock-step']:.2f}   "
              f"final accuracy, lock-step vs batched: {drift:.0f} test sample(s) apart at most")


if __name__ == "__main__":
    main()
