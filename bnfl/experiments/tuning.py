"""Fair learning rates: every method a claim compares tuned the same way before it is compared.

A claim that compares methods (FixBN against GN, maintained momentum against restarted momentum)
says nothing about the methods when one of them trains at a rate that suits the other. Here each
method's rate is chosen on a validation split held out of the training set (the test set is not
seen), over the same grid, with the same seeds and the same budget as every other method of the
claim, in exactly the setting of the compared runs; the rates go into the entry's result.

The grid trains as one lock-step computation per method (:func:`bnfl.experiments.training.train_grid`:
rates x seeds as rows of one batched network with a learning rate per row), so a grid of five
rates costs little more than one run of them.
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

__all__ = ["TUNE_SEEDS", "VALIDATION", "Tuned", "tune_rate", "tuned_runs"]

#: Seeds of a rate choice (trained in lock-step with the grid's rates).
TUNE_SEEDS = (0, 1, 2)
#: Fraction of the training set held out as the validation split of a rate choice.
VALIDATION = 0.2


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
    """

    rate: float
    scores: dict[float, float]
    seeds: tuple[int, ...]
    validation: float

    @property
    def at_edge(self) -> bool:
        """The chosen rate is the grid's smallest or largest (the best may lie outside it)."""
        return self.rate in (min(self.scores), max(self.scores))

    def describe(self) -> str:
        """``"lr 0.1 (validation 93.2; grid 0.02: 90.1, ...)"``."""
        grid = ", ".join(f"{lr:g}: {'diverged' if not math.isfinite(v) else f'{v:.1f}'}"
                         for lr, v in sorted(self.scores.items()))
        return f"lr {self.rate:g} (validation {self.scores[self.rate]:.1f}; grid {grid})"


def tune_rate(ctx: Context, spec: Mapping[str, Any], grid: Sequence[float], *,
              seeds: Sequence[int] = TUNE_SEEDS, validation: float = VALIDATION,
              score: Callable[[Mapping[str, Any]], float] = final) -> Tuned:
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

    Raises
    ------
    ValueError
        An empty grid, or a validation fraction outside (0, 1).
    RuntimeError
        Every rate of the grid diverged on some seed.
    """
    if not grid:
        raise ValueError("tune_rate: the grid is empty; give at least one learning rate")
    if not 0 < float(validation) < 1:
        raise ValueError(f"tune_rate: validation must be a fraction in (0, 1), got {validation}")
    held = deep_merge(spec, {"data": {"validation": float(validation)}})
    sctx = dataclasses.replace(ctx, seeds=[int(s) for s in seeds])
    runs = train_grid(sctx, held, grid)
    scores = {}
    for lr, rs in runs.items():
        accs = [float(score(r)) for r in rs]
        scores[lr] = float(np.mean(accs)) if all(math.isfinite(a) for a in accs) else -math.inf
    finite = [lr for lr, v in scores.items() if math.isfinite(v)]
    if not finite:
        raise RuntimeError(f"tune_rate: every learning rate of the grid {sorted(scores)} diverged on some seed")
    best = max(finite, key=lambda lr: (scores[lr], lr))
    return Tuned(best, scores, tuple(int(s) for s in seeds), float(validation))


def tuned_runs(ctx: Context, spec: Mapping[str, Any], tune: Mapping[str, Any], *,
               train: Callable[[Context, Mapping[str, Any]], list[dict[str, Any]]] | None = None,
               score: Callable[[Mapping[str, Any]], float] = final) -> tuple[Tuned, list[dict[str, Any]]]:
    """``spec``'s rate tuned by :func:`tune_rate` from an entry's ``tune`` table (``grid``, and
    ``seeds`` / ``validation`` where the table gives them), then ``spec`` trained at that rate over
    the context's seeds by ``train`` (default :func:`bnfl.experiments.curves.train_runs`): the rate
    and the runs, the one way every fair comparison of methods gets them."""
    train = train or train_runs
    rate = tune_rate(ctx, spec, tune["grid"], score=score, **{k: tune[k] for k in ("seeds", "validation") if k in tune})
    return rate, train(ctx, deep_merge(spec, {"train": {"lr": rate.rate}}))
