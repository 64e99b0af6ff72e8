"""How this process was started: by ``torchrun`` (one rank of a torch.distributed job) or not.

:func:`bnfl.train.builder.resolve_engine` picks the torch.distributed engine from it and
:mod:`bnfl.fl.distributed` joins the job's process group; this module imports nothing of bnfl.
"""

from __future__ import annotations

import os

__all__ = ["in_torchrun"]


def in_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (its ``WORLD_SIZE``/``RANK`` are set)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ and "MASTER_ADDR" in os.environ
