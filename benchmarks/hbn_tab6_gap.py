"""Why hbn-tab6's full HBN (94.91 +- 2.33, quick, before issue 25) sat below the reference-variants
benchmark's "bnfl HBN (paper)" (97.04 +- 0.16, ``benchmarks/hbn_reference_variants.py``).

Both train HBN (bnfl's defaults: lambda = 0.01, EMA test statistics) with ``q_scnn`` on digits as 1x8x8
images, Dirichlet(0.6) over 20 clients, 5 a round, batch 4, 1 local epoch, SGD momentum 0.9, lr 0.005
(hbn-tab6's rate: HBN's pick at B = 4), 60 rounds, seeds 0 1 2. They differ in two things only:

* the learning-rate decay: hbn-tab6 decays the rate x0.998 a round (the paper's "decays with 0.998"),
  the benchmark keeps it constant;
* the engine: hbn-tab6 trains the three seeds in lock-step on the batched engine (equal to the
  sequential engine up to rounding), the benchmark each seed on the sequential engine.

This script measures the four combinations, then hbn-tab6's issue-25 protocol (lambda scaled to T = 60,
tested with the evaluated round's clients' statistics). Prints a markdown table (per seed, mean +- std).

Run: ``OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hbn_tab6_gap.py [--only N]`` (5 variants x 3 seeds;
about 5 minutes on one core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from bnfl.experiments.core import Context  # noqa: E402
from bnfl.experiments.papers.hbn.setups import Q_BASE, hbn_options, spec, variant  # noqa: E402
from bnfl.experiments.training import final, train_seeds  # noqa: E402

SEEDS = [0, 1, 2]
#: label -> (engine, lr decay per round, HBN options)
VARIANTS: dict[str, tuple[str, float, dict[str, Any]]] = {
    "sequential, no decay (= the benchmark)": ("off", 1.0, {}),
    "sequential, decay 0.998": ("off", 0.998, {}),
    "lock-step batched, no decay": ("auto", 1.0, {}),
    "lock-step batched, decay 0.998 (= hbn-tab6 before issue 25)": ("auto", 0.998, {}),
    "lock-step batched, decay 0.998, scaled lambda + Sec. 4.1 test stats (hbn-tab6 now)":
        ("auto", 0.998, hbn_options("CIFAR-10")),
}


def accuracies(engine: str, decay: float, options: dict[str, Any]) -> list[float]:
    """Final test accuracy (%) of HBN on hbn-tab6's quick setting, one per seed."""
    ctx = Context(profile="quick", seeds=SEEDS, batched=engine)
    s = spec(Q_BASE, variant("HBN", **options), {"train": {"lr": 0.005, "decay": decay}})
    return [final(r) for r in train_seeds(ctx, s)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, default=None, help="run only the variant of this index (0-based)")
    args = parser.parse_args()
    items = list(VARIANTS.items())
    if args.only is not None:
        items = [items[args.only]]
    print("| variant | " + " | ".join(f"seed {s}" for s in SEEDS) + " | mean +- std |")
    print("|---" * (len(SEEDS) + 2) + "|")
    for label, (engine, decay, options) in items:
        t0 = time.perf_counter()
        a = accuracies(engine, decay, options)
        sd = statistics.stdev(a) if len(a) > 1 else 0.0
        cells = " | ".join(f"{x:.2f}" for x in a)
        print(f"| {label} | {cells} | {statistics.fmean(a):.2f} +- {sd:.2f} | ({time.perf_counter() - t0:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main()
