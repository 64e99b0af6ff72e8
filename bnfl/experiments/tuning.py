"""Fair learning rates: every method a claim compares tuned the same way before it is compared.

A claim that compares methods (FixBN against GN, maintained momentum against restarted momentum)
says nothing about the methods when one of them trains at a rate that suits the other. Here each
method's rate is chosen on a validation split held out of the training set (the test set is not
seen), over the same grid, with the same seeds and the same budget as every other method of the
claim, in exactly the setting of the compared runs; the rates go into the entry's result.

The grid trains as one lock-step computation per method (:func:`bnfl.experiments.training.train_grid`:
rates x seeds as rows of one batched network with a learning rate per row), so a grid of five
rates costs little more than one run of them.

A best rate at the grid's edge says only that the best may lie beyond it. The grid then grows
outward, one rate at a time at the grid's own spacing there (after 0.5 and 1 comes 2), until the best
is inside it or :data:`EXTEND` rates were added: the same rule for every method of a claim. A smoke
profile's table says ``"extend": 0`` (:data:`SMOKE_TUNE`): its two-rate grids only check that an entry
runs, and a two-rate grid's best is always an edge. An added rate trains as a group of its own, so the given grid's runs and scores are the same with or without
the extension.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bnfl.experiments.core import Context, deep_merge
from bnfl.experiments.curves import train_runs
from bnfl.experiments.training import final, train_grid

__all__ = ["EDGE_RULE", "EXTEND", "SMOKE_TUNE", "TUNE_SEEDS", "VALIDATION", "Tuned", "tune_rate", "tuned_runs"]

#: Seeds of a rate choice (trained in lock-step with the grid's rates).
TUNE_SEEDS = (0, 1, 2)
#: Fraction of the training set held out as the validation split of a rate choice.
VALIDATION = 0.2
#: Rates a rate choice may add past the grid's edge while its best rate is that edge (module docstring).
EXTEND = 2
#: The extension in words, for an entry's notes.
EDGE_RULE = f"a best rate at the grid's edge grows the grid past it at the grid's spacing, by up to {EXTEND} rates"
#: What a smoke profile's ``tune`` table adds to its two-rate grid: one seed, the grid kept as given.
SMOKE_TUNE = {"seeds": [0], "extend": 0}


@dataclass(frozen=True)
class Tuned:
    """A tuned learning rate.

    Attributes
    ----------
    rate : float
        The grid rate with the best mean validation accuracy (ties: the larger rate; a rate that
        diverged on any seed never wins).
    scores : dict
        ``{rate: mean validation score}`` (by default accuracy, %); ``-inf`` where a seed diverged.
    seeds : tuple of int
    validation : float
    added : tuple of float
        The rates added past the given grid's edge (module docstring), in the order they trained.
    """

    rate: float
    scores: dict[float, float]
    seeds: tuple[int, ...]
    validation: float
    added: tuple[float, ...] = ()

    @property
    def at_edge(self) -> bool:
        """The chosen rate is the grid's smallest or largest, the added rates included (the best may lie
        outside it)."""
        return self.rate in (min(self.scores), max(self.scores))

    def describe(self) -> str:
        """``"lr 0.1 (validation 93.2; grid 0.02: 90.1, ...)"``."""
        grid = ", ".join(f"{lr:g}: {'diverged' if not math.isfinite(v) else f'{v:.1f}'}"
                         for lr, v in sorted(self.scores.items()))
        added = f"; {', '.join(f'{lr:g}' for lr in self.added)} added past the edge" if self.added else ""
        return f"lr {self.rate:g} (validation {self.scores[self.rate]:.1f}; grid {grid}{added})"


def tune_rate(ctx: Context, spec: Mapping[str, Any], grid: Sequence[float], *,
              seeds: Sequence[int] = TUNE_SEEDS, validation: float = VALIDATION,
              score: Callable[[Mapping[str, Any]], float] = final, extend: int = EXTEND) -> Tuned:
    """The learning rate of ``spec`` (a run spec, method included) from ``grid``, chosen on a
    validation split: ``validation`` of the training set held out (:func:`bnfl.data.validation_split`),
    the mean of ``score`` over ``seeds`` (module docstring).

    Parameters
    ----------
    ctx : Context
    spec : mapping
        The run spec of the compared runs, method included; its rate is replaced by the grid's.
    grid : sequence of float
        The learning rates tried.
    seeds : sequence of int, default :data:`TUNE_SEEDS`
    validation : float, default :data:`VALIDATION`
        Fraction of the training set held out; the runs' test set is that held-out part.
    score : callable, default :func:`bnfl.experiments.training.final`
        A run summary -> its validation score (higher is better; NaN: the run diverged). The
        default is the final ``test_acc``: the global model on the whole validation split, or for
        a personalised method the mean over clients of each client's model on the whole split.
        A claim that judges another number tunes on that one, e.g.
        :func:`bnfl.experiments.training.mean_over_clients` (each client on its own domain, FedBN's
        protocol).
    extend : int, default :data:`EXTEND`
        At most this many rates added past the edge while the best rate is the grid's smallest or
        largest (module docstring); 0 keeps the grid as given (the smoke profiles, :data:`SMOKE_TUNE`).

    Raises
    ------
    ValueError
        An empty grid, a validation fraction outside (0, 1), or ``extend`` not an integer >= 0.
    RuntimeError
        Every rate of the grid diverged on some seed.
    """
    if not grid:
        raise ValueError("tune_rate: the grid is empty; give at least one learning rate")
    if not 0 < float(validation) < 1:
        raise ValueError(f"tune_rate: validation must be a fraction in (0, 1), got {validation}")
    held = deep_merge(spec, {"data": {"validation": float(validation)}})
    sctx = dataclasses.replace(ctx, seeds=[int(s) for s in seeds])
    if int(extend) != extend or extend < 0:
        raise ValueError(f"tune_rate: extend must be an integer >= 0, got {extend!r}")

    def scored(rates: Sequence[float]) -> dict[float, float]:
        out = {}
        for lr, rs in train_grid(sctx, held, rates).items():
            accs = [float(score(r)) for r in rs]
            out[lr] = float(np.mean(accs)) if all(math.isfinite(a) for a in accs) else -math.inf
        return out

    scores, added = scored(grid), []
    best = _best(scores)
    while len(added) < extend and (beyond := _beyond(scores, best)) is not None:
        added.append(beyond)
        scores |= scored([beyond])
        best = _best(scores)
    return Tuned(best, scores, tuple(int(s) for s in seeds), float(validation), tuple(added))


def _best(scores: Mapping[float, float]) -> float:
    """The rate with the best finite score (ties: the larger rate)."""
    finite = [lr for lr, v in scores.items() if math.isfinite(v)]
    if not finite:
        raise RuntimeError(f"tune_rate: every learning rate of the grid {sorted(scores)} diverged on some seed")
    return max(finite, key=lambda lr: (scores[lr], lr))


def _beyond(scores: Mapping[float, float], best: float) -> float | None:
    """The next rate past the edge ``best`` lies on, at the grid's spacing there (the edge's ratio to
    its neighbour); ``None`` when ``best`` is inside the grid or the grid has one rate."""
    rates = sorted(scores)
    if len(rates) < 2 or best not in (rates[0], rates[-1]):
        return None
    edge, neighbour = (rates[-1], rates[-2]) if best == rates[-1] else (rates[0], rates[1])
    return float(f"{edge * edge / neighbour:.6g}")


def tuned_runs(ctx: Context, spec: Mapping[str, Any], tune: Mapping[str, Any], *,
               train: Callable[[Context, Mapping[str, Any]], list[dict[str, Any]]] | None = None,
               score: Callable[[Mapping[str, Any]], float] = final) -> tuple[Tuned, list[dict[str, Any]]]:
    """``spec``'s rate tuned by :func:`tune_rate` from an entry's ``tune`` table (``grid``, and
    ``seeds`` / ``validation`` / ``extend`` where the table gives them), then ``spec`` trained at that rate over
    the context's seeds by ``train`` (default :func:`bnfl.experiments.curves.train_runs`): the rate
    and the runs, the one way every fair comparison of methods gets them."""
    train = train or train_runs
    rate = tune_rate(ctx, spec, tune["grid"], score=score,
                     **{k: tune[k] for k in ("seeds", "validation", "extend") if k in tune})
    return rate, train(ctx, deep_merge(spec, {"train": {"lr": rate.rate}}))
