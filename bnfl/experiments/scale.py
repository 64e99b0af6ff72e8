"""The one knob that shrinks a configuration's scale and nothing else (tests of the paper profile).

A test that runs the paper profile on tiny fake files cannot afford 500 rounds over 100 clients,
but it must still run what the paper runs: the same data sets, models, pretrained weights, methods,
columns, partitions, batch sizes and learning rates. :func:`shrink` caps only the keys of
:data:`SCALE_KEYS` wherever they appear in the configuration (every run spec, grid base and
protocol), and the seeds are cut by ``bnfl.experiments.run(..., seeds=1)``; the number of
images is that of the fake files. :func:`scale_changes` lists what a shrink changed, so a test
can assert that it is scale alone::

    >>> from bnfl import experiments as E
    >>> from bnfl.experiments.scale import scale_changes, shrink
    >>> paper = E.get("hbn-tab1").config("paper")
    >>> small = shrink(paper, rounds=1, clients=4)
    >>> sorted({path[-1] for path in scale_changes(paper, small)})
    ['eval_every', 'eval_last', 'num_clients', 'rounds']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SCALE_KEYS", "scale_changes", "shrink"]

#: The keys :func:`shrink` may change: rounds (and the evaluation cadence within them) and clients.
SCALE_KEYS: frozenset[str] = frozenset({"rounds", "eval_every", "eval_last", "num_clients"})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def shrink(config: Mapping[str, Any], *, rounds: int = 1, clients: int = 4) -> dict[str, Any]:
    """A copy of ``config`` with every ``rounds`` capped at ``rounds``, every partition's
    ``num_clients`` at ``clients``, and ``eval_every`` / ``eval_last`` at ``rounds`` (so the
    shrunken run still evaluates); every other value is unchanged.

    Parameters
    ----------
    config : mapping
        An entry's resolved configuration (``bnfl.experiments.get(id).config(profile)``).
    rounds : int, default 1
    clients : int, default 4
        At least 2 (a federation).
    """
    if not _is_int(rounds) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if not _is_int(clients) or clients < 2:
        raise ValueError(f"clients must be an integer >= 2 (a federation), got {clients!r}")
    caps = {"rounds": rounds, "eval_every": rounds, "eval_last": rounds, "num_clients": clients}

    def walk(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: min(x, caps[k]) if k in caps and _is_int(x) else walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return type(v)(walk(x) for x in v)
        return v

    return walk(config)


def scale_changes(before: Any, after: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths (tuples of keys and list indices) where ``after`` differs from ``before``, a path
    ending at the first differing value; a key present in one only is a difference too."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out = []
        for k in list(before) + [k for k in after if k not in before]:
            if k not in before or k not in after:
                out.append((*path, k))
            else:
                out += scale_changes(before[k], after[k], (*path, k))
        return out
    if isinstance(before, list | tuple) and isinstance(after, list | tuple) and len(before) == len(after):
        return [p for i, (a, b) in enumerate(zip(before, after, strict=True)) for p in scale_changes(a, b, (*path, i))]
    return [] if before == after else [path]
