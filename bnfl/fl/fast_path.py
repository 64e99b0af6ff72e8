"""Which engine code runs: the fast path (default) or today's reference code (issue 48).

The fast path cuts Python around torch's operators (server-side aggregation, per-round
bookkeeping, the lock-step hand-over, evaluation) with results bitwise equal to the reference
on one machine (``tests/test_fl_fast_path.py``). ``reference`` keeps the code as it was, for
``benchmarks/bench_quick.py`` to time both in one process and for checking the fast path.

``use("reference")`` (a context manager) or ``BNFL_ENGINE=reference`` in the environment selects
the reference.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ENGINES", "enabled", "use"]

#: the selectable engines
ENGINES = ("reference", "fast")

_state = {"engine": os.environ.get("BNFL_ENGINE", "fast")}
if _state["engine"] not in ENGINES:
    raise ValueError(f"BNFL_ENGINE={_state['engine']!r} is not an engine; set it to one of {ENGINES}")


def enabled() -> bool:
    """Whether the fast path runs."""
    return _state["engine"] == "fast"


@contextmanager
def use(engine: str) -> Iterator[None]:
    """Run the block on ``engine`` (``"reference"`` or ``"fast"``)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {ENGINES}; pick one of them")
    before = _state["engine"]
    _state["engine"] = engine
    try:
        yield
    finally:
        _state["engine"] = before
