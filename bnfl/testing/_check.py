"""The analysis behind :func:`bnfl.testing.check_aggregation` (one aggregation function, explored by
hypothesis); :func:`bnfl.testing.check_server_step` is :mod:`bnfl.testing._server_step`, on these drivers."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import NoSuchExample, Unsatisfiable
from torch import Tensor, nn

from bnfl import compat, stats
from bnfl.testing import strategies as bst

#: What each problem kind means (the ``kind`` of a :class:`Problem`).
PROBLEM_KINDS = {
    "error": "the function raised an exception or returned something that is not a state_dict",
    "nonfinite": "an entry comes back NaN or infinite",
    "negative_variance": "a running_var comes back negative",
    "counter_float": "num_batches_tracked comes back as a float (a counter averaged like a weight)",
    "dtype_change": "an entry comes back in another dtype than the clients sent",
    "key_change": "keys the clients did not send, a non-BN key lost, or a shape changed",
    "name_selection": "BN layers of one model are aggregated differently: entries chosen by name, not layer type",
}
#: Policies, most specific first: where several fit every example, the first is reported.
POLICY_ORDER = ("exact", "average", "equal-average", "first", "max", "sum", "dropped", "local")
POLICY_WORDS = {
    "exact": "exact merge: the statistics of the union of the clients' data",
    "average": "FedAvg-style weighted average",
    "equal-average": "average with equal client weights",
    "first": "one client's statistics, unchanged: the first uploaded client's",
    "max": "the largest client value",
    "sum": "the sum over clients",
    "dropped": "reset to the layer's initial values (the clients' statistics dropped)",
    "local": "left out of the server's state (each client keeps its own)",
    "mixed": "different BN layers are treated differently",
    "unrecognised": "none of the known policies",
}
ROLES = ("running_mean", "running_var", "num_batches_tracked", "weight", "bias")
RTOL, ATOL = 1e-4, 1e-6


@dataclass
class Problem:
    """One problem found, with the smallest example hypothesis shrank it to.

    Attributes
    ----------
    kind : str
        A key of :data:`PROBLEM_KINDS`.
    message : str
        What went wrong, in one line, on the counterexample.
    counterexample : str
        The minimal client split and model (clients, examples, offsets, BN layers) and the entries.
    """

    kind: str
    message: str
    counterexample: str

    def __str__(self) -> str:
        body = "\n".join("      " + line for line in self.counterexample.splitlines())
        return f"  {self.kind}: {self.message}\n    counterexample:\n{body}"


@dataclass
class AggregationReport:
    """What :func:`check_aggregation` found.

    Attributes
    ----------
    policy : str
        How the function aggregates BN running statistics (``running_mean`` and ``running_var``
        together), over every layer and example: ``"exact"``, ``"average"``, ``"equal-average"``,
        ``"first"``, ``"dropped"``, ``"local"``, ``"mixed"`` (layers treated differently) or
        ``"unrecognised"`` (:data:`POLICY_WORDS`).
    problems : list of Problem
        Every problem kind found (:data:`PROBLEM_KINDS`), each with a minimal counterexample.
    roles : dict of str to str
        The policy of each BN entry on its own: ``running_mean``, ``running_var``,
        ``num_batches_tracked``, ``weight``, ``bias`` (``"max"`` and ``"sum"`` occur for the counter).
    entries : dict of str to str
        The policy of each BN ``state_dict`` key seen (with ``model=``, your model's keys; else the
        drawn layers', e.g. ``"features.3.running_var"``), over the examples it occurred in.
    variance_bias : float or None
        Under ``"average"``: the largest share of the union's variance the averaged variance
        missed (the between-client term :math:`\\sum_i p_i(\\mu_i-\\mu)^2`), over the examples.
    examples : int
        Hypothesis examples run (exploration; shrinking comes on top).
    seconds : float
        Wall-clock time of the whole check.
    """

    policy: str
    problems: list[Problem]
    roles: dict[str, str]
    entries: dict[str, str] = field(default_factory=dict)
    variance_bias: float | None = None
    examples: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """The statistics are merged exactly and nothing is wrong."""
        return self.policy == "exact" and not self.problems

    def __str__(self) -> str:
        lines = [f"policy: {self.policy} ({POLICY_WORDS.get(self.policy, '')})"]
        if self.variance_bias is not None:
            lines.append(f"  variance bias: up to {100 * self.variance_bias:.0f}% of the union's variance "
                         "missing (the between-client term)")
        lines.append("  entries: " + ", ".join(f"{r} {p}" for r, p in self.roles.items()))
        lines.append(f"problems: {len(self.problems) or 'none'}")
        lines += [str(p) for p in self.problems]
        lines.append(f"({self.examples} examples, {self.seconds:.1f} s)")
        return "\n".join(lines)


class BNSafetyError(AssertionError):
    """A check with an expected policy (or ``require_safe``) failed; ``.report`` holds the report."""

    def __init__(self, message: str, report: object) -> None:
        super().__init__(message)
        self.report = report


# -- one example ----------------------------------------------------------------------------------------
@dataclass
class _Observation:
    stats: dict[str, set[str]] = field(default_factory=dict)  # layer -> policies (mean and var)
    roles: dict[str, list[set[str]]] = field(default_factory=dict)  # role -> per layer, the policies that fit
    keys: dict[str, set[str]] = field(default_factory=dict)  # state_dict key -> the policies that fit
    problems: dict[str, str] = field(default_factory=dict)  # kind -> message
    bias: float | None = None
    shown: list[tuple[str, Tensor | None, dict[str, Tensor]]] = field(default_factory=list)  # key, got, candidates

    def details(self) -> list[str]:
        return [f"{key}: left out" if got is None else
                f"{key}: got {_show(got)}; " + ", ".join(f"{p} {_show(c[p])}" for p in ("exact", "average", "first"))
                for key, got, c in self.shown]


def _f64(t: object) -> Tensor:
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    return torch.as_tensor(t).detach().to(torch.float64)


def _weighted(ts: Sequence[Tensor], w: Sequence[float]) -> Tensor:
    p = torch.tensor(w, dtype=torch.float64) / float(sum(w))
    return sum(pi * t for pi, t in zip(p, ts, strict=True))


def _candidates(role: str, column: list[Tensor], weights: list[int], exact_var: Tensor | None) -> dict[str, Tensor]:
    k = len(column)
    avg, eq = _weighted(column, weights), _weighted(column, [1] * k)
    out = {"average": avg, "equal-average": eq, "first": column[0]}
    if role == "running_mean":
        out["exact"] = avg
        out["dropped"] = torch.zeros_like(avg)
    elif role == "running_var":
        out["exact"] = exact_var
        out["dropped"] = torch.ones_like(avg)
    elif role == "num_batches_tracked":
        out.update({"max": torch.stack(column).max(0).values, "sum": sum(column), "dropped": torch.zeros_like(avg)})
    else:  # affine: initial weight 1, bias 0
        out["dropped"] = torch.ones_like(avg) if role == "weight" else torch.zeros_like(avg)
    return out


def _union_var(means: list[Tensor], unbiased: list[Tensor], counts: list[int]) -> Tensor:
    """The ground truth, from the clients' states alone: the union's unbiased variance
    (:func:`bnfl.stats.merge` of the clients' biased moments, FedTAN eqs. 39-40), as a BN layer run
    on the union would store it. Written apart from :mod:`bnfl.compat` so that it checks it."""
    parts = [stats.Moments(count=n, mean=m, var=v * (n - 1) / n) for m, v, n in zip(means, unbiased, counts, strict=True)]
    return stats.merge(parts).unbiased_var()


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(torch.isfinite(a).all()) and bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL))


def _show(t: Tensor) -> str:
    return np.array2string(t.reshape(-1)[:4].numpy(), precision=4, separator=", ")


def _call(fn: Callable, clients: bst.Clients, *leading: object, states: list | None = None) -> object:
    """``fn(*leading, states, weights)`` with ``counts=``/``model=`` if ``fn`` takes them (copies:
    nothing of the check is shared with ``fn``)."""
    states = [{k: v.clone() for k, v in s.items()} for s in (clients.states if states is None else states)]
    extra: dict[str, object] = {}
    takes = _keywords(fn)
    if "counts" in takes:
        extra["counts"] = [dict(c) for c in clients.counts]
    if "model" in takes:
        extra["model"] = clients.model
    return fn(*leading, states, list(clients.weights), **extra)


def _keywords(fn: Callable) -> set[str]:
    """Which of the optional keywords ``counts`` and ``model`` ``fn`` takes."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set()
    return {k for k in ("counts", "model") if k in params}


def _observe(fn: Callable, scenario: bst.Scenario) -> _Observation:
    """Run ``fn`` on the clients of ``scenario`` and classify every BN entry of the result."""
    obs = _Observation()
    clients = bst.client_states(scenario)
    try:
        out = _call(fn, clients)
    except Exception as err:  # a user's function: any failure is a finding, reported with its example
        obs.problems["error"] = f"raised {type(err).__name__}: {err}"
        return obs
    if not isinstance(out, Mapping):
        obs.problems["error"] = f"returned a {type(out).__name__}, not a state_dict (a mapping of str to tensors)"
        return obs
    sent = clients.states[0]
    entries = compat.bn_entries(clients.model)
    for key in out:
        if key not in sent:
            obs.problems.setdefault("key_change", f"returns {key!r}, which no client sent")
    for key, t in sent.items():
        if key not in out:
            if key not in entries:
                obs.problems.setdefault("key_change", f"loses {key!r}, which is not a BN entry")
            continue
        got = out[key]
        if not isinstance(got, (Tensor, np.ndarray)):
            obs.problems.setdefault("key_change", f"returns {key!r} as a {type(got).__name__}, not a tensor")
            continue
        dtype = got.dtype if isinstance(got, Tensor) else torch.from_numpy(np.asarray(got)).dtype
        if tuple(got.shape) != tuple(t.shape):
            obs.problems.setdefault("key_change", f"returns {key!r} with shape {tuple(got.shape)}, sent {tuple(t.shape)}")
        role = entries.get(key, ("", ""))[1]
        if role == "num_batches_tracked" and (dtype.is_floating_point if isinstance(dtype, torch.dtype) else False):
            obs.problems.setdefault("counter_float", f"returns {key!r} as {dtype}, sent as {t.dtype}: "
                                    "the counter was averaged like a weight")
        elif dtype != t.dtype:
            obs.problems.setdefault("dtype_change", f"returns {key!r} as {dtype}, sent as {t.dtype}")
        g = _f64(got)
        if not bool(torch.isfinite(g).all()):
            obs.problems.setdefault("nonfinite", f"returns {key!r} = {_show(g)}")
        if role == "running_var" and bool((g < 0).any()):
            obs.problems.setdefault("negative_variance", f"returns {key!r} = {_show(g)}")
    _classify(obs, out, clients, entries)
    return obs


def _classify(obs: _Observation, out: Mapping, clients: bst.Clients, entries: dict) -> None:
    per_role: dict[str, list[set[str]]] = {}
    layers = sorted({layer for layer, _ in entries.values()})
    for layer in layers:
        prefix = f"{layer}." if layer else ""
        exact_var = None
        if prefix + "running_var" in entries:
            n = [c[layer] for c in clients.counts]
            means = [_f64(s[prefix + "running_mean"]) for s in clients.states]
            uvars = [_f64(s[prefix + "running_var"]) for s in clients.states]
            exact_var = _union_var(means, uvars, n)
        sets = {}
        for role in ROLES:
            key = prefix + role
            if key not in entries:
                continue
            if key not in out:
                sets[role] = {"local"}
                if role == "running_mean":
                    obs.shown.append((key, None, {}))
            else:
                column = [_f64(s[key]) for s in clients.states]
                got = _f64(out[key])
                cands = _candidates(role, column, clients.weights, exact_var)
                sets[role] = {p for p, c in cands.items() if _close(got, c)
                              or role == "num_batches_tracked" and _close(got, c.round())}
                if role in ("running_mean", "running_var"):
                    obs.shown.append((key, got, cands))
                if role == "running_var" and sets[role] & {"average", "equal-average"} and not sets[role] & {"exact"}:
                    short = float(((exact_var - got) / exact_var).max())
                    obs.bias = max(obs.bias or 0.0, short)
            per_role.setdefault(role, []).append(sets[role])
            obs.keys[key] = sets[role]
        if "running_mean" in sets:
            obs.stats[layer] = sets["running_mean"] & sets["running_var"]
    obs.roles = per_role
    fits = [s for s in obs.stats.values()]
    if len(fits) > 1 and all(fits) and not set.intersection(*fits):
        named = "; ".join(f"{layer}: {_label(s)}" for layer, s in obs.stats.items())
        obs.problems["name_selection"] = (f"BN layers of one model are aggregated differently ({named}); "
                                          "select BN entries by layer type (isinstance(m, _BatchNorm)), not by name")


def _label(policies: set[str]) -> str:
    """The policies that fit, most specific first (several when clients coincide, e.g. one client)."""
    return " = ".join(p for p in POLICY_ORDER if p in policies) or "unrecognised"


def _best(policies: set[str]) -> str:
    for p in POLICY_ORDER:
        if p in policies:
            return p
    return "unrecognised"


# -- hypothesis drivers -------------------------------------------------------------------------------
def _settings(examples: int) -> settings:
    return settings(max_examples=int(examples), derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate],
                    print_blob=False)


def _explore(scenario_strategy, examples: int, visit: Callable[[bst.Scenario], None]) -> None:
    @_settings(examples)
    @given(scenario_strategy)
    def run(scenario):
        visit(scenario)

    run()


#: Evaluations of the function one shrink may spend (after them, hypothesis keeps the smallest so far):
#: bounds the check's time deterministically (a time limit would not be).
SHRINK_CALLS = 60


def _shrink(scenario_strategy, condition: Callable[[bst.Scenario], bool], examples: int,
            fallback: bst.Scenario) -> bst.Scenario:
    """The smallest scenario for which ``condition`` holds (hypothesis's shrinking, at most
    :data:`SHRINK_CALLS` evaluations), else ``fallback``."""
    answers: dict[bst.Scenario, bool] = {}  # hypothesis replays its final example: answer it the same

    def bounded(sc: bst.Scenario) -> bool:
        if sc not in answers:
            answers[sc] = len(answers) < SHRINK_CALLS and condition(sc)
        return answers[sc]

    try:
        return find(scenario_strategy, bounded,
                    settings=settings(max_examples=int(examples), derandomize=True, database=None, deadline=None,
                                      suppress_health_check=list(HealthCheck)))
    except (NoSuchExample, Unsatisfiable):
        return fallback


def _scenario_strategy(model: nn.Module | None):
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return bst.scenarios(model)


def _check_examples(examples: int) -> int:
    if not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive int (hypothesis examples to run), got {examples!r}")
    return examples


def check_aggregation(fn: Callable, *, model: nn.Module | None = None, policy: str | None = None,
                      examples: int = 60) -> AggregationReport:
    """Find out what an aggregation function does with BN state, and what goes wrong.

    ``fn(states, weights)`` takes the clients' ``state_dict``\\ s and their weights (numbers of
    examples) and returns the server's ``state_dict``. If it also takes ``counts=``, it is given
    each client's per-layer, per-channel counts (examples times positions), which an exact merge
    needs; if it takes ``model=``, the module the states belong to (to find BN layers by type):
    ``check_aggregation(bnfl.compat.aggregate_state_dicts)`` checks bnfl's own exact merge. Hypothesis draws models with BN layers of any name (``features.3``, ``norm_a``, ``bn1``;
    1-d and 2-d) or uses ``model``'s, and client splits (sizes, offsets, scales, batches); the
    clients' BN state comes from *running* the layers on their data
    (:func:`bnfl.testing.strategies.client_states`). Each BN entry of ``fn``'s result is compared
    with each policy's value, computed in float64 from the clients' states: the exact merge is
    :func:`bnfl.stats.merge` with the unbiased conversions PyTorch's running statistics use (FedTAN
    eqs. 39-40, HBN eq. 8), i.e. the running statistics of the union of the clients' data.

    Parameters
    ----------
    fn : callable
        ``fn(states, weights) -> state_dict`` (or ``fn(states, weights, *, counts)``).
    model : nn.Module, optional
        Your architecture: its BN layers (found by type) are used instead of drawn ones; pass it
        when ``fn`` only works for your model.
    policy : str, optional
        Assert this policy of the running statistics (``"exact"``, ``"average"``, ``"first"``,
        ``"local"``, ...) and no problem: else raise :class:`BNSafetyError` with a minimal counterexample.
    examples : int, default 60
        Hypothesis examples (derandomised: the same every run); each problem found is then shrunk.

    Returns
    -------
    AggregationReport
        ``.policy``, ``.problems`` (with counterexamples), ``.roles``, ``.variance_bias``.

    Raises
    ------
    BNSafetyError
        With ``policy=``, if ``fn`` implements another policy or has a problem.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable as fn(states, weights), got {type(fn).__name__}")
    if policy is not None and policy not in POLICY_ORDER:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICY_ORDER)}")
    examples = _check_examples(examples)
    t0 = time.perf_counter()
    strategy = _scenario_strategy(model)
    cache: dict[bst.Scenario, _Observation] = {}

    def observe(sc: bst.Scenario) -> _Observation:
        if sc not in cache:
            cache[sc] = _observe(fn, sc)
        return cache[sc]

    seen: list[tuple[bst.Scenario, _Observation]] = []
    _explore(strategy, examples, lambda sc: seen.append((sc, observe(sc))))
    stats_sets = [s for _, o in seen for s in o.stats.values()]
    role_sets: dict[str, list[set[str]]] = {}
    for _, o in seen:
        for role, sets in o.roles.items():
            role_sets.setdefault(role, []).extend(sets)
    found = _overall(stats_sets, any("name_selection" in o.problems for _, o in seen))
    roles = {r: found if role_sets[r] and all(found in s for s in role_sets[r]) else _overall(role_sets[r], False)
             for r in ROLES if r in role_sets}
    key_sets: dict[str, list[set[str]]] = {}
    for _, o in seen:
        for key, s in o.keys.items():
            key_sets.setdefault(key, []).append(s)
    entries = {k: _overall(v, False) for k, v in key_sets.items()}
    biases = [o.bias for _, o in seen if o.bias is not None]
    problems = []
    for kind in PROBLEM_KINDS:
        first = next((sc for sc, o in seen if kind in o.problems), None)
        if first is None:
            continue
        small = _shrink(strategy, lambda sc, kind=kind: kind in observe(sc).problems, examples, first)
        obs = observe(small)
        problems.append(Problem(kind, obs.problems.get(kind, PROBLEM_KINDS[kind]), _describe(small, obs)))
    report = AggregationReport(policy=found, problems=problems, roles=roles, entries=entries,
                               variance_bias=max(biases) if found in ("average", "equal-average") and biases else None,
                               examples=len(seen), seconds=0.0)
    if policy is not None and (found != policy or problems):
        if found != policy:
            first = next((sc for sc, o in seen if any(policy not in s for s in o.stats.values())), seen[0][0])
            small = _shrink(strategy, lambda sc: any(policy not in s for s in observe(sc).stats.values()),
                            examples, first)
            obs = observe(small)
            layers = ", ".join(f"{layer}: {_label(s)}" for layer, s in obs.stats.items())
            message = (f"expected BN statistics aggregated with policy {policy!r}, found {found!r} "
                       f"({layers})\ncounterexample:\n{_describe(small, obs)}")
        else:
            message = f"policy {policy!r} holds"
        if problems:
            message += f"\n{len(problems)} problem(s):\n" + "\n".join(map(str, problems))
        report.seconds = time.perf_counter() - t0
        raise BNSafetyError(message, report)
    report.seconds = time.perf_counter() - t0
    return report


def _overall(sets: list[set[str]], named: bool) -> str:
    if not sets:
        return "unrecognised"
    common = set.intersection(*sets)
    if common:
        return _best(common)
    return "mixed" if named or all(sets) else "unrecognised"


def _describe(scenario: bst.Scenario, obs: _Observation) -> str:
    return "\n".join([str(scenario), *obs.details()])
