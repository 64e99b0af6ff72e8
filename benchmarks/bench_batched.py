"""The batched engine's targets (issue 15), measured side by side in one run.

(a) the 300-round digits FedAvg+BN run (``examples/fedtan_digits.toml`` with FedAvg+BN, eval only
    at the end): bnfl sequential, bnfl batched and the plain-numpy implementation of
    ``bench_numpy_baseline.py``, run alternately (load on a shared machine hits all three);
    target batched / numpy <= 1.0;
(b) a FedTAN round over a FedAvg+BN round, batched, 5 clients, batch 32, 5 local steps: digits
    MLP, Q-SCNN (digits as 1x8x8 images), ResNet-20 (digits upsampled to 3x32x32); target <= 1.15;
(c) a round with 100 clients over a round with 5 clients (digits MLP, all clients every round,
    FedAvg+BN, batched); target <= 5;
(d) where the time goes: cProfile's top entries (own time) of batched vs sequential rounds of (a).

Usage::

    python benchmarks/bench_batched.py [--rounds 300] [--repeats 3] [--resnet-rounds 2] [--skip-resnet]

Per-round times are medians over rounds after a warm-up round (first-call costs are not the
run's), the two settings of a ratio timed round by round alternately. One torch thread, as in
``bench_numpy_baseline.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_numpy_baseline import CONFIG, numpy_seconds  # noqa: E402

from bnfl import fl  # noqa: E402


def digits_run_seconds(rounds: int, batched: str) -> tuple[float, float]:
    """Wall time of ``Simulation.run`` of the 300-round run (build excluded) and the test accuracy."""
    cfg = {**CONFIG, "rounds": rounds, "train": {**CONFIG["train"], "eval_every": rounds, "batched": batched}}
    sim = fl.build(cfg)
    assert sim.history.meta["batched"]["used"] is (batched == "on")
    t0 = time.perf_counter()
    hist = sim.run()
    return time.perf_counter() - t0, hist.rows[-1]["test_acc"]


MODELS = {"digits MLP": ({"name": "q_mlp_bn"}, "flat"), "Q-SCNN": ({"name": "q_scnn"}, "image"),
          "ResNet-20": ({"name": "resnet20"}, "cifar")}


def round_timer(method: str, model: dict, form: str, *, rounds: int, clients: int = 5, batched: str = "on"):
    """A built simulation after a warm-up round, as a function that times its next training
    round (training and aggregation; ``run()`` adds evaluation and bookkeeping)."""
    cfg = {**CONFIG, "method": method, "model": model, "data": {"name": "digits", "form": form},
           "rounds": rounds + 1, "partition": {**CONFIG["partition"], "num_clients": clients},
           "train": {**CONFIG["train"], "eval_every": rounds + 1, "batched": batched}}
    if clients > 10:  # more clients than classes: an iid partition (digits: ~14 samples each for 100)
        cfg["partition"] = {"kind": "iid", "num_clients": clients}
    sim = fl.build(cfg)
    assert sim.history.meta["batched"]["used"] is (batched == "on"), sim.history.meta["batched"]
    sim.run(stop_after=1)

    def next_round() -> float:
        r = sim.round + 1
        t0 = time.perf_counter()
        sim._train_round(r)
        sim.round = r
        return time.perf_counter() - t0

    return next_round


def paired_rounds(a: tuple, b: tuple, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of each of ``rounds`` rounds of two settings ``(method, model, form, kwargs)``, their
    rounds alternated (load on a shared machine hits both; :func:`round_timer`: after a warm-up round)."""
    ta = round_timer(a[0], a[1], a[2], rounds=rounds, **a[3])
    tb = round_timer(b[0], b[1], b[2], rounds=rounds, **b[3])
    sa, sb = [], []
    for _ in range(rounds):
        sa.append(ta())
        sb.append(tb())
    return sa, sb


def paired_round_seconds(a: tuple, b: tuple, rounds: int) -> tuple[float, float]:
    """Median seconds per round of two settings (:func:`paired_rounds`)."""
    sa, sb = paired_rounds(a, b, rounds)
    return statistics.median(sa), statistics.median(sb)


def profile_rounds(batched: str, rounds: int = 40, top: int = 12) -> str:
    """cProfile of ``rounds`` rounds of (a) after 5 warm-up rounds: the top entries by own time."""
    cfg = {**CONFIG, "rounds": rounds + 5, "train": {**CONFIG["train"], "eval_every": rounds + 5, "batched": batched}}
    sim = fl.build(cfg)
    sim.run(stop_after=5)
    prof = cProfile.Profile()
    prof.enable()
    sim.run(stop_after=rounds + 5)
    prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("tottime").print_stats(top)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    total = next(ln for ln in lines if "function calls" in ln).strip()
    return "\n".join([f"  {total} ({rounds} rounds)", *("  " + _short(ln) for ln in lines[head:head + top + 1])])


