"""``bnfl list``, ``bnfl run <id>`` and ``bnfl reproduce``: the registry from the command line.

    bnfl list [--paper fedtan] [--out figures]
    bnfl run fedtan-tab3 --profile quick --out runs/ [--device cuda] [--seeds 5] [--data-root PATH]
    bnfl reproduce --paper fedtan --profile quick [--out figures] [--force] [--only ID ...]
    bnfl run hbn-tab1 --profile paper --data-root DIR --device cuda --dry-run
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

from bnfl import _folder_lock
from bnfl.experiments import runner
from bnfl.experiments._outdir import check_entry_folder
from bnfl.experiments.core import PROFILES
from bnfl.experiments.counting import claim_word, entry_verdict, standing
from bnfl.experiments.dryrun import dry_run
from bnfl.experiments.headlines import HEADLINES
from bnfl.experiments.registry import get, ids
from bnfl.experiments.runner import load_result
from bnfl.train import config_schema

__all__ = ["register"]


def _add_common(p: argparse.ArgumentParser, *, out_default: str) -> None:
    p.add_argument("--profile", choices=PROFILES, default="quick",
                   help="smoke: seconds (CI); quick: embedded data on CPU, minutes; paper: the "
                        "paper's setup from --data-root (default: quick)")
    p.add_argument("--out", default=out_default, help=f"output folder (default: {out_default})")
    p.add_argument("--device", default="cpu", help="torch device for training, e.g. cuda (default: cpu)")
    p.add_argument("--seeds", type=int, default=None,
                   help="number of repeats (default: the entry's, 5 at the paper profile)")
    p.add_argument("--data-root", default=None,
                   help="folder with the paper profile's data sets (CIFAR-10/100, MNIST, Tiny-ImageNet, "
                        "ImageNet, Cityscapes, Office-Caltech10, DomainNet, digit5, abide, morpho_mnist; "
                        "`python -c 'import bnfl.data as d; print(list(d.DATASETS))'` lists them; "
                        "default: $BNFL_DATA)")
    p.add_argument("--batched", choices=("off", "auto", "on"), default="auto",
                   help="train each round's clients as one computation where possible (auto), and an entry's "
                        "seeds together; equal to the sequential engine up to rounding; cached apart "
                        "(default: auto; off is the sequential reference engine)")
    p.add_argument("--dry-run", action="store_true",
                   help="train nothing: check the data under --data-root, resolve every run, build every model, "
                        "time a few steps on --device and print the plan with an estimated time (exit 1 when "
                        "data is missing)")


#: Columns ``bnfl list`` fits its lines into.
LIST_WIDTH = 100


def _cmd_list(args: argparse.Namespace) -> int:
    out = Path(args.out)
    rows = []
    for eid in ids(args.paper):
        entry = get(eid)
        stored = load_result(out, eid)
        last = stored.profile if stored is not None else "-"
        took = _took(stored.duration_s) if stored is not None and stored.duration_s else ""
        verdict = f"verdict: {entry_verdict(stored)}" if stored is not None else ""
        rows.append((eid, entry.kind, ",".join(sorted(entry.configs)), last, took, entry.title, verdict))
    header = ("id", "kind", "profiles", "last result", "took", "title", "")
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(5)]
    for r in [header, *rows]:  # the title and the verdict on their own lines below: every line fits LIST_WIDTH
        print("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)).rstrip())
        for line in [*(textwrap.wrap(r[5], LIST_WIDTH - 4) or [""]), *textwrap.wrap(r[6], LIST_WIDTH - 4)]:
            print("    " + line)
    print(textwrap.fill(f"(last result: the profile of the result stored in {out}, its verdict below the title: the "
                        "verdict words of its counted reproduction claims, or its checks' pass/fail; took: its "
                        "measured compute time, one process, on the machine that made it)", LIST_WIDTH,
                        break_on_hyphens=False))
    return 0


def _took(seconds: float) -> str:
    """``"0.4 s"``, ``"42 s"``, ``"9 min"``, ``"1 h 05 min"``: how long an entry took."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    m = round(seconds / 60)
    return f"{m} min" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def _print_result(result) -> None:  # noqa: ANN001 - Result
    print(f"{result.id} [{result.profile}, {len(result.seeds)} seed(s), {result.duration_s:.1f} s]: "
          f"{entry_verdict(result)}")
    for c in result.claims:
        margin = "" if c.margin is None else f" (margin {c.margin:+.4g})"
        s, word = standing(result, c), claim_word(result, c)
        mark = word.word.upper() if word is not None else f"{s.verdict.upper()} ({s.kind} check)" \
            if s.kind != "reproduction" else s.verdict.upper()
        print(f"  {mark} {c.statement}{margin}" + ("" if s.counted else f" [reported only: {s.note}]"))
        if c.verdict != "pass" and c.detail:
            print(f"       {c.detail}")
        if c.why:
            print(f"       why: {c.why}")


