"""How much each choice of HBN's reference code moves HBN's final test accuracy at quick scale.

Digits as 1x8x8 images, ``q_scnn`` with HBN layers, a Dirichlet(0.6) partition of 20 clients,
participation 0.25 (5 clients a round), batch 4, 1 local epoch, SGD momentum 0.9, lr 0.005,
60 rounds, seeds 0 1 2. HBN as the paper states it (bnfl's defaults), then each option that
reproduces the authors' code (github.com/Hongyao-Chen/HybridBN, see docs/hbn-reference-code.md)
alone, then all of them (:meth:`bnfl.fl.HBN.reference_code`, with its T+1 = 61 training rounds),
and all but the recomputed test statistics.
Prints a markdown table: final test accuracy per seed, mean +- std over seeds, and the paired
difference to the default. Numbers are in docs/hbn-reference-code.md.

Run: ``OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hbn_reference_variants.py [--seeds 0 1 2]``
(11 variants x 3 seeds; about 5 minutes on one core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from bnfl import fl  # noqa: E402
from bnfl.fl.algorithms._hbn_options import REFERENCE_CODE  # noqa: E402

ROUNDS = 60

#: label -> (HBN options, rounds); the first is the baseline of the paired differences.
VARIANTS: dict[str, tuple[dict[str, Any], int]] = {
    "bnfl HBN (paper)": ({}, ROUNDS),
    "lam=0.002": ({"lam": 0.002}, ROUNDS),
    "count=samples": ({"count": "samples"}, ROUNDS),
    "stat_source=reference": ({"stat_source": "reference"}, ROUNDS),
    "first_estimate=blend": ({"first_estimate": "blend"}, ROUNDS),
    "alpha_sharing=averaged": ({"alpha_sharing": "averaged"}, ROUNDS),
    "clip_grad_norm=10": ({"clip_grad_norm": 10.0}, ROUNDS),
    "eval_stats=recompute": ({"eval_stats": "recompute"}, ROUNDS),
    "T+1 training rounds": ({"final_round": False}, ROUNDS + 1),
    "all (HBN.reference_code)": (dict(REFERENCE_CODE), ROUNDS + 1),
    "all but eval_stats=recompute": ({**REFERENCE_CODE, "eval_stats": "global"}, ROUNDS + 1),
}


def config(options: dict[str, Any], rounds: int, seed: int) -> dict[str, Any]:
    """The run config of one variant and seed (``bnfl.fl.build``)."""
    return {
        "method": "hbn", "method_options": options, "model": {"name": "q_scnn"},
        "data": {"name": "digits", "form": "image"},
        "partition": {"kind": "dirichlet", "num_clients": 20, "phi": 0.6, "seed": seed},
        "train": {"participation": 0.25, "batch_size": 4, "local_steps": 1, "local_unit": "epochs",
                  "momentum": 0.9, "lr": 0.005, "progress": False, "batched": "off"},
        "rounds": rounds, "seed": seed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    accs: dict[str, list[float]] = {}
    for label, (options, rounds) in VARIANTS.items():
        t0 = time.perf_counter()
        accs[label] = [100 * fl.build(config(options, rounds, s)).run().rows[-1]["test_acc"] for s in args.seeds]
        print(f"{label}: {time.perf_counter() - t0:.0f} s", flush=True)
    ref = accs[next(iter(VARIANTS))]

    def mean_std(xs: list[float]) -> tuple[float, float]:
        return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0

    seeds = " | ".join(f"seed {s}" for s in args.seeds)
    print(f"\n| HBN variant | {seeds} | mean +- std | paired diff to paper (pts) |")
    print("|---" * (len(args.seeds) + 3) + "|")
    for label, a in accs.items():
        m, sd = mean_std(a)
        dm, dsd = mean_std([x - y for x, y in zip(a, ref, strict=True)])
        cells = " | ".join(f"{x:.2f}" for x in a)
        print(f"| {label} | {cells} | {m:.2f} +- {sd:.2f} | {dm:+.2f} +- {dsd:.2f} |")


if __name__ == "__main__":
    main()
