"""Write the committed baseline file of ``bnfl bench --profile quick`` from the stored result.

``figures/bench-bn-fixes/result.json`` (``bnfl run bench-bn-fixes --profile quick``) already holds,
for each built-in method and setting, the accuracy of every seed at the tuned rate, the tuned rate
and the tuning grid's validation scores, and FedAvg+BN's damage runs (shared recipe's rate, skewed
and iid). This script copies them into
``bnfl/experiments/benchmarks/baselines/<protocol hash>.json``, after checking that the result's
configuration and seeds are the quick protocol's, and adds what the result does not hold: the
communication per round, measured here by training each method's first seed at its tuned rate
(bytes counted by the engine's channel; the count does not depend on the CPU). It trains no
accuracy and changes no committed number.

    PYTHONPATH=$PWD python benchmarks/store_bench_baselines.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bnfl.experiments.benchmarks import bench
from bnfl.experiments.benchmarks.bn_fixes_settings import SETTINGS, setting_spec
from bnfl.experiments.core import Context, deep_merge
from bnfl.experiments.curves import train_runs
from bnfl.experiments.registry import get as get_entry
from bnfl.methods import get

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "figures" / "bench-bn-fixes" / "result.json"
_DAMAGE = {"FedAvg+BN, shared recipe's rate (damage)": "damaged", "FedAvg+BN, iid split (control)": "control"}


def main() -> int:
    res = json.loads(SOURCE.read_text())
    entry = get_entry(bench.ENTRY)
    if res["profile"] != "quick" or res["config"] != entry.config("quick"):
        sys.exit(f"{SOURCE}: not the quick protocol's configuration; rerun nothing, check the entry")
    proto = bench.protocol("quick", "bn-fixes")
    if res["seeds"] != proto["seeds"]:
        sys.exit(f"{SOURCE}: seeds {res['seeds']} are not the protocol's {proto['seeds']}")
    n_test = {}
    for c in res["claims"]:
        iv = c.get("interval") or {}
        for s in SETTINGS:
            if c["statement"].startswith(f"{s}:") and iv.get("n_test"):
                n_test[s] = int(iv["n_test"])
    labels = {get(m).label: m for m in bench.BUILT_IN}
    methods: dict[str, dict[str, dict]] = {m: {} for m in bench.BUILT_IN}
    reference: dict[str, dict[str, list[float]]] = {s: {} for s in SETTINGS}
    for row in res["rows"]:
        s = row["setting"]
        if row["method"] in _DAMAGE:
            reference[s][_DAMAGE[row["method"]]] = [float(v) for v in row["per seed"]]
            continue
        scores = [float(v) for v in row["per seed"]]
        methods[labels[row["method"]]][s] = {
            "scores": scores, "stopped": [], "lr": float(row["lr"]), "tuning": row.get("lr tuning"),
            "comm_per_round": None, "seconds": None, "n_test": n_test[s]}
    ctx = Context(profile="quick", seeds=[0], batched="auto")
    start = time.perf_counter()
    for m in bench.BUILT_IN:
        for s in SETTINGS:
            rec = methods[m][s]
            spec = deep_merge(setting_spec(s, res["config"]["settings"][s], m), {"train": {"lr": rec["lr"]}})
            run = train_runs(ctx, spec)[0]
            rec["comm_per_round"] = float(run["bytes_total"][-1]) / max(1, int(run["rounds_done"]))
            print(f"{m} / {s}: {rec['comm_per_round']:.0f} bytes per round", flush=True)
    print(f"communication measured in {time.perf_counter() - start:.0f} s")
    data = bench.baseline_file(
        proto, "quick", methods, reference, machine_info=res["machine"],
        source=(f"figures/bench-bn-fixes/result.json ({res['command']}, git {res['git_commit']}, "
                f"{res['duration_s']:.0f} s for the six methods; per-method wall time not recorded)"))
    data["timing"] = {"seconds": res["duration_s"], "units": len(bench.work_units(bench.BUILT_IN, True))}
    path = bench.write_baselines(bench.STORE, data)
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