def _short(line: str) -> str:
    """A pstats row with the site-packages / repository prefix cut from the file name."""
    for marker in ("site-packages/", "/bnfl/", "lib/python3"):
        if marker in line:
            pre, _, post = line.partition(marker)
            cut = pre.rfind(" ")
            return pre[:cut + 1] + ("bnfl/" if marker == "/bnfl/" else "") + post
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--round-samples", type=int, default=40, help="rounds timed per (b)/(c) setting (MLP, Q-SCNN)")
    ap.add_argument("--resnet-rounds", type=int, default=2, help="rounds timed per ResNet-20 setting")
    ap.add_argument("--skip-resnet", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, CPU; {time.strftime('%Y-%m-%d %H:%M')}")

    # (a) ------------------------------------------------------------------------------------
    digits_run_seconds(5, "off")
    digits_run_seconds(5, "on")
    numpy_seconds(5)
    rows: dict[str, list[float]] = {"sequential": [], "batched": [], "numpy": []}
    for rep in range(args.repeats):
        for name, fn in (("sequential", lambda: digits_run_seconds(args.rounds, "off")),
                         ("batched", lambda: digits_run_seconds(args.rounds, "on")),
                         ("numpy", lambda: numpy_seconds(args.rounds))):
            sec, acc = fn()
            rows[name].append(sec)
            print(f"  (a) repeat {rep + 1}: {name:10s} {sec:6.2f} s (test acc {acc:.3f})", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}

    # (b) ------------------------------------------------------------------------------------
    ratios_b = {}
    for label, (model, form) in MODELS.items():
        if label == "ResNet-20" and args.skip_resnet:
            continue
        n = args.resnet_rounds if label == "ResNet-20" else args.round_samples
        tan, avg = paired_round_seconds(("fedtan", model, form, {}), ("fedavg+bn", model, form, {}), n)
        ratios_b[label] = (tan, avg)
        print(f"  (b) {label}: FedTAN {tan * 1e3:.1f} ms, FedAvg+BN {avg * 1e3:.1f} ms per round", flush=True)

    # (c) ------------------------------------------------------------------------------------
    mlp, flat = MODELS["digits MLP"]
    hundred, five = paired_round_seconds(("fedavg+bn", mlp, flat, {"clients": 100}),
                                         ("fedavg+bn", mlp, flat, {"clients": 5}), args.round_samples)
    hundred_seq, five_seq = paired_round_seconds(("fedavg+bn", mlp, flat, {"clients": 100, "batched": "off"}),
                                                 ("fedavg+bn", mlp, flat, {"clients": 5, "batched": "off"}),
                                                 max(3, args.round_samples // 4))
    print(f"  (c) 100 clients {hundred * 1e3:.1f} ms, 5 clients {five * 1e3:.1f} ms per round (batched)", flush=True)

    # (d) ------------------------------------------------------------------------------------
    prof_b, prof_s = profile_rounds("on"), profile_rounds("off")

    print("\n=== issue 15 targets (one run) ===")
    print(f"(a) digits FedAvg+BN, {args.rounds} rounds, median of {args.repeats}: sequential {med['sequential']:.2f} s, "
          f"batched {med['batched']:.2f} s, numpy {med['numpy']:.2f} s")
    print(f"    batched / numpy     {med['batched'] / med['numpy']:.2f}   (target <= 1.0)")
    print(f"    sequential / numpy  {med['sequential'] / med['numpy']:.2f}")
    print(f"    sequential / batched {med['sequential'] / med['batched']:.2f}")
    print("(b) FedTAN round / FedAvg+BN round, batched, 5 clients (target <= 1.15):")
    for label, (tan, avg) in ratios_b.items():
        print(f"    {label:11s} {tan / avg:.2f}   ({tan * 1e3:.1f} / {avg * 1e3:.1f} ms)")
    print(f"(c) 100 clients / 5 clients per round, digits MLP (target <= 5): batched {hundred / five:.2f} "
          f"({hundred * 1e3:.1f} / {five * 1e3:.1f} ms); sequential {hundred_seq / five_seq:.2f} "
          f"({hundred_seq * 1e3:.1f} / {five_seq * 1e3:.1f} ms)")
    print("(d) cProfile, rounds of (a), top entries by own time\n  batched:")
    print(prof_b)
    print("  sequential:")
    print(prof_s)


if __name__ == "__main__":
    main()
