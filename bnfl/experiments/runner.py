"""Run registered entries, write their results and figures, and reproduce a whole paper.

Layout of an output folder ``OUT`` (``figures/`` for ``bnfl reproduce``)::

    OUT/<id>/result.json        numbers, paper numbers, claim verdicts, config hash, time
    OUT/<id>.png / .svg / .json the figure and its provenance (``bnfl reproduce``)
    OUT/<id>/<id>.png ...       the same, for ``bnfl run`` (figures beside the result)
    OUT/_runs/<hash>.json       cached training runs shared between entries (local, git-ignored)
    OUT/_runs/done/<id>-<hash>  marks an entry finished on this machine (local, git-ignored)
    OUT/REPORT.md               summary of every entry (``bnfl reproduce``)

A stored result is reused only when its hash (configuration, seeds, device, data root and
the bnfl source, :func:`~bnfl.experiments.core.code_fingerprint`) matches *and* this machine
finished it (the ``done`` marker): an interrupted ``bnfl reproduce`` resumes where it stopped,
while a fresh clone, whose ``figures/`` holds committed results but no local markers,
recomputes everything.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import torch
from tqdm.auto import tqdm

from bnfl import _atomic
from bnfl.experiments._result_file import read_result
from bnfl.experiments.cache import RunBusy, RunCache
from bnfl.experiments.core import (
    PROFILES,
    Context,
    Result,
    _resolve_data_root,
    _seed_list,
    code_fingerprint,
    config_hash,
    deep_merge,
    machine,
)
from bnfl.experiments.protocols import protocol_hash
from bnfl.experiments.registry import get, ids
from bnfl.experiments.report import write_report
from bnfl.experiments.stacking import STACK_MODES, default_stack, stack_entry
from bnfl.fl.batched import BATCHED_MODES
from bnfl.plots import git_commit, save_figure

__all__ = ["load_result", "plot", "provenance", "reproduce", "result_path", "run", "save_figures"]

RESULT_FILE = "result.json"


def _done_marker(out: str | os.PathLike[str], experiment_id: str, key: str) -> Path:
    return Path(out) / "_runs" / "done" / f"{experiment_id}-{key}"


def result_path(out: str | os.PathLike[str], experiment_id: str) -> Path:
    """``out/<id>/result.json``."""
    return Path(out) / experiment_id / RESULT_FILE


def load_result(out: str | os.PathLike[str], experiment_id: str, *, strict: bool = False) -> Result | None:
    """The stored result of ``experiment_id`` under ``out``, or ``None`` (a damaged one too, to be
    rerun; with ``strict``, a damaged one raises a ``ValueError`` that names the file)."""
    path = result_path(out, experiment_id)
    if not path.is_file():
        return None
    try:
        return read_result(path)
    except (OSError, ValueError):
        if strict:
            raise
        return None


def _identity(experiment_id: str, profile: str, config: Mapping[str, Any], seeds: list[int],
              device: str, data_root: str | None, batched: str = "off", stack: str = "seeds",
              device_options: Any = None) -> dict[str, Any]:
    # Everything that changes the numbers; the hash of this decides whether a stored
    # result can be reused.
    ident: dict[str, Any] = {
        "id": experiment_id, "profile": profile, "config": config, "seeds": seeds, "device": device,
        "code": code_fingerprint(),
    }
    if profile == "paper":
        ident["data_root"] = data_root
    if batched != "off":
        ident["batched"] = batched
    if stack != "seeds":  # (identities of unstacked results stay as they were)
        ident["stack"] = stack
    if device_options is not None and device_options.any:
        ident["device_options"] = device_options.describe()
    return ident


def _command(experiment_id: str, profile: str, out: str | None, device: str, seeds: list[int],
             default_seeds: int, data_root: str | None, batched: str = "off") -> str:
    parts = ["bnfl", "run", experiment_id, "--profile", profile]
    if out is not None:
        parts += ["--out", str(out)]
    if device != "cpu":
        parts += ["--device", device]
    if seeds != list(range(default_seeds)):
        parts += ["--seeds", str(len(seeds))]
    if profile == "paper" and data_root:
        parts += ["--data-root", data_root]
    if batched != "auto":  # the default of `bnfl run` / `bnfl reproduce`
        parts += ["--batched", batched]
    return " ".join(shlex.quote(p) for p in parts)


def run(
    experiment_id: str,
    *,
    profile: str = "quick",
    device: str = "cpu",
    seeds: int | Sequence[int] | None = None,
    out: str | os.PathLike[str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    force: bool = False,
    cache: RunCache | None = None,
    progress: bool = False,
    batched: str = "auto",
    stack: str | None = None,
    device_options: Any = None,
) -> Result:
    """Run one registered entry and return its :class:`Result`.

    Parameters
    ----------
    experiment_id : str
        Catalog id, e.g. ``"fedtan-tab1"`` (see :func:`bnfl.experiments.ids`).
    profile : {"smoke", "quick", "paper"}, default ``"quick"``
    device : str, default ``"cpu"``
        Torch device for training entries (``"cuda"`` on a GPU machine).
    seeds : int or sequence of int, optional
        Number of repeats (seeds ``0..n-1``) or the seeds themselves; default: the
        entry's count for the profile (5 at ``paper``, as in the paper).
    out : path, optional
        If given, ``out/<id>/result.json`` is written, and reused on a later call on this
        machine with the same hash unless ``force``; training runs are cached in ``out/_runs``.
    data_root : path, optional
        Folder with the paper-profile datasets; default ``$BNFL_DATA``.
    overrides : mapping, optional
        Deep-merged into the profile's configuration (e.g. ``{"rounds": 2}``); recorded.
    force : bool, default False
        Recompute even if a stored result matches. The hash covers the configuration, the
        seeds, the device, (paper profile) the data root and the bnfl source code, so a
        changed configuration or a changed bnfl recomputes by itself.
    cache : RunCache, optional
        Shared cache of training runs; default a fresh one (on disk under ``out`` if given).
    progress : bool, default False
        Show progress bars for the training runs.
    batched : {"off", "auto", "on"}, default "auto"
        The engine of the training runs (:attr:`bnfl.fl.TrainConfig.batched`): ``"auto"`` trains
        each round's clients (and an entry's seeds) as one computation where possible, equal
        to ``"off"`` up to rounding (another hash, cached apart).
    stack : {"seeds", "entry"}, optional
        What trains as one computation (:attr:`Context.stack <bnfl.experiments.core.Context>`);
        default ``"entry"`` for the paper profile on a CUDA device with the batched engine (the
        entry's runs stacked, :mod:`bnfl.experiments.stacking`), ``"seeds"`` otherwise.
    device_options : bnfl.fl.device_options.DeviceOptions, optional
        CUDA graphs, channels-last, TF32, bf16 for the batched runs (:attr:`Context.device_options
        <bnfl.experiments.core.Context>`; default: CUDA graphs with ``stack="entry"`` on a CUDA
        device, nothing otherwise); options that are on join the result's hash.
    """
    if batched not in BATCHED_MODES:
        raise ValueError(f"batched must be one of {', '.join(BATCHED_MODES)}; got {batched!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")

    stack = default_stack(profile, device, batched) if stack is None else stack
    if stack not in STACK_MODES:
        raise ValueError(f"stack must be one of {', '.join(STACK_MODES)}; got {stack!r}")
    entry = get(experiment_id)
    config = deep_merge(entry.config(profile), overrides)
    seed_list = _seed_list(int(entry.default_seeds.get(profile, 1)), seeds)
    root = _resolve_data_root(data_root)
    key = config_hash(_identity(experiment_id, profile, config, seed_list, device, root, batched, stack,
                                device_options))
    if out is not None and not force:
        stored = load_result(out, experiment_id)
        if (stored is not None and stored.config_hash == key
                and _done_marker(out, experiment_id, key).is_file()):
            return stored
    if cache is None:
        cache = RunCache(Path(out) / "_runs" if out is not None else None)
    ctx = Context(profile=profile, device=device, seeds=seed_list, data_root=root, cache=cache,
                  progress=progress, batched=batched, stack=stack, device_options=device_options,
                  seed_groups=entry.seed_groups)
    # Entries that draw random numbers outside torch (matplotlib layouts, python's random)
    # get the same stream every time.
    random.seed(seed_list[0])
    start = time.perf_counter()
    if stack == "entry":  # train the planned runs stacked; compute then finds them in the cache
        stack_entry(ctx, lambda c: entry.compute(c, config))
        random.seed(seed_list[0])
    parts = entry.compute(ctx, config)
    duration = time.perf_counter() - start
    result = Result(
        id=entry.id, title=entry.title,
        profile=profile,
        seeds=seed_list,
        rows=list(parts.get("rows", [])),
        paper=list(parts.get("paper", [])),
        claims=list(parts.get("claims", [])),
        series=dict(parts.get("series", {})),
        config=config,
        config_hash=key, protocol_hash=protocol_hash(entry.id, profile=profile, config=config, seeds=seed_list),
        deviations=list(parts.get("deviations", [])),
        notes=list(parts.get("notes", [])),
        device=device,
        duration_s=round(duration, 3),
        git_commit=git_commit(),
        command=_command(entry.id, profile, None if out is None else str(out), device, seed_list,
                         int(entry.default_seeds.get(profile, 1)), root, batched),
        runs=dict(ctx.runs_used),
        machine=machine(),
    )
    if out is not None:
        _atomic.write_text(result_path(out, experiment_id), result.to_json())  # never half a result
        _atomic.write_text(_done_marker(out, experiment_id, key), f"{result.duration_s}\n")
    return result


def plot(experiment_id: str, result: Result) -> Any:
    """The entry's figure for ``result`` (a matplotlib Figure; nothing is written)."""
    return get(experiment_id).plot(result)


def provenance(result: Result) -> dict[str, Any]:
    """What a figure file records about the result it shows (for :func:`bnfl.plots.save_figure`)."""
    return {
        "profile": result.profile,
        "seeds": result.seeds,
        "config_hash": result.config_hash,
        "duration_s": result.duration_s,
        "device": result.device,
        "command": result.command,
        "verdict": result.verdict,
        "result_git_commit": result.git_commit,
    }


def save_figures(result: Result, figures_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Plot ``result`` and write ``<figures_dir>/<id>.png/.svg/.json`` through :func:`bnfl.plots.save_figure`."""
    fig = plot(result.id, result)
    try:
        return save_figure(fig, result.id, out_dir=figures_dir, provenance=provenance(result))
    finally:
        plt.close(fig)


def _figure_current(figures_dir: Path, result: Result) -> bool:
    meta = figures_dir / f"{result.id}.json"
    if not (figures_dir / f"{result.id}.png").is_file() or not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("config_hash") == result.config_hash
    except (OSError, json.JSONDecodeError):
        return False


def _run_entry(eid: str, options: Mapping[str, Any], *, cache: RunCache | None = None,
               progress: bool = False) -> tuple[Result, float]:
    """One entry of :func:`reproduce`: its result (stored or computed) and figures; seconds taken."""
    start = time.perf_counter()
    result = run(eid, **options, cache=cache, progress=progress)
    if options["force"] or not _figure_current(Path(options["out"]), result):
        save_figures(result, options["out"])
    return result, time.perf_counter() - start


def _worker_init() -> None:
    matplotlib.use("Agg")
    torch.set_num_threads(1)


def _worker_entry(eid: str, options: Mapping[str, Any], wait: bool) -> tuple[dict[str, Any], float] | None:
    """One entry in a worker process; ``None`` when ``wait`` is off and another worker holds a run
    it needs (:class:`RunBusy`): the parent puts it back (its runs so far stay in the cache)."""
    try:
        result, seconds = _run_entry(eid, options, cache=RunCache(Path(options["out"]) / "_runs", wait=wait))
    except RunBusy:
        return None
    return result.to_dict(), seconds


def _dispatch_order(todo: Sequence[str], out: Path) -> list[str]:
    """The order in which :func:`_run_parallel` hands out entries: the longest first by the
    durations an earlier run stored under ``out`` (:func:`load_result`; so that no long entry
    starts last while the other workers sit idle), entries without one first of all in their
    given order."""
    stored = {eid: load_result(out, eid) for eid in todo}
    prior = {eid: r.duration_s for eid, r in stored.items() if r is not None}
    return sorted(todo, key=lambda eid: -prior.get(eid, float("inf")))


def _expected_seconds(todo: Sequence[str], out: Path) -> dict[str, float]:
    """Each entry's expected duration: the one an earlier run stored under ``out``; an entry without
    one counts as the median of those stored (1 s when none is)."""
    prior = {eid: r.duration_s for eid in todo if (r := load_result(out, eid)) is not None}
    known = sorted(prior.values())
    typical = known[len(known) // 2] if known else 1.0
    return {eid: max(float(prior.get(eid, typical)), 1e-3) for eid in todo}


class _Progress:
    """The bar of :func:`reproduce`: its ETA comes from the entries' recorded durations.

    The bar counts expected seconds (:func:`_expected_seconds`), not entries: entries run longest
    first (:func:`_dispatch_order`), so an ETA by entry count would read the first, longest entry's
    time as every entry's (it once said 8 h 03 min for a run that took 23 min). The entries done
    are shown beside it."""

    def __init__(self, todo: Sequence[str], out: Path, *, desc: str, progress: bool) -> None:
        self.expected = _expected_seconds(todo, out)
        self.total, self.done = len(todo), 0
        self.bar = tqdm(total=round(sum(self.expected.values()), 3), desc=desc, disable=not progress,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]")
        self.bar.set_postfix_str(f"0/{self.total} entries")

    def started(self, eid: str) -> None:
        self.bar.set_postfix_str(f"{self.done}/{self.total} entries, {eid}")

    def finished(self, eid: str) -> None:
        self.done += 1
        self.bar.set_postfix_str(f"{self.done}/{self.total} entries, {eid}", refresh=False)
        self.bar.update(self.expected[eid])

    def close(self) -> None:
        self.bar.close()


class _Dispatch:
    """Which entry a free worker of :func:`_run_parallel` takes next.

    Entries go out in ``order``. One put back (:meth:`put_back`: a run it needs is being trained
    by another worker) waits until some other entry finishes (:meth:`finished`), and meanwhile
    the next one goes out; when only put-back entries are left, the first goes out with
    ``wait=True`` (it then waits for the run and reads it)."""

    def __init__(self, order: Sequence[str]) -> None:
        self.pending = list(order)
        self.held: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.pending)

    def next(self) -> tuple[str, bool]:
        """The next entry and whether its worker waits for runs others are training."""
        ready = [eid for eid in self.pending if eid not in self.held]
        eid = (ready or self.pending)[0]
        self.pending.remove(eid)
        return eid, not ready

    def put_back(self, eid: str) -> None:
        self.pending.insert(0, eid)
        self.held.add(eid)

    def finished(self, eid: str) -> None:  # noqa: ARG002 - any finished entry may have stored the run
        self.held.clear()


def _run_parallel(todo: Sequence[str], options: Mapping[str, Any], jobs: int,
                  progress: bool) -> tuple[list[Result], dict[str, float]]:
    """:func:`reproduce`'s entries on ``jobs`` worker processes; results in the order of ``todo``.

    Scheduling (it never changes a number: a run is the same computation whichever worker trains
    it): entries go out longest first (:func:`_dispatch_order`). A worker that meets a run another
    worker is training (entries that share runs, e.g. FedTAN's Fig. 9 and Table 2) does not wait
    for it: the entry is put back (:class:`RunBusy`, :class:`_Dispatch`), its runs so far stay in
    the cache, and the worker takes the next entry."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
    from concurrent.futures import wait as wait_for

    done: dict[str, tuple[Result, float]] = {}
    dispatch = _Dispatch(_dispatch_order(todo, Path(options["out"])))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init) as pool:
        running: dict[Any, str] = {}
        bar = _Progress(todo, Path(options["out"]), desc=f"reproduce ({options['profile']}, {jobs} jobs)",
                        progress=progress)
        try:
            while dispatch or running:
                while dispatch and len(running) < jobs:
                    eid, wait = dispatch.next()
                    running[pool.submit(_worker_entry, eid, options, wait)] = eid
                finished, _ = wait_for(list(running), return_when=FIRST_COMPLETED)
                for fut in finished:
                    eid = running.pop(fut)
                    try:
                        out = fut.result()
                    except Exception as err:
                        for f in running:
                            f.cancel()
                        raise RuntimeError(f"bnfl reproduce: entry {eid} failed: {err}") from err
                    if out is None:  # a run it needs is being trained by another worker
                        dispatch.put_back(eid)
                        continue
                    done[eid] = (Result.from_dict(out[0]), out[1])
                    dispatch.finished(eid)
                    bar.finished(eid)
        finally:
            bar.close()
    return [done[eid][0] for eid in todo], {eid: done[eid][1] for eid in todo}


def reproduce(
    paper: str | None = None,
    *,
    profile: str = "quick",
    out: str | os.PathLike[str] = "figures",
    device: str = "cpu",
    seeds: int | None = None,
    data_root: str | os.PathLike[str] | None = None,
    force: bool = False,
    only: Sequence[str] | None = None,
    progress: bool = True,
    report: bool = True,
    jobs: int = 1,
    batched: str = "auto",
    report_only: bool = False,
) -> list[Result]:
    """Run every registered entry of ``paper`` (``None``: of every registered paper, one progress
    bar per paper), resumable, and write figures and ``REPORT.md``.

    Entries this machine already finished with the same configuration and code (see the
    module docstring) are loaded, not recomputed, unless ``force``. Training runs are shared between entries through one
    :class:`RunCache` on ``out/_runs``.

    ``batched`` is the engine of every training run, as in :func:`run`.

    ``report_only=True`` computes nothing: it writes ``REPORT.md`` from the results stored under
    ``out`` (e.g. after ``bnfl run <id> --out figures`` added one entry) and returns them.

    ``jobs > 1`` runs that many entries at once in worker processes (one torch thread each; one
    progress bar over all entries). The results are the same as with ``jobs=1``: every training
    run seeds itself, and a run two entries share is computed once (the cache's lock).

    Returns
    -------
    list of Result
        In registry order.
    """
    if int(jobs) != jobs or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    of_paper = ids(paper)  # an unknown paper fails before any work
    todo = list(only) if only else of_paper
    if not todo:
        raise ValueError(f"no registered experiments for paper {paper!r}")
    for eid in todo:
        get(eid)  # unknown ids fail before any work
        if paper is not None and eid not in of_paper:
            raise ValueError(f"--only {eid} is not an entry of --paper {paper}; its entries: {', '.join(of_paper)}")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = RunCache(out_dir / "_runs")
    results: list[Result] = []
    timings: dict[str, float] = {}
    by_paper: dict[str, list[str]] = {}
    for eid in todo:
        by_paper.setdefault(get(eid).paper, []).append(eid)
    options = {"profile": profile, "device": device, "seeds": seeds, "out": out_dir, "data_root": data_root,
               "force": force, "batched": batched}
    if report_only:
        results = [r for r in (load_result(out_dir, eid, strict=True) for eid in todo) if r is not None]
    elif jobs > 1:
        results, timings = _run_parallel(todo, options, jobs, progress)
    for key, eids in by_paper.items() if jobs <= 1 and not report_only else ():
        bar = _Progress(eids, out_dir, desc=f"reproduce {key} ({profile})", progress=progress)
        try:
            for eid in eids:
                bar.started(eid)
                result, timings[eid] = _run_entry(eid, options, cache=cache, progress=progress)
                results.append(result)
                bar.finished(eid)
        finally:
            bar.close()
    if report:
        # The report lists every entry present in the folder (of ``paper``), not only those just run:
        # `--only` or `--headline` into `figures/` leaves the other stored results in REPORT.md.
        everything = []
        for eid in ids(paper):
            stored = next((r for r in results if r.id == eid), None) or load_result(out_dir, eid)
            if stored is not None:
                everything.append(stored)
        write_report(everything, out_dir / "REPORT.md", out=str(out), timings=timings,
                     device=device, seeds=seeds)
    return results
