"""Calibrate ``bnfl diagnose``'s small-batch rule on measured damage, for MLPs and conv nets.

For each setting (model, Dirichlet concentration, number of clients) and batch size B it trains
FedAvg+BN and FedAvg+GN (the same model with GroupNorm: no batch statistics) on the embedded
digits with the same seeds (10 rounds of 1 local epoch, lr 0.05, every client every round) and
prints

- BN's damage: the paired difference GN - BN of the final test accuracy over the seeds, with the
  95% t-interval the reports use (:func:`bnfl.experiments.intervals.t_interval`);
- ``vs_B32``: the same difference minus its value at B = 32, paired by seed (the part of the
  damage that the small batch adds to what the partition does at any batch size);
- the batch noise ``bnfl.diagnose`` measures at the model's initialisation for that B
  (:func:`bnfl.diagnosis.measure.batch_noise`): the sum over BN layers the rule reads
  (:func:`bnfl.diagnosis.rules.total_batch_noise`), the mean, the largest layer's, and each
  layer's.

Settings: ``q_mlp_bn`` (MLP 64-32-BN-32-BN-10 on flat digits) and ``q_lenet`` (LeNet with BN on
1x8x8 digits), 5 clients, Dirichlet(0.5); ``q_res`` (a ResNet-20 layout, 8-16-32 channels, maps
8x8, 4x4, 2x2) and ``tiny_vgg`` (6 convs, maps 8x8, 4x4, 2x2, then 1x1), 20 clients,
Dirichlet(0.1): deep layers with small maps and many skewed clients, HBN's regime. The threshold
:data:`bnfl.diagnosis.rules.SMALL_BATCH_THRESHOLD` sits between the noise of the settings where BN
loses accuracy and those where it does not (the numbers are in ``bnfl/diagnosis/rules.py`` and
``docs/diagnose.md``)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/calibrate_small_batch.py            # all settings
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/calibrate_small_batch.py q_res      # one model
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/calibrate_small_batch.py q_scnn --batches 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

SEEDS = (0, 1, 2)
BATCHES = (32, 4, 2)
#: model -> (data form, Dirichlet concentration, number of clients)
SETTINGS = {"q_mlp_bn": ("flat", 0.5, 5), "q_lenet": ("image", 0.5, 5),
            "q_res": ("image", 0.1, 20), "tiny_vgg": ("image", 0.1, 20), "q_scnn": ("image", 0.1, 20)}


def config(model: str, method: str, batch_size: int, seed: int) -> dict:
    form, phi, clients = SETTINGS[model]
    return {"method": method, "seed": seed, "rounds": 10, "model": {"name": model},
            "data": {"name": "digits", "form": form},
            "partition": {"kind": "dirichlet", "num_clients": clients, "phi": phi},
            "train": {"local_steps": 1, "local_unit": "epochs", "batch_size": batch_size, "lr": 0.05,
                      "progress": False}}


def noise(model: str, batch_size: int) -> list[float]:
    """Each BN layer's batch noise at initialisation (seed 0's model and partition)."""
    from bnfl.diagnosis.cli import diagnose_config

    d = diagnose_config(config(model, "fedavg+bn", batch_size, 0), progress=False, permutations=1,
                        stat_samples=128)
    return [r["batch_noise"] for r in d.layers]


def main(argv: list[str]) -> int:
    from bnfl import fl
    from bnfl.experiments.intervals import t_interval

    parser = argparse.ArgumentParser(description="GN - BN damage and batch noise per setting and batch size")
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"models to calibrate (default: all of {', '.join(SETTINGS)})")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES),
                        help="batch sizes (default: 32 4 2; vs_B32 needs 32 first)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in SETTINGS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; calibrated: {', '.join(SETTINGS)}")
    torch.set_num_threads(1)
    start = time.perf_counter()
    for model in args.models or SETTINGS:
        gaps32 = None
        for b in args.batches:
            acc = {m: [fl.run(config(model, m, b, s)).rows[-1]["test_acc"] for s in SEEDS]
                   for m in ("fedavg+bn", "fedavg+gn")}
            gaps = [100 * (g - n) for g, n in zip(acc["fedavg+gn"], acc["fedavg+bn"], strict=True)]
            gaps32 = gaps if b == 32 else gaps32
            layers = noise(model, b)
            _, phi, clients = SETTINGS[model]
            vs32 = None if b == 32 or gaps32 is None else [g - g32 for g, g32 in zip(gaps, gaps32, strict=True)]
            row = {"model": model, "phi": phi, "clients": clients, "B": b, "noise_sum": round(sum(layers), 3),
                   "noise_mean": round(sum(layers) / len(layers), 4), "noise_max": round(max(layers), 4),
                   "noise_layers": [round(v, 3) for v in layers],
                   "bn": [round(100 * a, 1) for a in acc["fedavg+bn"]],
                   "gn": [round(100 * a, 1) for a in acc["fedavg+gn"]],
                   "damage": t_interval(gaps, paired=True).text(1),
                   "vs_B32": None if vs32 is None else t_interval(vs32, paired=True).text(1)}
            print(json.dumps(row), flush=True)
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
