"""What bnfl.fl exports for users who run engines themselves (issue 26)."""

from __future__ import annotations

import socket

import pytest
import torch.distributed as dist

from bnfl import fl


def test_distributed_simulation_and_init_from_env_are_exported():
    from bnfl.fl.distributed import DistributedSimulation, init_from_env

    assert fl.DistributedSimulation is DistributedSimulation and fl.init_from_env is init_from_env
    assert {"DistributedSimulation", "init_from_env"} <= set(fl.__all__)


def test_init_from_env_takes_rank_and_world_size(monkeypatch):
    with pytest.raises(ValueError, match="give both rank and world_size or neither"):
        fl.init_from_env(rank=0)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size\)"):
        fl.init_from_env(rank=2, world_size=2)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    fl.init_from_env(rank=0, world_size=1, timeout_s=30)  # no RANK/WORLD_SIZE in the environment
    try:
        assert dist.get_rank() == 0 and dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()


def test_round_hooks_are_documented():
    doc = fl.Simulation.__doc__
    assert "round_hooks" in doc and "hook(sim, r)" in doc
