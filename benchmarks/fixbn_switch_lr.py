"""Why FixBN diverges in bench-bn-fixes' feature-shift setting: its switch to frozen statistics at lr 0.1.

A diagnostic, not part of the benchmark (which keeps one learning rate for every method): FixBN on
the feature-shift setting, seed 0, at the benchmark's lr 0.1 and at two smaller rates, printing the
training loss around the switch round T* = 50 (rounds 49-52) and the final accuracy. On the 2-core
AVX-512 machine: lr 0.1 goes 0.152, 0.154 -> 8375.6 at round 51 (diverged); lr 0.05 jumps 0.265 ->
0.889 and recovers (92.78%); lr 0.02 passes the switch smoothly (90.83%). The frozen statistics
themselves are close to the pooled ones at round 50 (pooled variance / running variance at most 1.9
per channel), so the blow-up is the step size once BN no longer rescales the gradient, not biased
statistics::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fixbn_switch_lr.py
"""

from __future__ import annotations

import torch

from bnfl.experiments.benchmarks.bn_fixes_settings import CHOSEN, setting_spec
from bnfl.experiments.core import Context, deep_merge
from bnfl.experiments.training import train


def frozen_vs_pooled() -> None:
    """FedAvg+BN (= FixBN before its switch) for T* = 50 rounds, seed 0: per BN layer, the pooled
    variance of the layer's inputs over all training data against the global running variance that
    FixBN freezes."""
    from bnfl.experiments.training import _build, canonical

    spec = canonical(deep_merge(setting_spec("feature shift", CHOSEN["feature shift"], "fedavg+bn"),
                                {"rounds": 50, "seed": 0}))
    sim, split = _build(spec, device="cpu", data_root=None, progress=False)
    sim.run()
    model = sim.global_model().eval()
    inputs: dict[str, torch.Tensor] = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.register_forward_hook(lambda mod, inp, out, n=name: inputs.__setitem__(n, inp[0].detach()))
    with torch.no_grad():
        model(split.x_train)
    for name, m in model.named_modules():
        if name in inputs:
            ratio = inputs[name].var(0, unbiased=False) / m.running_var
            print(f"{name}: pooled variance / frozen running variance: median {ratio.median():.2f}, "
                  f"max {ratio.max():.2f}")


def main() -> None:
    torch.set_num_threads(1)
    frozen_vs_pooled()
    for lr in (0.1, 0.05, 0.02):
        spec = deep_merge(setting_spec("feature shift", CHOSEN["feature shift"], "fixbn"),
                          {"seed": 0, "train": {"lr": lr, "eval_every": 50}})
        run = train(Context(profile="quick", batched="auto"), spec)
        loss = [None if v is None else round(v, 3) for v in run["train_loss"][48:52]]
        print(f"lr {lr}: diverged {run['diverged']}, rounds {run['rounds_done']}, accuracy {run['test_acc']}, "
              f"loss at rounds 49-52 {loss}")


if __name__ == "__main__":
    main()
