"""Calibrate ``bnfl diagnose``'s small-batch rule on measured damage, for an MLP and a conv net.

For each model (``q_mlp_bn``, the MLP 64-32-BN-32-BN-10 on flat digits; ``q_lenet``, a LeNet with
BN on 1x8x8 digits) and batch size B, it trains FedAvg+BN and FedAvg+GN (the same model with
GroupNorm: no batch statistics) on the embedded digits, 5 clients, Dirichlet(0.5), the same
seeds, and prints

- BN's damage: the paired difference GN - BN of the final test accuracy over the seeds, with the
  95% t-interval the reports use (:func:`bnfl.experiments.intervals.t_interval`);
- the batch noise ``bnfl.diagnose`` measures at the model's initialisation for that B
  (:func:`bnfl.diagnosis.measure.batch_noise`, mean over BN layers).

The threshold :data:`bnfl.diagnosis.rules.SMALL_BATCH_THRESHOLD` sits between the noise of the
settings where BN loses accuracy and those where it does not (the numbers are in
``bnfl/diagnosis/rules.py`` and ``docs/diagnose.md``)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/calibrate_small_batch.py
"""

from __future__ import annotations

import json
import sys
import time

import torch

SEEDS = (0, 1, 2)
BATCHES = (2, 4, 32)
MODELS = {"q_mlp_bn": "flat", "q_lenet": "image"}


def config(model: str, form: str, method: str, batch_size: int, seed: int) -> dict:
    return {"method": method, "seed": seed, "rounds": 10, "model": {"name": model},
            "data": {"name": "digits", "form": form},
            "partition": {"kind": "dirichlet", "num_clients": 5, "phi": 0.5},
            "train": {"local_steps": 1, "local_unit": "epochs", "batch_size": batch_size, "lr": 0.05,
                      "progress": False}}


def noise(model: str, form: str, batch_size: int) -> float:
    from bnfl.diagnosis.cli import diagnose_config

    d = diagnose_config(config(model, form, "fedavg+bn", batch_size, 0), progress=False, permutations=1,
                        stat_samples=128)
    return sum(r["batch_noise"] for r in d.layers) / len(d.layers)


def main() -> int:
    from bnfl import fl
    from bnfl.experiments.intervals import t_interval

    torch.set_num_threads(1)
    start = time.perf_counter()
    out = []
    for model, form in MODELS.items():
        for b in BATCHES:
            acc = {m: [fl.run(config(model, form, m, b, s)).rows[-1]["test_acc"] for s in SEEDS]
                   for m in ("fedavg+bn", "fedavg+gn")}
            iv = t_interval([100 * (g - n) for g, n in zip(acc["fedavg+gn"], acc["fedavg+bn"], strict=True)],
                            paired=True)
            row = {"model": model, "B": b, "noise": round(noise(model, form, b), 4),
                   "bn": [round(100 * a, 1) for a in acc["fedavg+bn"]],
                   "gn": [round(100 * a, 1) for a in acc["fedavg+gn"]], "damage": iv.text(1)}
            print(json.dumps(row), flush=True)
            out.append(row)
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