def _dry_run(eids: list[str], args: argparse.Namespace) -> int:
    """Print each entry's plan (:func:`bnfl.experiments.dryrun.dry_run`); 1 if any lacks data or fails."""
    bad = []
    for eid in eids:
        plan = dry_run(eid, profile=args.profile, device=args.device, seeds=args.seeds, data_root=args.data_root)
        print("\n".join(plan.lines()), flush=True)
        if not plan.ok:
            bad.append(eid)
    if bad:
        print(f"dry run: {len(bad)} of {len(eids)} entries cannot run: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        get(args.id)  # only an unknown id is reported as such; an entry's own errors propagate
    except KeyError as err:
        print(f"bnfl run: error: {err.args[0]}", file=sys.stderr)
        return 2
    if args.dry_run:
        return _dry_run([args.id], args)

    _check_device(args.device)
    with _folder_lock.locked(args.out, what="run or reproduce"):  # one writer per --out
        return _run_entry(args)


def _run_entry(args: argparse.Namespace) -> int:
    if not args.overwrite:  # a result of other settings is never replaced silently (bnfl.experiments._outdir)
        check_entry_folder(args.out, args.id, profile=args.profile, device=args.device, seeds=args.seeds,
                           data_root=args.data_root, batched=args.batched)
    result = runner.run(args.id, profile=args.profile, device=args.device, seeds=args.seeds, out=args.out,
                 data_root=args.data_root, force=args.force, progress=True, batched=args.batched)
    written = runner.save_figures(result, Path(args.out) / args.id)
    _print_result(result)
    print(f"wrote {Path(args.out) / args.id / 'result.json'} and "
          + ", ".join(str(p) for p in written.values()))
    return 0


def _check_device(device: str | None) -> None:
    """A ``--device`` this machine cannot use is an error before anything runs or is stored."""
    if device is not None:
        config_schema._check_device(device)


def _headline_entries(args: argparse.Namespace) -> list[str]:
    """``--headline``: the entries that hold the claims of REPORT.md's headline table
    (:data:`bnfl.experiments.headlines.HEADLINES`), in registry order, of ``--paper`` if given."""
    if args.only:
        raise ValueError("--headline picks its own entries; leave out --only")
    wanted = {h.entry for h in HEADLINES}
    todo = [eid for eid in ids(args.paper) if eid in wanted]
    if not todo:
        raise ValueError(f"no headline claim comes from --paper {args.paper}")
    return todo


def _cmd_reproduce(args: argparse.Namespace) -> int:
    try:  # unknown ids and papers, before any work (an entry's own errors propagate)
        todo = [get(eid).id for eid in args.only] if args.only else ids(args.paper)
        if args.headline:
            todo = args.only = _headline_entries(args)
    except (KeyError, ValueError) as err:
        print(f"bnfl reproduce: error: {err.args[0]}", file=sys.stderr)
        return 2
    if args.dry_run:
        return _dry_run(todo, args)

    _check_device(args.device)
    # one writer per --out while this command runs; its --jobs workers are its own (spawned, they
    # never take this lock) and share runs through the cache's per-run locks (bnfl.experiments.cache)
    with _folder_lock.locked(args.out, what="run or reproduce"):
        return _reproduce(args)


def _reproduce(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        results = runner.reproduce(args.paper, profile=args.profile, out=args.out, device=args.device,
                            seeds=args.seeds, data_root=args.data_root, force=args.force,
                            only=args.only, progress=True, jobs=args.jobs, batched=args.batched,
                            report_only=args.report_only)
    except ValueError as err:
        print(f"bnfl reproduce: error: {err.args[0]}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start

    for r in results:
        print(f"{r.id:14s} {entry_verdict(r)}  ({r.duration_s:.1f} s)")
    print(f"{len(results)} entries in {elapsed:.1f} s; report: {Path(args.out) / 'REPORT.md'}",
          file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``list``, ``run`` and ``reproduce`` to the ``bnfl`` command line."""
    p = subparsers.add_parser("list", help="list the registered figures and tables",
                              description="List every registered figure and table of the four papers (its id, "
                                          "title and profiles) and the verdict of a result stored in --out.")
    p.add_argument("--paper", default=None, help="only this paper's entries (e.g. fedtan)")
    p.add_argument("--out", default="figures", help="where to look for stored results (default: figures)")
    p.set_defaults(func=_cmd_list)

    p = subparsers.add_parser("run", help="run one figure/table: result.json + figure files",
                              description="Run one registered figure or table (an id of bnfl list) at a profile; "
                                          "writes OUT/ID/result.json (numbers, the paper's beside them, claim "
                                          "verdicts) and the figure files. A stored result of the same settings "
                                          "is reused.")
    p.add_argument("id", help="catalog id, e.g. fedtan-tab3 (see `bnfl list`)")
    _add_common(p, out_default="runs")
    p.add_argument("--force", action="store_true", help="recompute even if a matching result is stored")
    p.add_argument("--overwrite", action="store_true", help="replace a stored result of other settings (profile, "
                   "seeds, device, data root, engine) in --out/ID (without it, an error)")
    p.set_defaults(func=_cmd_run)

    p = subparsers.add_parser("reproduce", help="run every registered entry (or one paper's); figures + REPORT.md "
                              "(resumable)",
                              description="Run every registered figure and table (or one paper's, or --only some) "
                                          "and write REPORT.md; finished entries are kept, so an interrupted run "
                                          "continues where it stopped.")
    p.add_argument("--paper", default=None, help="only this paper (e.g. fedtan); default: every registered paper")
    _add_common(p, out_default="figures")
    p.add_argument("--force", action="store_true", help="recompute finished entries too")
    p.add_argument("--only", nargs="+", default=None, metavar="ID", help="only these ids")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N entries at once in worker processes, one torch thread each (default 1; "
                        "use the number of cores; results are the same): the longest first by the durations "
                        "stored in --out, and a worker that meets a run another is training takes another "
                        "entry meanwhile")
    p.add_argument("--headline", action="store_true",
                   help="only the entries behind REPORT.md's headline table, the claims a reader of each paper "
                        "remembers (19 of the 76 entries, about three quarters of the quick profile's training "
                        "time: their seeds, rate grids and conv stand-ins are the costly runs)")
    p.add_argument("--report-only", action="store_true",
                   help="compute nothing: write REPORT.md from the results stored in --out")
    p.set_defaults(func=_cmd_reproduce)
