"""How far bnfl's simulator is from the arithmetic it does: the digits FedAvg+BN run against an
independent plain-numpy implementation of the same work, and what a checkpoint every round costs.

The run (``examples/fedtan_digits.toml`` with FedAvg+BN): MLP 64-32-BN-ReLU-32-BN-ReLU-10, 5
clients holding 2 classes each, 5 local SGD steps of batch 32 (lr 0.1) per round, the server
averaging weights and running statistics, evaluation only after the last round. The numpy
version does the same arithmetic (float32, forward, backward, BN running statistics, SGD,
size-weighted averaging) with its own batches; it is a cost baseline, not a bitwise twin.

Usage::

    python benchmarks/bench_numpy_baseline.py [--rounds 300] [--repeats 3]

Prints, per repeat and as medians: bnfl without checkpoints, bnfl with a checkpoint every round,
numpy, and the ratios bnfl / numpy (issue 15's target: <= 1.0) and checkpoint / no checkpoint.
The three are run alternately in each repeat so that load on a shared machine hits all of them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bnfl import fl  # noqa: E402

CONFIG = {"method": "fedavg+bn", "seed": 0, "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
          "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 2},
          "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1, "progress": False, "batched": "off"}}


def bnfl_seconds(rounds: int, checkpoint: bool) -> tuple[float, float]:
    """Wall time of ``Simulation.run`` (build excluded) and the final test accuracy."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {**CONFIG, "rounds": rounds, "train": {**CONFIG["train"], "eval_every": rounds}}
        sim = fl.build(cfg)
        if checkpoint:
            sim.config.checkpoint_dir = tmp
        t0 = time.perf_counter()
        hist = sim.run()
        return time.perf_counter() - t0, hist.rows[-1]["test_acc"]


