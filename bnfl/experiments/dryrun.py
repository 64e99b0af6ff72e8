"""``bnfl run <id> --dry-run``: what an entry would run, and whether its data is in place, without training.

An entry declares its runs by computing them: its ``compute(ctx, config)`` asks for each training run
through ``ctx.cache`` (:func:`bnfl.experiments.training.train` with or without observers, FedBN's
``fedbn_run``, all key the cache by the run's full spec). A dry run therefore calls ``compute``
with a :class:`PlanCache`, which records every run it is asked for and answers with a stand-in
summary (chance accuracy at every evaluated round) instead of training: nothing in the entries
changes, and every entry, whatever its loops, is planned by the code that runs it. The plan's
numbers are thrown away.

Before that, every data set the configuration names is loaded from ``--data-root`` (its loader is
the judge of the layout): a missing one is one line naming the data set, the layout expected and
where the data comes from (:mod:`bnfl.experiments.sources`), and the plan stops there. After it,
each distinct model is built as its runs build it (norm kind of the method, pretrained weights
file), one batch of its data goes through a few timed SGD steps on ``device``, and the time of
each run is estimated from its number of steps. Entries that train nothing (arithmetic, schematic)
plan no run.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bnfl import models
from bnfl.data import DATASETS, morpho_mnist
from bnfl.data.imagenet_store import imagenet_layout
from bnfl.data.stored import decode
from bnfl.experiments import registry
from bnfl.experiments.cache import RunCache
from bnfl.experiments.core import Context, _resolve_data_root, _seed_list, config_hash, deep_merge
from bnfl.experiments.sources import source
from bnfl.experiments.training import canonical, load_data
from bnfl.methods import get as get_method

__all__ = ["DataCheck", "ModelCheck", "Plan", "PlanCache", "check_data", "dry_run", "price"]


@dataclass
class DataCheck:
    """One data set the entry reads: ``ok``, and a one-line ``line`` (its size, or what is missing)."""

    name: str
    ok: bool
    line: str


@dataclass
class ModelCheck:
    """One distinct model of the runs, built and timed on one batch (``step_s``: seconds per SGD step)."""

    label: str
    params: int
    batch: int
    step_s: float | None
    line: str


@dataclass
class Plan:
    """What :func:`dry_run` found: the runs (canonical specs), data, models and the time estimate."""

    id: str
    profile: str
    kind: str
    device: str
    seeds: list[int]
    runs: list[dict[str, Any]] = field(default_factory=list)
    data: list[DataCheck] = field(default_factory=list)
    models: list[ModelCheck] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: data present in its layout but not prepared yet (ImageNet before its one-time decode):
    #: the runs are not planned, and that is no error
    pending: list[str] = field(default_factory=list)
    steps: int = 0
    images: int = 0
    estimate_s: float | None = None

    @property
    def ok(self) -> bool:
        """All data present and every run resolved."""
        return not self.missing and not self.errors

    def lines(self) -> list[str]:
        """The plan as printed by ``bnfl run --dry-run``."""
        head = f"{self.id} [{self.profile}, {len(self.seeds)} seed(s), {self.kind}]"
        out = [head + (": trains nothing" if self.kind != "training" else "")]
        out += [f"  data     {d.line}" for d in self.data]
        out += [f"  MISSING  {m}" for m in self.missing]
        out += [f"  ERROR    {e}" for e in self.errors]
        out += [f"  PENDING  {p}" for p in self.pending]
        if self.kind != "training" or not self.ok or self.pending:
            return out
        rounds = sorted({int(r["rounds"]) for r in self.runs})
        out.append(f"  runs     {len(self.runs)} (rounds {_span(rounds)}), {self.steps:,} SGD steps, "
                   f"{self.images:,} training images seen")
        out += [f"  model    {m.line}" for m in self.models]
        est = "unknown" if self.estimate_s is None else _duration(self.estimate_s)
        out.append(f"  estimate {est} on {self.device} (from the timed steps above; evaluation counted as "
                   "one third of a step per test batch)")
        return out


def _span(values: Sequence[int]) -> str:
    return "-" if not values else str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


# ------------------------------------------------------------------------------ the recording cache
class PlanCache(RunCache):
    """A :class:`RunCache` that trains nothing: it records each run key it is asked for and answers
    with a stand-in summary (:func:`stand_in`). ``keys``: the recorded keys, in first-asked order."""

    def __init__(self, data_root: str | None) -> None:
        super().__init__(None)
        self.data_root = data_root
        self.keys: dict[str, dict[str, Any]] = {}

    def get(self, spec: Mapping[str, Any]) -> Any:
        return stand_in(spec, self.data_root)

    def get_or_compute(self, spec: Mapping[str, Any], compute: Any) -> Any:  # noqa: ARG002 - never computes
        self.keys.setdefault(self.key(spec), dict(spec))
        return stand_in(spec, self.data_root)


def _personalized(method: str) -> bool:
    return bool(get_method(method).personalized)


def _num_clients(spec: Mapping[str, Any], split: Any) -> int:
    part = spec.get("partition") or {}
    if part.get("kind") == "by_domain":
        return max(1, len(split.domains or []))
    return int(part.get("num_clients", 5))


def _evaluated(spec: Mapping[str, Any]) -> list[int]:
    rounds, t = int(spec["rounds"]), spec.get("train") or {}
    every, last = int(t.get("eval_every", 10)), int(t.get("eval_last", 0))
    return [r for r in range(1, rounds + 1) if r % every == 0 or r > rounds - last or r == rounds]


def stand_in(key: Mapping[str, Any], data_root: str | None) -> dict[str, Any]:
    """A summary shaped like a finished run of ``key["spec"]`` (every field the three run recorders
    write), at chance accuracy; ``dry_run: True`` marks it."""
    spec = key.get("spec") or {}
    if "data" not in spec:
        return {"dry_run": True, "diverged": False}
    split = load_data(spec["data"], data_root=data_root)
    classes = max(2, int(split.num_classes))
    chance, loss = 100.0 / classes, math.log(classes)
    rounds, evald = int(spec["rounds"]), _evaluated(spec)
    k = _num_clients(spec, split)
    n_test = int(split.y_test.shape[0])
    out: dict[str, Any] = {
        "method": spec.get("method"), "diverged": False, "rounds_done": rounds, "round": evald,
        "test_acc": [chance] * len(evald), "comm_rounds": list(evald), "bytes_total": [0] * len(evald),
        "train_loss": [loss] * rounds, "eval_loss": [loss] * rounds, "n_test": n_test, "seconds": 0.0,
        "dry_run": True,
    }
    personal = _personalized(str(spec.get("method")))
    if personal:
        out.update(client_test_acc=[chance] * k, client_own_acc=[chance] * k, global_model_test_acc=chance)
    if split.domains:
        d = len(split.domains)
        out.update(domains=list(split.domains), client_domain=[i % d for i in range(k)], domain_acc=[chance] * d,
                   n_test_domain=[max(1, n_test // d)] * d)
        if personal:
            out["domain_acc_clients"] = [[chance] * (d + 1) for _ in range(k)]
        else:
            out["domain_acc_global"] = [chance] * (d + 1)
    observed = dict(key.get("observed") or {})
    for obs in key.get("observers") or ():  # an observer's key names what it records (FixBN's runs)
        observed.update(obs)
    if observed.get("stats_window"):
        out.update({s: [0.0] * rounds for s in ("stats_global_l1", "stats_local_l1", "stats_window_var")})
    if observed.get("segmentation"):
        out.update(pixel_acc=chance, miou=chance)
    if observed.get("recalibrate"):
        out["recalibrated_acc"] = chance
    # unseen-domain test sets: named by the key itself, or by an observer's key (FedBN's protocol)
    unseen = list(key.get("unseen") or [])
    for obs in key.get("observers") or ():
        unseen += [u for u in obs.get("unseen") or () if u not in unseen]
    if unseen:
        out.update(unseen_acc={u: chance for u in unseen}, n_test_unseen=n_test)
    return out


# ------------------------------------------------------------------------------ data
def _data_specs(value: Any) -> Iterator[dict[str, Any]]:
    """Every ``data`` mapping with a registered ``name`` in a configuration (any depth)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k == "data" and isinstance(v, Mapping) and v.get("name") in DATASETS:
                yield dict(v)
            else:
                yield from _data_specs(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _data_specs(v)


def _morpho_styles(value: Any) -> set[str]:
    if isinstance(value, str) and value.startswith("morpho:"):
        return {value.split(":", 1)[1]}
    if isinstance(value, Mapping):
        return set().union(*(_morpho_styles(v) for v in value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*(_morpho_styles(v) for v in value)) if value else set()
    return set()


def _missing_line(name: str, root: str | None, err: BaseException | None) -> str:
    src = source(name)
    where = "no --data-root given (or $BNFL_DATA)" if root is None else f"not found under {root}"
    why = "" if err is None else f" [{str(err).splitlines()[0].split(' Expected layout')[0]}]"
    return f"{name}: {where}; expects {src.layout}; get it from {src.origin}{why}"


def check_data(config: Mapping[str, Any], root: str | None) -> tuple[list[DataCheck], list[str]]:
    """Every local data set ``config`` names (any depth), loaded from ``root``: a line per data set
    found, and one per data set missing (its layout and where it comes from)."""
    return _check_data(config, root)


def _check_data(config: Mapping[str, Any], root: str | None) -> tuple[list[DataCheck], list[str]]:
    checks: dict[str, DataCheck] = {}
    missing: list[str] = []
    seen: set[str] = set()
    for d in _data_specs(config):
        name = d["name"]
        if not DATASETS[name].local or config_hash(d) in seen or name in {m.split(":")[0] for m in missing}:
            continue
        seen.add(config_hash(d))
        try:
            if root is None:
                raise FileNotFoundError("no data root")
            if name == "imagenet" and (undecoded := _imagenet_undecoded(d, root)) is not None:
                checks.setdefault(name, DataCheck(name, True, undecoded))
                continue
            split = load_data(d, data_root=root)
        except (FileNotFoundError, NotADirectoryError) as err:
            missing.append(_missing_line(name, root, None if root is None else err))
            checks.pop(name, None)
            continue
        except (ValueError, OSError, KeyError, EOFError) as err:  # there, but not in the layout its loader reads
            missing.append(f"{name}: unreadable under {root} ({type(err).__name__}: {str(err).splitlines()[0]}); "
                           f"expects {source(name).layout}")
            checks.pop(name, None)
            continue
        shape = "x".join(str(s) for s in split.input_shape)
        checks.setdefault(name, DataCheck(name, True, f"{name}: {len(split.y_train):,} train / {len(split.y_test):,} "
                                                      f"test, {shape}, {split.num_classes} classes"))
    for style in sorted(_morpho_styles(config)):
        try:
            if root is None:
                raise FileNotFoundError("no data root")
            x, _ = morpho_mnist(Path(root) / "morpho_mnist", style)
            checks[f"morpho_mnist:{style}"] = DataCheck("morpho_mnist", True, f"morpho_mnist ({style}): {len(x):,} test")
        except FileNotFoundError as err:
            missing.append(_missing_line("morpho_mnist", root, None if root is None else err))
    return list(checks.values()), missing


def _imagenet_undecoded(d: Mapping[str, Any], root: str) -> str | None:
    """ImageNet's layout line when its uint8 store is not made yet (None when it is: then it loads
    from the memory maps like any data set). Decoding 1.33M images takes hours, so a dry run only
    checks the folders (:func:`bnfl.data.imagenet_store.imagenet_layout`; a missing part raises
    FileNotFoundError naming the layout)."""
    folder = Path(root).expanduser()
    entry = DATASETS["imagenet"]
    sub = next((s for s in (entry.subdir, *entry.aliases) if s and (folder / s).is_dir()), None)
    folder = folder / sub if sub is not None else folder
    opts = {k: d[k] for k in ("size", "max_per_class", "cache") if k in d}
    layout = imagenet_layout(folder, **opts)
    if layout.get("store"):
        return None
    return (f"imagenet: {layout['classes']} classes, val as {layout['val']}; not decoded yet: the first run "
            f"decodes it once into uint8 memory maps (hours; bnfl.data.prepare_imagenet(root, workers=N) does it "
            f"ahead), after which --dry-run plans its runs")


# ------------------------------------------------------------------------------ models and timing
def _sync(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_model(spec: Mapping[str, Any], split: Any, device: str, steps: int) -> tuple[ModelCheck, float | None]:
    """Build the model of ``spec`` as its run does and time ``steps`` SGD steps on one batch."""
    opts = dict(spec["model"])
    name = opts.pop("name")
    norm = get_method(spec["method"]).norm
    b = int(spec["train"]["batch_size"])
    meta = getattr(split, "meta", None) or {}
    norm_px = (torch.as_tensor(meta["mean"]).reshape(-1), torch.as_tensor(meta["std"]).reshape(-1)) \
        if meta.get("stored") == "uint8" else None
    x = decode(split.x_train[:b], norm_px, device, torch.float32).to(device)  # stored uint8 pixels standardised
    short = "" if x.shape[0] == b else f" (timed on the {x.shape[0]} images there are, scaled)"
    label = f"{name} ({norm}) on {spec['data']['name']}, batch {b}{short}"
    if steps == 0:  # the model fits the data, no timing: built on the meta device (shapes only, no memory and
        # no initialisation: VGG-19 is 144M parameters; a weights file's keys and shapes are still checked) and
        # fed two samples' shapes
        with torch.device("meta"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*meta parameter.*no-op")  # loading values onto meta
            model = models.build_for(name, split.input_shape, norm=norm, **{"num_classes": split.num_classes, **opts})
            with torch.no_grad():
                model.train()(x[:2].to("meta"))
        params = sum(p.numel() for p in model.parameters())
        return ModelCheck(label, params, b, None, f"{label}: {params:,} parameters (not timed)"), None
    torch.manual_seed(0)
    model = models.build_for(name, split.input_shape, norm=norm, **{"num_classes": split.num_classes, **opts})
    params = sum(p.numel() for p in model.parameters())
    try:
        model = model.to(device).train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        times = []
        for i in range(steps + 1):  # the first is a warm-up
            _sync(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(x).float().pow(2).mean().backward()  # the cost of a training step, whatever the labels
            opt.step()
            _sync(device)
            if i:
                times.append(time.perf_counter() - t0)
        step = sorted(times)[len(times) // 2] * b / max(1, x.shape[0])  # a short fake batch: scaled to B
    except Exception as err:  # noqa: BLE001 - a norm kind that needs its engine: built, not timed
        return ModelCheck(label, params, b, None, f"{label}: {params:,} parameters; not timed ({err})"), None
    return ModelCheck(label, params, b, step, f"{label}: {params:,} parameters, {1000 * step:.1f} ms per step"), step


def _run_steps(spec: Mapping[str, Any], split: Any) -> tuple[int, int, int]:
    """(SGD steps, training images, test batches evaluated) of one run of ``spec``."""
    t = spec["train"]
    b, rounds = int(t["batch_size"]), int(spec["rounds"])
    n = int(split.y_train.shape[0])
    if get_method(spec["method"]).iid_pool:  # one pooled client (bnfl.methods.Method.iid_pool)
        k, m = 1, 1
    else:
        k = _num_clients(spec, split)
        m = max(1, round(float(t.get("participation", 1.0)) * k))
    per = int(t["local_steps"]) * (math.ceil(n / k / b) if t.get("local_unit") == "epochs" else 1)
    steps = rounds * m * per
    return steps, steps * b, len(_evaluated(spec)) * math.ceil(int(split.y_test.shape[0]) / b)


# ------------------------------------------------------------------------------ the dry run
#: Models already built and timed in this process (``bnfl reproduce --dry-run`` plans many entries).
_CHECKED: dict[tuple[Any, ...], tuple[ModelCheck, float | None]] = {}


def dry_run(experiment_id: str, *, profile: str = "paper", device: str = "cpu", seeds: int | Sequence[int] | None = None,
            data_root: str | None = None, overrides: Mapping[str, Any] | None = None, time_steps: int = 2) -> Plan:
    """Plan ``experiment_id`` without training: check its data under ``data_root``, resolve every run
    spec, build every model and time ``time_steps`` steps of each on ``device`` (module docstring);
    ``time_steps=0`` builds each model on the ``meta`` device and feeds it two samples' shapes (no
    memory, no initialisation, no estimate; tests).

    Returns
    -------
    Plan
        ``plan.ok`` is False when a data set (or a pretrained weights file) is missing, each
        named in ``plan.missing``, or when resolving the runs failed (``plan.errors``).
    """
    entry = registry.get(experiment_id)
    config = deep_merge(entry.config(profile), overrides)
    root = _resolve_data_root(data_root)
    plan = Plan(entry.id, profile, entry.kind, device, _seed_list(int(entry.default_seeds.get(profile, 1)), seeds))
    plan.data, plan.missing = _check_data(config, root)
    plan.pending = [f"runs not planned until {c.name} is decoded (see its data line)"
                    for c in plan.data if "not decoded yet" in c.line]
    if plan.missing or plan.pending or entry.kind != "training":
        return plan
    cache = PlanCache(root)
    ctx = Context(profile=profile, device=device, seeds=plan.seeds, data_root=root, cache=cache, batched="off")
    try:
        with warnings.catch_warnings():  # the stand-in numbers are constant: warnings about them are noise
            warnings.simplefilter("ignore")
            entry.compute(ctx, config)
    except FileNotFoundError as err:  # e.g. a pretrained weights file under the data root
        name = "pretrained" if "pretrained" in str(err) else "data"
        plan.missing.append(_missing_line(name, root, err))
        return plan
    except Exception as err:  # noqa: BLE001 - reported, not raised: the plan says what breaks
        plan.errors.append(f"resolving the runs failed: {type(err).__name__}: {err}")
        return plan
    price(plan, [canonical(k["spec"]) for k in cache.keys.values() if "spec" in k], root, time_steps)
    return plan


def price(plan: Plan, runs: Sequence[Mapping[str, Any]], root: str | None, time_steps: int = 2) -> Plan:
    """Fill ``plan``'s runs, models, steps and estimate from ``runs`` (canonical specs, as a
    :class:`PlanCache` recorded them): each distinct model built and timed on ``plan.device``
    (:func:`dry_run`'s docstring), each run's steps counted. Returns ``plan``."""
    device = plan.device
    plan.runs = list(runs)
    timed: dict[str, float | None] = {}
    total = 0.0
    for spec in plan.runs:
        split = load_data(spec["data"], data_root=root)
        model = {k: v for k, v in spec["model"].items() if k != "pretrained_norm"}  # the same network and file
        mkey = config_hash({"model": model, "norm": get_method(spec["method"]).norm, "data": spec["data"],
                            "b": spec["train"]["batch_size"]})
        if mkey not in timed:
            try:
                memo = (mkey, root, device, time_steps)  # entries sharing a model (hbn-tab5, hbn-fig7) build it once
                if memo not in _CHECKED:
                    _CHECKED[memo] = _time_model(spec, split, device, time_steps)
                check, timed[mkey] = _CHECKED[memo]
            except (FileNotFoundError, ValueError, TypeError) as err:
                plan.errors.append(f"building {spec['model'].get('name')} for {spec['data']['name']} failed: {err}")
                timed[mkey] = None
                continue
            if not any(m.label == check.label for m in plan.models):
                plan.models.append(check)
        steps, images, test_batches = _run_steps(spec, split)
        plan.steps += steps
        plan.images += images
        step = timed[mkey]
        total = math.nan if step is None else total + step * (steps + test_batches / 3)
    plan.estimate_s = None if math.isnan(total) else total
    return plan
