"""The analysis behind :func:`bnfl.testing.check_server_step`: a server optimiser run over a few
rounds on hypothesis' scenarios (the drivers of :mod:`bnfl.testing._check`), watching BN's variance."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bnfl.testing import strategies as bst
from bnfl.testing._check import (
    BNSafetyError,
    Problem,
    _call,
    _check_examples,
    _explore,
    _f64,
    _scenario_strategy,
    _show,
    _shrink,
)

__all__ = ["ServerStepReport", "check_server_step"]


# -- server optimisers ----------------------------------------------------------------------------------
@dataclass
class ServerStepReport:
    """What :func:`check_server_step` found.

    Attributes
    ----------
    broken_round : int or None
        The first round (1-based) at which a ``running_var`` of the server's state went negative or
        non-finite, on the minimal counterexample; ``None`` if it never did in ``rounds`` rounds.
    problems : list of Problem
        ``negative_variance``, ``nonfinite`` or ``error``, each with its minimal counterexample.
    rounds, examples : int
        Rounds simulated per example, hypothesis examples run.
    seconds : float
    """

    broken_round: int | None
    problems: list[Problem]
    rounds: int
    examples: int
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No variance broke in any example."""
        return self.broken_round is None and not self.problems

    def __str__(self) -> str:
        head = (f"variance broke at round {self.broken_round}" if self.broken_round is not None
                else f"variance positive and finite over {self.rounds} rounds")
        lines = [head, f"problems: {len(self.problems) or 'none'}", *map(str, self.problems),
                 f"({self.examples} examples, {self.seconds:.1f} s)"]
        return "\n".join(lines)


def _simulate(make_step: Callable, scenario: bst.Scenario, rounds: int) -> tuple[int | None, str, str]:
    """Run ``rounds`` rounds: (first broken round or None, problem kind, message)."""
    clients = bst.client_states(scenario)
    model = clients.model
    modules = dict(model.named_modules())
    gen = torch.Generator().manual_seed(scenario.seed + 1)
    data = [{spec.name: bst.client_batch(client, spec, gen, bst.state_dtype(clients.states[0], spec))
             for spec in scenario.layers} for client in scenario.clients]  # per client, per layer: (N, C, *)
    step = make_step()
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for r in range(1, rounds + 1):
        states = []
        for client, row in zip(scenario.clients, data, strict=True):
            state = {k: (v + 0.01 * torch.randn(v.shape, generator=gen, dtype=v.dtype)
                         if v.is_floating_point() else v.clone()) for k, v in global_state.items()}
            for spec in scenario.layers:
                prefix, layer = f"{spec.name}.", modules[spec.name]
                if prefix + "running_mean" not in state:
                    continue
                mean, var, seen = bst.run_statistics(
                    row[spec.name], batches=client.batches, eps=layer.eps, momentum=layer.momentum,
                    mean=global_state[prefix + "running_mean"], var=global_state[prefix + "running_var"],
                    seen=global_state.get(prefix + "num_batches_tracked"))
                state[prefix + "running_mean"], state[prefix + "running_var"] = mean, var
                if prefix + "num_batches_tracked" in state:
                    state[prefix + "num_batches_tracked"] = seen
            states.append(state)
        try:
            new = _call(step, clients, {k: v.clone() for k, v in global_state.items()}, states=states)
        except Exception as err:  # a user's step: any failure is a finding
            return r, "error", f"round {r}: raised {type(err).__name__}: {err}"
        for spec in scenario.layers:
            key = f"{spec.name}.running_var"
            if key not in new:
                continue
            v = _f64(new[key])
            if not bool(torch.isfinite(v).all()):
                return r, "nonfinite", f"round {r}: {key} = {_show(v)}"
            if bool((v < 0).any()):
                return r, "negative_variance", f"round {r}: {key} = {_show(v)}"
        global_state = {k: torch.as_tensor(new.get(k, global_state[k])).detach().clone() for k in global_state}
    return None, "", ""


def check_server_step(make_step: Callable[[], Callable], *, model: nn.Module | None = None, rounds: int = 20,
                      examples: int = 12, require_safe: bool = False) -> ServerStepReport:
    """Run a server step (FedAdam, FedYogi, FedOpt, ...) over many rounds and find where BN variance breaks.

    Each example draws a model and a client split (:mod:`bnfl.testing.strategies`); every round the
    clients load the server's state, run their BN layers in training mode on their fixed data (the
    running statistics move by the layers' momentum from the server's values, as in local
    training) and move their other entries a little; then ``step(global_state, states, weights)``
    gives the new server state. A ``running_var`` that goes negative or non-finite breaks the run;
    the smallest breaking example is found by shrinking and its round reported.

    Parameters
    ----------
    make_step : callable
        ``make_step()`` returns a fresh server step ``step(global_state, states, weights) ->
        state_dict`` (the optimiser's moments start empty for each example); like
        :func:`check_aggregation`'s ``fn`` it is also given ``counts=`` and ``model=`` if it takes them.
    model : nn.Module, optional
        Your architecture (its BN layers by type); default: drawn layers.
    rounds : int, default 20
    examples : int, default 12
    require_safe : bool, default False
        Raise :class:`BNSafetyError` (with the counterexample) if the variance breaks.
    """
    if not callable(make_step):
        raise TypeError(f"make_step must be a callable returning a fresh step, got {type(make_step).__name__}")
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    examples = _check_examples(examples)
    t0 = time.perf_counter()
    strategy = _scenario_strategy(model)
    seen = []
    _explore(strategy, examples, lambda sc: seen.append((sc, _simulate(make_step, sc, rounds))))
    broken = [(sc, res) for sc, res in seen if res[0] is not None]
    problems, first_round = [], None
    if broken:
        small = _shrink(strategy, lambda sc: _simulate(make_step, sc, rounds)[0] is not None, examples, broken[0][0])
        r, kind, message = _simulate(make_step, small, rounds)
        first_round = r
        problems.append(Problem(kind, message, str(small)))
    report = ServerStepReport(broken_round=first_round, problems=problems, rounds=rounds, examples=len(seen))
    report.seconds = time.perf_counter() - t0
    if require_safe and not report.ok:
        raise BNSafetyError(f"BN variance breaks under this server step:\n{report}", report)
    return report
