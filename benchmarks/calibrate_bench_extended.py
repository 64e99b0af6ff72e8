"""The BN-only calibration of the extended ``bnfl bench`` (issue 51, part 2): FedAvg+BN on every
candidate scale of every setting and its iid control, 5 seeds, before any fix runs. Prints the json
that :data:`bnfl.experiments.benchmarks.bench_extended.CALIBRATION` stores, and the rule's choice.

    OMP_NUM_THREADS=1 python benchmarks/calibrate_bench_extended.py [SETTING ...] > calib.json
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bnfl.experiments.benchmarks import bench_extended as X
from bnfl.experiments.core import Context, machine


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    settings = argv or list(X.CANDIDATES)
    ctx = Context(profile="quick", device="cpu", seeds=[0, 1, 2, 3, 4], progress=False, batched="auto")
    t0 = time.perf_counter()
    out = X.measure_calibration(ctx, settings)
    print(json.dumps({"calibration": out, "seconds": round(time.perf_counter() - t0, 1),
                      "machine": machine()}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
