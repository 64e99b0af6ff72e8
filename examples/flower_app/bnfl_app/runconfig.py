"""The :class:`bnfl.fl.flower.FlowerSetup` both apps build from the run config (``config-file``).

Every process of the federation (the ServerApp's, each node's) builds the same setup from the
same TOML: data, the partition (seeded once, by ``seed``/``partition.seed``), model and algorithm
come from bnfl's one builder, so every node holds its client's part of the same partition (the
server checks each node's samples by CRC).
"""

from __future__ import annotations

import functools
from pathlib import Path

from flwr.app import Context

from bnfl.fl.flower import FlowerSetup
from bnfl.train.config import setup_from_config

HERE = Path(__file__).parent


@functools.lru_cache(maxsize=4)
def _setup(config_file: str, out: str) -> FlowerSetup:
    path = Path(config_file).expanduser()
    if not path.is_absolute():
        path = HERE / path
    options = {"out": out} if out else {}
    return setup_from_config(path, **options)


def setup(context: Context) -> FlowerSetup:
    """The run's setup from ``context.run_config`` (built once per process)."""
    cfg = context.run_config
    return _setup(str(cfg.get("config-file", "run.toml")), str(cfg.get("out", "")))
