"""``bnfl bench [METHOD ...]``: your methods on the common benchmark, beside every built-in BN fix.

A METHOD is what a config's ``method`` takes (an id such as ``fedtan``, an import string
``mypkg.algos:MyFix``) or a Python file holding one Algorithm subclass or Method
(``examples/pooled_bn_stats.py``, or ``file.py:Name`` to pick one). The bench trains each named
method on a suite's settings with its protocol (:mod:`.bench`; ``--suite extended``, the default: five
settings on a conv net, :mod:`.bench_extended`; ``--suite bn-fixes``: ``bench-bn-fixes``'), reuses the built-in
methods' stored runs when the protocol's hash matches (and says in one line when it does not), and
writes ``<out>/bench/``: ``leaderboard.md``, ``leaderboard.json``, ``leaderboard-figure.png``/``.svg`` and
``result.json`` (what ``bnfl compare`` reads), and ``<out>/baselines/<hash>.json`` when it trained
the built-in methods (docs/bench.md).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bnfl.experiments import dryrun
from bnfl.experiments.benchmarks import bench, bench_board
from bnfl.experiments.cache import RunCache
from bnfl.experiments.core import Context, _resolve_data_root, machine
from bnfl.experiments.registry import get as get_entry
from bnfl.fl import Algorithm
from bnfl.methods import Method, get

__all__ = ["main", "register", "resolve_method"]


def _file_method(arg: str) -> str:
    """The import string of the Algorithm subclass or Method in the Python file ``arg``
    (``path.py`` or ``path.py:Name``); the file's folder joins the import path (and ``PYTHONPATH``,
    for processes the runs start)."""
    path_text, _, name = arg.partition(".py:") if ".py:" in arg else (arg, "", "")
    path = Path(path_text + ".py" if name else path_text)
    if not path.is_file() and path.suffix != ".py" and path.with_name(path.name + ".py").is_file():
        path = path.with_name(path.name + ".py")  # examples/pooled_bn_stats names examples/pooled_bn_stats.py
    if not path.is_file():
        raise ValueError(f"method {arg!r}: no such file {path}; give an id (bnfl list methods), an import string "
                         "'package.module:Name' or a Python file")
    folder, stem = str(path.resolve().parent), path.stem
    if not stem.isidentifier():
        raise ValueError(f"method {arg!r}: {path.name} is not an importable module name; rename the file "
                         "(letters, digits, underscores)")
    if folder not in sys.path:
        sys.path.insert(0, folder)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
    try:
        module = importlib.import_module(stem)
    except Exception as err:  # the file's own error, in one line
        raise ValueError(f"method {arg!r}: importing {path} failed ({type(err).__name__}: {err})") from None
    if Path(getattr(module, "__file__", "") or "").resolve() != path.resolve():
        raise ValueError(f"method {arg!r}: the module name {stem!r} is already taken by {module.__file__}; "
                         "rename the file")
    if name:
        if not hasattr(module, name):
            raise ValueError(f"method {arg!r}: {path} defines no {name!r}")
        return f"{stem}:{name}"
    found = [n for n, obj in vars(module).items() if not n.startswith("_") and (
        isinstance(obj, Method) or isinstance(obj, type) and issubclass(obj, Algorithm)
        and obj.__module__ == stem)]
    if len(found) != 1:
        raise ValueError(f"method {arg!r}: {path} defines {len(found)} methods ({', '.join(found) or 'none'}: "
                         "Algorithm subclasses or Methods); name one as FILE.py:Name")
    return f"{stem}:{found[0]}"


def resolve_method(arg: str) -> str:
    """The method id ``arg`` names (an id, an import string or a Python file: module docstring), or
    one line saying why it names none."""
    spec = _file_method(arg) if arg.endswith(".py") or ".py:" in arg or os.sep in arg.partition(":")[0] else arg
    try:
        return get(spec).id
    except (ValueError, TypeError) as err:
        raise ValueError(" ".join(str(err).split())) from None


def _plan(proto: dict[str, Any], units: list[tuple[str, str]], data: dict[str, Any] | None) -> list[str]:
    """What a bench would train, and its price (``--dry-run``)."""
    seeds, tune = len(proto["seeds"]), proto.get("tune")
    per = (len(tune["grid"]) * len(tune["seeds"]) + seeds) if tune else seeds
    most = (per + tune["extend"] * len(tune["seeds"])) if tune else per
    runs = sum(2 * seeds if name == "reference" else per for name, _ in units)
    top = sum(2 * seeds if name == "reference" else most for name, _ in units)
    lines = [f"plan: {len(units)} method-settings, {runs} training runs ({top} if every grid grows past its edge)"]
    timed = (data or {}).get("timing") or {}
    if timed.get("seconds") and timed.get("units"):
        each = float(timed["seconds"]) / int(timed["units"])
        lines.append(f"price: about {each * len(units) / 60:.1f} min at the stored baselines' pace ({each:.1f} s per "
                     f"method-setting on {data['machine'].get('cpu', 'an unrecorded CPU')}); nothing was trained")
    else:
        lines.append("price: no stored timing for this protocol; nothing was trained")
    return lines


def _notes(proto: dict[str, Any], data: dict[str, Any], trained: list[str], here: dict[str, str]) -> list[str]:
    tune = proto.get("tune")
    notes = [
        f"Protocol {bench.protocol_hash(proto)} ({data['profile']} profile of the {bench.suite_of(proto)} suite): seeds "
        f"{', '.join(map(str, proto['seeds']))}; every method on the same partitions and initialisation draws, "
        "paired by seed.",
        ("Rates: each method's learning rate tuned per setting on a validation split over "
         f"{', '.join(f'{r:g}' for r in tune['grid'])} (tuning seeds {', '.join(map(str, tune['seeds']))}; a best "
         f"rate at the edge adds up to {tune['extend']} rates past it)") if tune else
        "Rates: every method at the shared recipe's rate (this profile does not tune).",
        "vs FedAvg+BN: paired difference over seeds with its 95% Student t-interval (bnfl.intervals.estimate); "
        "BN damage repaired: (method - FedAvg+BN) / (FedAvg+BN on the iid split - FedAvg+BN); rank: 1 + the "
        "methods whose 95% interval of the mean lies wholly above (overlapping intervals share a rank); comm / "
        "round: bytes up and down over all clients per round, counted by the engine (first seed); wall: "
        "seconds of the method's tuning and runs.",
        f"Built-in methods: {data['source']}, on {data['machine'].get('cpu', 'an unrecorded CPU')}.",
    ]
    if trained:
        notes.append(f"Trained in this run ({', '.join(trained)}): on {here.get('cpu', 'this machine')}. Runs "
                     "on another CPU round differently; the seeds, partitions and draws are the same.")
    return notes


def main(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs must be an integer >= 1, got {args.jobs}")
    methods = list(dict.fromkeys(resolve_method(m) for m in args.methods))
    proto = bench.protocol(args.profile, args.suite)
    key = bench.protocol_hash(proto)
    builtin, settings = bench.built_in(proto), bench.settings_of(proto)
    out = Path(args.out)
    if args.train_baselines and args.baselines:
        raise ValueError("--train-baselines trains the built-in methods and --baselines reuses stored ones; give one")
    if args.train_baselines:
        data, seen = None, []
        print(f"bnfl bench: --train-baselines: training the built-in methods too (protocol {key}; stored runs "
              "are not read)")
    elif args.baselines:
        data = bench.read_baselines(args.baselines)
        if data["protocol_hash"] != key:
            raise ValueError(f"{args.baselines}: its protocol {data['protocol_hash']} ({data.get('profile')}) is not "
                             f"this bench's {key} ({args.profile}); give --profile {data.get('profile')} or leave "
                             "--baselines out to train the built-in methods too")
        data["path"] = str(args.baselines)
    else:
        data, seen = bench.find_baselines(key, out / "baselines")
    if data is not None:
        print(f"bnfl bench: reusing the built-in methods' stored runs (protocol {key}, {data['profile']} profile, made "
              f"on {data['machine'].get('cpu', 'an unrecorded CPU')}: {data['path']})")
    elif not args.train_baselines:
        stored = ", ".join(f"{d['protocol_hash']} ({d['profile']})" for d in seen) or "none"
        print(f"bnfl bench: no stored runs of the built-in methods match this protocol ({key}, {args.profile} "
              f"profile; stored: {stored}): training them too")
    own = [m for m in methods if data is None or m not in data["methods"]]
    units = bench.work_units([*builtin, *[m for m in own if m not in builtin]] if data is None
                             else own, with_reference=data is None, settings=settings)
    if args.profile == "paper":  # the papers' data sets under --data-root: a dry run checks them and prices the runs
        if args.dry_run:
            plan = bench.dry_plan(proto, units, profile=args.profile, data_root=_resolve_data_root(args.data_root),
                                  device=args.device)
            print("\n".join(plan.lines()), flush=True)
            return 0 if plan.ok else 1
        _, missing = dryrun.check_data({"settings": proto["settings"]}, _resolve_data_root(args.data_root))
        if missing:  # before anything trains: what is missing, its layout and where it comes from
            raise ValueError(f"--profile paper needs the papers' data sets: {'; '.join(missing)}")
    elif args.data_root:
        print(f"bnfl bench: --data-root: the {args.profile} profile's data sets are embedded in bnfl; the folder is "
              "not read (--profile paper reads it)")
    if args.dry_run:
        priced = data if data is not None else bench.find_baselines(key, out / "baselines")[0]
        for line in _plan(proto, units, priced):
            print(f"bnfl bench: {line}")
        return 0
    groups = get_entry(bench.ENTRY).seed_groups if bench.suite_of(proto) == "bn-fixes" else ()
    ctx = Context(profile=args.profile, device=args.device, seeds=list(proto["seeds"]),
                  data_root=_resolve_data_root(args.data_root),
                  cache=RunCache(out / "_runs"), batched=args.batched, seed_groups=groups)
    start = time.perf_counter()
    with tqdm(total=len(units), desc="bnfl bench", unit="method-setting") as bar:
        def step(text: str) -> None:
            bar.set_postfix_str(text, refresh=False)
            bar.update()

        records, reference = bench.run_units(ctx, proto, units, step, jobs=args.jobs)
    here = machine()
    if data is None:
        data = bench.baseline_file(proto, args.profile, {m: records[m] for m in builtin}, reference,
                                   source=f"bnfl bench --profile {args.profile}, "
                                          f"{_dt.date.today().isoformat()}", machine_info=here)
        data["timing"] = {"seconds": round(time.perf_counter() - start, 2), "units": len(units)}
        data["path"] = str(bench.write_baselines(out / "baselines", data))
        print(f"bnfl bench: stored the built-in methods' runs in {data['path']} (the next bench of this protocol "
              "with this --out reuses them)")
    all_records = {**data["methods"], **records}
    shown = [*builtin, *[m for m in methods if m not in builtin]]
    board = bench_board.leaderboard(all_records, data["reference"], shown)
    scales = {s: proto["settings"][s]["scale"] for s in settings}
    notes = _notes(proto, data, [get(m).label for m in own], here)
    folder = out / bench_board.BENCH_ID
    folder.mkdir(parents=True, exist_ok=True)
    title = f"bnfl bench ({args.profile} profile, protocol {key})"
    text = bench_board.markdown(board, title=title, scales=scales, notes=notes, reference=data["reference"])
    command = "bnfl bench " + " ".join([*args.methods, "--suite", args.suite, "--profile", args.profile, "--out",
                                        str(args.out)])
    res = bench_board.result(board, all_records, profile=args.profile, seeds=proto["seeds"],
                             config={"protocol_hash": key, "methods": shown, "baselines": data["path"]}, key=key,
                             notes=notes, duration=time.perf_counter() - start, command=command,
                             runs=ctx.runs_used, machine_info=here)
    bench_board.write_text(folder / "leaderboard.md", text)
    bench_board.write_text(folder / "leaderboard.json", json.dumps(
        {"protocol_hash": key, "profile": args.profile, "seeds": proto["seeds"], "scales": scales,
         "leaderboard": board, "notes": notes}, indent=1, default=str) + "\n")
    bench_board.write_text(folder / "result.json", res.to_json())
    # matplotlib takes about a second to import: only a run that draws its leaderboard loads it
    import matplotlib.pyplot as plt

    from bnfl.plots import save_figure  # pulls matplotlib in too

    fig = bench_board.figure(board, scales=scales, subtitle=f"{args.profile} profile, {len(proto['seeds'])} seeds")
    save_figure(fig, "leaderboard-figure", out_dir=folder, provenance={"command": command, "protocol_hash": key})
    plt.close(fig)
    print(text, end="")
    print(f"bnfl bench: wrote {folder}/leaderboard.md, leaderboard.json, leaderboard-figure.png and result.json "
          f"(bnfl compare reads {out}) in {time.perf_counter() - start:.0f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bench`` to the ``bnfl`` command line."""
    p = subparsers.add_parser(
        "bench", help="benchmark your own BN fix beside every built-in one (paired intervals, a leaderboard)",
        description="Train the named methods on a suite's settings, seeds, partitions and tuning rule, "
                    "reusing the built-in methods' stored runs when the protocol matches; write a leaderboard "
                    "per setting (table, figure, json, result.json for bnfl compare). docs/bench.md.")
    p.add_argument("methods", nargs="*", metavar="METHOD",
                   help="a method id, an import string 'package.module:Name', or a Python file (FILE.py[:Name])")
    p.add_argument("--out", default="bench-out", help="the results folder (default: bench-out)")
    p.add_argument("--suite", choices=bench.SUITES, default=bench.DEFAULT_SUITE,
                   help="extended: five settings on a conv net, 13 built-in methods (default); bn-fixes: "
                        "bench-bn-fixes' three settings on Q-MLP-BN, six methods")
    p.add_argument("--profile", choices=("smoke", "quick", "paper"), default="quick",
                   help="smoke: 2 rounds, 2 seeds (checks the machinery); quick: the benchmark on embedded data "
                        "(default); paper: the same protocol on the papers' data sets under --data-root")
    p.add_argument("--data-root", default=None, help="folder of local data sets (default $BNFL_DATA)")
    p.add_argument("--baselines", default=None, help="a baseline file to reuse (default: the stored ones)")
    p.add_argument("--train-baselines", action="store_true",
                   help="train the built-in methods too, even where stored runs match (the benchmark from scratch)")
    p.add_argument("--batched", choices=("off", "auto", "on"), default="auto", help="the engine (default auto)")
    p.add_argument("--device", default="cpu", help="the torch device the runs train on (default cpu; cuda for the "
                                                   "paper profile)")
    p.add_argument("--jobs", type=int, default=1,
                   help="method-settings trained at once, one process and one torch thread each (default 1; the "
                        "numbers do not depend on it)")
    p.add_argument("--dry-run", action="store_true", help="print what would train and its price; train nothing")
    p.set_defaults(func=main)