class NumpyMLP:
    """64-32-BN-ReLU-32-BN-ReLU-10 in float32 numpy: forward, backward, BN running statistics."""

    def __init__(self, rng: np.random.Generator) -> None:
        def linear(i: int, o: int) -> list[np.ndarray]:
            b = 1 / np.sqrt(i)
            return [rng.uniform(-b, b, (i, o)).astype(np.float32), rng.uniform(-b, b, o).astype(np.float32)]

        w1, b1 = linear(64, 32)
        w2, b2 = linear(32, 32)
        w3, b3 = linear(32, 10)
        one, zero = np.ones(32, np.float32), np.zeros(32, np.float32)
        self.p = {"w1": w1, "b1": b1, "g1": one.copy(), "be1": zero.copy(), "w2": w2, "b2": b2, "g2": one.copy(),
                  "be2": zero.copy(), "w3": w3, "b3": b3}
        self.s = {"m1": zero.copy(), "v1": one.copy(), "m2": zero.copy(), "v2": one.copy()}

    def _bn(self, h: np.ndarray, i: int, train: bool) -> tuple[np.ndarray, tuple]:
        g, be = self.p[f"g{i}"], self.p[f"be{i}"]
        if not train:
            return (h - self.s[f"m{i}"]) / np.sqrt(self.s[f"v{i}"] + 1e-5) * g + be, ()
        mu, var = h.mean(0), h.var(0)
        n = h.shape[0]
        self.s[f"m{i}"] = 0.9 * self.s[f"m{i}"] + 0.1 * mu
        self.s[f"v{i}"] = 0.9 * self.s[f"v{i}"] + 0.1 * var * n / (n - 1)
        inv = 1 / np.sqrt(var + 1e-5)
        xh = (h - mu) * inv
        return xh * g + be, (xh, inv)

    @staticmethod
    def _bn_back(d: np.ndarray, g: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xh, inv = cache
        dg, db = (d * xh).sum(0), d.sum(0)
        dxh = d * g
        dx = inv * (dxh - dxh.mean(0) - xh * (dxh * xh).mean(0))
        return dx, dg, db

    def step(self, x: np.ndarray, y: np.ndarray, lr: float) -> None:
        p = self.p
        h1 = x @ p["w1"] + p["b1"]
        a1, c1 = self._bn(h1, 1, True)
        r1 = np.maximum(a1, 0)
        h2 = r1 @ p["w2"] + p["b2"]
        a2, c2 = self._bn(h2, 2, True)
        r2 = np.maximum(a2, 0)
        z = r2 @ p["w3"] + p["b3"]
        z = z - z.max(1, keepdims=True)
        prob = np.exp(z)
        prob /= prob.sum(1, keepdims=True)
        dz = prob
        dz[np.arange(len(y)), y] -= 1
        dz /= len(y)
        grads = {"w3": r2.T @ dz, "b3": dz.sum(0)}
        d = (dz @ p["w3"].T) * (a2 > 0)
        d, grads["g2"], grads["be2"] = self._bn_back(d, p["g2"], c2)
        grads["w2"], grads["b2"] = r1.T @ d, d.sum(0)
        d = (d @ p["w2"].T) * (a1 > 0)
        d, grads["g1"], grads["be1"] = self._bn_back(d, p["g1"], c1)
        grads["w1"], grads["b1"] = x.T @ d, d.sum(0)
        for k, g in grads.items():
            p[k] -= lr * g

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        p = self.p
        a1, _ = self._bn(x @ p["w1"] + p["b1"], 1, False)
        a2, _ = self._bn(np.maximum(a1, 0) @ p["w2"] + p["b2"], 2, False)
        z = np.maximum(a2, 0) @ p["w3"] + p["b3"]
        return float((z.argmax(1) == y).mean())


def numpy_seconds(rounds: int) -> tuple[float, float]:
    """The same federated run in numpy: wall time (data preparation excluded) and test accuracy."""
    sim = fl.build({**CONFIG, "rounds": 1})  # the same data and partition
    x, y = sim.x_train.numpy(), sim.y_train.numpy()
    xt, yt = sim.x_test.numpy(), sim.y_test.numpy()
    parts = [np.asarray(c) for c in sim.client_indices]
    sizes = np.array([len(c) for c in parts], dtype=np.float64)
    weights = (sizes / sizes.sum()).astype(np.float32)
    rng = np.random.default_rng(0)
    glob = NumpyMLP(rng)
    t0 = time.perf_counter()
    for _ in range(rounds):
        states = []
        for idx in parts:
            local = NumpyMLP.__new__(NumpyMLP)
            local.p = {k: v.copy() for k, v in glob.p.items()}
            local.s = {k: v.copy() for k, v in glob.s.items()}
            for _ in range(5):
                b = rng.choice(idx, size=min(32, len(idx)), replace=False)
                local.step(x[b], y[b], 0.1)
            states.append(local)
        glob.p = {k: sum(w * s.p[k] for w, s in zip(weights, states, strict=True)) for k in glob.p}
        glob.s = {k: sum(w * s.s[k] for w, s in zip(weights, states, strict=True)) for k in glob.s}
    seconds = time.perf_counter() - t0
    return seconds, glob.accuracy(xt, yt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows: dict[str, list[float]] = {"bnfl": [], "bnfl + checkpoint every round": [], "numpy": []}
    accs: dict[str, float] = {}
    # warm-up: first-call costs (imports, allocator) are not the run's
    bnfl_seconds(5, False)
    numpy_seconds(5)
    for rep in range(args.repeats):
        for name, fn in (("bnfl", lambda: bnfl_seconds(args.rounds, False)),
                         ("bnfl + checkpoint every round", lambda: bnfl_seconds(args.rounds, True)),
                         ("numpy", lambda: numpy_seconds(args.rounds))):
            sec, acc = fn()
            rows[name].append(sec)
            accs[name] = acc
            print(f"repeat {rep + 1}: {name:30s} {sec:7.2f} s  (test acc {acc:.3f})", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\n{args.rounds} rounds, median of {args.repeats} (seconds): "
          + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    print(f"bnfl / numpy: {med['bnfl'] / med['numpy']:.2f}  (issue 15 target: <= 1.0)")
    ck = med["bnfl + checkpoint every round"] / med["bnfl"]
    per_round = (med["bnfl + checkpoint every round"] - med["bnfl"]) / args.rounds * 1e3
    print(f"checkpoint every round / none: {ck:.2f}  ({per_round:.2f} ms per checkpoint)")


if __name__ == "__main__":
    main()
