"""Calibrate the settings of ``bench-bn-fixes`` from FedAvg+BN alone, before any fix runs.

For every candidate scale of every setting (:data:`bnfl.experiments.benchmarks.bn_fixes_settings.CANDIDATES`)
this trains FedAvg+BN with the skewed split and with the iid control, 5 seeds each (batched,
lock-step), prints the damage (iid - skewed: paired 95% t-interval) and the candidate the
pre-stated rule picks (:func:`~bnfl.experiments.benchmarks.bn_fixes_settings.choose`). The printed
JSON is what ``CALIBRATION`` and ``CHOSEN`` in that module record::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/calibrate_bench_bn_fixes.py
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bnfl.experiments.benchmarks.bn_fixes_settings import SETTINGS, calibrate
from bnfl.experiments.core import Context


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    settings = argv or list(SETTINGS)
    start = time.perf_counter()
    ctx = Context(profile="quick", seeds=[0, 1, 2, 3, 4], batched="auto", progress=False)
    out = calibrate(ctx, settings)
    print(json.dumps(out, indent=1))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
