"""Store the extended suite's built-in runs as the committed baseline file, after checking them.

``bnfl bench --train-baselines --out DIR --jobs 2`` trains the built-in methods of the extended
suite and writes ``DIR/baselines/<hash>.json``. This script checks that file against today's quick
protocol (the hash and every setting and built-in method present), re-derives the records named on
the command line under the same cache (``--redo METHOD/SETTING``: after a change to how a record
is labelled, e.g. a failure's wording; numbers come from the cached runs), and copies the file to
``bnfl/experiments/benchmarks/baselines/``. It changes no number it did not recompute.

    PYTHONPATH=$PWD python benchmarks/store_extended_baselines.py DIR [--redo fbn/"many clients, partial participation"]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bnfl.experiments.benchmarks import bench
from bnfl.experiments.cache import RunCache
from bnfl.experiments.core import Context


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--redo", action="append", default=[], metavar="METHOD/SETTING")
    args = p.parse_args()
    torch.set_num_threads(1)
    proto = bench.protocol("quick", "extended")
    key = bench.protocol_hash(proto)
    path = Path(args.folder) / "baselines" / f"{key}.json"
    data = bench.read_baselines(path)
    if data["protocol_hash"] != key or data["protocol"] != json.loads(json.dumps(proto)):
        raise SystemExit(f"{path}: not today's quick protocol {key}")
    for m in bench.built_in(proto):
        if set(data["methods"].get(m, {})) != set(bench.settings_of(proto)):
            raise SystemExit(f"{path}: {m} lacks a setting")
    ctx = Context(profile="quick", seeds=list(proto["seeds"]), cache=RunCache(Path(args.folder) / "_runs"),
                  batched="auto")
    for item in args.redo:
        method, _, setting = item.partition("/")
        before = data["methods"][method][setting]
        after = bench.method_record(ctx, proto, setting, method)
        print(f"{method} / {setting}:\n  before {json.dumps(before)[:300]}\n  after  {json.dumps(after)[:300]}")
        data["methods"][method][setting] = after
    out = bench.write_baselines(bench.STORE, data)
    print(f"stored {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
