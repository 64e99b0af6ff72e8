"""How much deeper lock-step stacking could still save: a batched step's cost per model vs K.

The batched engine trains the K models of a round (clients x lock-step seeds) as one stacked
computation (:class:`bnfl.nn.batched.BatchedNet`). Stacking more runs into one computation (e.g.
the rows of a learning-rate grid, which today train as separate lock-step groups) only pays where
a step is dominated by per-operation overhead rather than arithmetic. This benchmark measures that
directly: one forward and backward (cross-entropy, gradients of every stacked parameter) of the
quick models at their quick batch sizes, K = 5, 15, 30, 45 stacked models, and prints the time per
step and per model-step. Issue 27's bound on ``make run`` (``docs/engines.md``, "What 15 minutes
would take") uses the ratio of the per-model costs at K = 45 and K = 15: the saving if every
lock-step group of 3 seeds were stacked three times deeper.

Usage::

    python benchmarks/bench_stack_depth.py [--steps 200] [--ks 5 15 30 45]

One torch thread; minimum of three timed blocks of ``--steps`` steps after a warm-up. Not a test:
the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bnfl import models  # noqa: E402
from bnfl.nn.batched import BatchedNet  # noqa: E402

#: (model, input shape, batch size per model): the quick profiles' shapes
CASES = [
    ("q_mlp_bn", (64,), 32),  # FedTAN / FixBN quick (digits, flat)
    ("q_scnn", (1, 8, 8), 4),  # HBN quick base (B = 4)
    ("q_scnn", (1, 8, 8), 32),  # HBN's larger batches
    ("q_alex", (1, 8, 8), 32),  # FedBN quick (Q-DOM)
    ("q_res", (1, 8, 8), 32),  # FedTAN's convolutional quick model
]


def step_ms(name: str, shape: tuple[int, ...], n: int, k: int, steps: int) -> float:
    """Milliseconds of one forward + backward of ``k`` stacked ``name`` models, ``n`` rows each."""
    torch.manual_seed(0)
    model = models.build(name, norm="bn")
    net = BatchedNet(model, [model.state_dict()] * k)
    params = [p for p in net.params.values() if p.requires_grad]
    x = torch.randn(k * n, *shape)
    y = torch.randint(0, 10, (k * n,))

    def step() -> None:
        loss = F.cross_entropy(net(x), y, reduction="sum")
        torch.autograd.grad(loss, params)

    for _ in range(max(5, steps // 10)):
        step()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return 1e3 * best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per timed block")
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 15, 30, 45], help="stacked models")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {platform.processor() or platform.machine()}")
    print(f"{'model':10s} {'B':>3s} " + " ".join(f"{'K=' + str(k):>16s}" for k in args.ks)
          + "   per-model cost K=45 / K=15")
    for name, shape, n in CASES:
        ms = {k: step_ms(name, shape, n, k, args.steps) for k in args.ks}
        cells = " ".join(f"{ms[k]:7.2f} ms {1e3 * ms[k] / k:4.0f} us" for k in args.ks)
        ratio = (ms[45] / 45) / (ms[15] / 15) if 45 in ms and 15 in ms else float("nan")
        print(f"{name:10s} {n:3d} {cells}   {ratio:.2f}")


if __name__ == "__main__":
    main()
