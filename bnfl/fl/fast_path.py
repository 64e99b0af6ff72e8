"""Which engine code runs: the fast path (default) or today's reference code (issue 48).

The fast path cuts Python around torch's operators (the server's aggregation, the epochs' batch
cuts, a client's state load, the lock-step hand-over) with results bitwise equal to the reference
on one machine (``tests/test_fl_fast_path.py``). ``reference`` keeps the code as it was, for
``benchmarks/bench_quick.py`` to time both in one process and for checking the fast path.

``use("reference")`` (a context manager) or ``BNFL_ENGINE=reference`` in the environment selects
the reference.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase

__all__ = ["ENGINES", "enabled", "load_state", "use"]

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


_SLOTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its state's slots, or None
_PLAIN_LOADS = {nn.Module._load_from_state_dict, _NormBase._load_from_state_dict}


def _slots(model: nn.Module) -> tuple[frozenset, list[tuple[dict, str, str]]] | None:
    """Where the model's state tensors live (each module's ``_parameters``/``_buffers`` dict,
    attribute, state key), when ``load_state_dict`` of a full state is only copies into them: no
    module with its own ``_load_from_state_dict`` or a load hook, no non-persistent buffer."""
    slots = []
    for name, m in model.named_modules():
        if (type(m)._load_from_state_dict not in _PLAIN_LOADS or m._load_state_dict_pre_hooks
                or m._load_state_dict_post_hooks or m._non_persistent_buffers_set or m._state_dict_hooks
                or m._state_dict_pre_hooks):
            return None
        pre = f"{name}." if name else ""
        slots += [(m._parameters, n, pre + n) for n, v in m._parameters.items() if v is not None]
        slots += [(m._buffers, n, pre + n) for n, v in m._buffers.items() if v is not None]
    keys = [key for _, _, key in slots]
    if len(set(keys)) != len(keys):  # a shared module: state_dict lists it once
        return None
    return frozenset(keys), slots


def load_state(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """``model.load_state_dict(state)``; on the fast path, a full state of a plain model (every
    key, the same shapes and dtypes) is one ``_foreach_copy_`` into its tensors: the same copies
    that ``load_state_dict`` makes one by one, without its per-module Python."""
    if enabled():
        if model not in _SLOTS:
            _SLOTS[model] = _slots(model)
        got = _SLOTS[model]
        if got is not None and state.keys() == got[0]:
            dests = [where.get(attr) for where, attr, _ in got[1]]
            srcs = [state[key] for _, _, key in got[1]]
            if all(d is not None and d.shape == t.shape and d.dtype == t.dtype and d.device == t.device
                   for d, t in zip(dests, srcs, strict=True)):
                with torch.no_grad():
                    torch._foreach_copy_(dests, srcs)
                return
    model.load_state_dict(state)
