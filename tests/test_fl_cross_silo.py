"""Cross-silo on torch.distributed: 3 gloo ranks on 127.0.0.1, each reading only its own silo
folder, equal the one-process simulator on the union of the silos (float64, bit for bit)."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bnfl import models
from bnfl.data import load
from bnfl.data import partition as P
from bnfl.fl import FederatedData, Simulation, TrainConfig
from bnfl.methods import get
from bnfl.train.cross_silo import Silo, build_cross_silo, load_silo, save_silo

METHODS = ["fedtan", "fedbn", "hbn", "fedavg+bn"]
SEED = 3


def _cfg(method: str) -> dict:
    return {"method": method, "seed": SEED, "rounds": 2, "model": {"name": "q_mlp_bn"},
            "train": {"local_steps": 2, "batch_size": 16, "lr": 0.05, "momentum": 0.9, "dtype": "float64",
                      "progress": False}}


def _write_silos(root) -> list[Silo]:
    """Digits, 5 label-skewed clients (2 classes each) in 3 silos of 2, 2 and 1 clients; every silo
    gets the same test set."""
    split = load("digits", form="flat")
    parts = P.classes_per_client(split.y_train.numpy(), 2, 5, SEED)
    silos = []
    for r, members in enumerate(([0, 1], [2, 3], [4])):
        idx = np.concatenate([parts[c] for c in members])
        sizes = np.cumsum([0] + [len(parts[c]) for c in members])
        clients = [np.arange(sizes[j], sizes[j + 1]) for j in range(len(members))]
        silo = Silo(split.x_train[idx], split.y_train[idx], split.x_test, split.y_test, clients)
        save_silo(root / f"rank{r}", silo)
        silos.append(silo)
    return silos


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, root: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for m in METHODS:
            # the loader is called with this rank only: no other silo's folder is ever opened
            sim = build_cross_silo(_cfg(m), lambda r: load_silo(f"{root}/rank{r}"))
            hist = sim.run()
            state = sim.state_dict()  # collective: every client's local state
            held: list = [None] * world  # (rows held, rows with a real id, this silo's samples)
            n_silo = load_silo(f"{root}/rank{rank}").x_train.shape[0]
            dist.all_gather_object(held, (sim.x_train.shape[0], int((sim.sample_rows >= 0).sum()), n_silo))
            results[m] = {"global": sim.global_state, "local": state["client_local"], "rows": hist.without_time(),
                          "counters": sim.channel.counters(), "meta": hist.meta, "held": held, "blocks": sim.clients.blocks}
        # a rank whose evaluation set differs is refused on every rank, naming it
        silo = load_silo(f"{root}/rank{rank}")
        if rank == 2:
            silo = Silo(silo.x_train, silo.y_train, silo.x_test[:-1], silo.y_test[:-1], silo.clients)
        try:
            build_cross_silo(_cfg("fedavg+bn"), silo)
            results["mismatch"] = None
        except ValueError as err:
            results["mismatch"] = str(err)
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def silos_and_ranks(tmp_path_factory):
    root = tmp_path_factory.mktemp("silos")
    silos = _write_silos(root)
    out = str(root / "result.pt")
    ctx = mp.start_processes(_worker, args=(3, _free_port(), str(root), out), nprocs=3, join=False,
                             start_method="spawn")
    try:
        while not ctx.join(timeout=120):
            pass
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return silos, torch.load(out, weights_only=False)


def _union_simulation(method: str, silos: list[Silo]) -> Simulation:
    """The simulator on the union: silos concatenated in rank order, client ids shifted."""
    offsets = np.cumsum([0] + [s.x_train.shape[0] for s in silos])
    clients = [offsets[r] + c for r, s in enumerate(silos) for c in s.clients]
    data = FederatedData(torch.cat([s.x_train for s in silos]), torch.cat([s.y_train for s in silos]),
                         silos[0].x_test, silos[0].y_test, clients)
    cfg = _cfg(method)
    torch.manual_seed(SEED)
    model = models.build_for("q_mlp_bn", (64,), num_classes=10, norm=get(method).norm)
    tc = TrainConfig(rounds=cfg["rounds"], seed=SEED, **cfg["train"])
    return Simulation(model, data, get(method).algorithm(), tc)


def test_three_silos_equal_the_simulator_on_their_union(silos_and_ranks):
    silos, got = silos_and_ranks
    sizes = [s.x_train.shape[0] for s in silos]
    for m in METHODS:
        d = got[m]
        assert d["meta"]["mode"] == "cross-silo" and d["meta"]["world_size"] == 3, m
        assert d["blocks"] == [[0, 1], [2, 3], [4]], m
        # each rank holds exactly its own silo's samples and maps no id to another silo's row
        assert [h[0] for h in d["held"]] == [h[1] for h in d["held"]] == [h[2] for h in d["held"]] == sizes, m
        sim = _union_simulation(m, silos)
        hist = sim.run()
        assert d["counters"] == sim.channel.counters(), m
        for k, v in sim.global_state.items():
            torch.testing.assert_close(d["global"][k], v, rtol=0, atol=1e-12, msg=f"{m} {k}")
        assert sorted(d["local"]) == sorted(sim.client_local), m
        for c, s in sim.client_local.items():
            for k, v in s.items():
                torch.testing.assert_close(d["local"][c][k], v, rtol=0, atol=1e-12, msg=f"{m} client {c} {k}")
        rows = hist.without_time()
        assert len(d["rows"]) == len(rows) >= 2, m  # HBN adds its statistics-only round T+1
        for a, b in zip(d["rows"], rows, strict=True):
            assert a.keys() == b.keys(), m
            for key in a:
                if isinstance(b[key], float):
                    assert a[key] == pytest.approx(b[key], abs=1e-12), (m, key)
                else:
                    assert a[key] == b[key], (m, key)


def test_a_silo_with_another_evaluation_set_is_refused(silos_and_ranks):
    _, got = silos_and_ranks
    assert got["mismatch"] is not None and "rank 2's evaluation set differs" in got["mismatch"]


def test_silo_files_round_trip_and_bad_silos_are_named(tmp_path):
    x = torch.randn(6, 3)
    y = torch.arange(6) % 2
    silo = Silo(x, y, x[:2], y[:2], [np.array([0, 2, 4]), np.array([1, 3, 5])])
    back = load_silo(save_silo(tmp_path / "s", silo))
    assert torch.equal(back.x_train, x) and torch.equal(back.y_train, y)
    assert [c.tolist() for c in back.clients] == [[0, 2, 4], [1, 3, 5]]
    assert [c.tolist() for c in Silo(x, y, x, y).clients] == [list(range(6))]  # default: one client
    with pytest.raises(FileNotFoundError, match="test.npz is missing"):
        (tmp_path / "s" / "test.npz").unlink()
        load_silo(tmp_path / "s")
    with pytest.raises(ValueError, match="client 1 has 0 samples"):
        Silo(x, y, x, y, [np.arange(6), np.array([], dtype=np.int64)])
    with pytest.raises(ValueError, match="6 training samples but 5 labels"):
        Silo(x, y[:5], x, y)
    with pytest.raises(RuntimeError, match="needs a process group"):
        build_cross_silo(_cfg("fedbn"), silo)


def test_command_line_runs_one_silo_per_rank(tmp_path):
    """``python -m bnfl.train.cross_silo`` as torchrun starts it (here one rank, from the torchrun
    environment variables): reads the rank's folder, writes the history with mode cross-silo."""
    import json
    import subprocess
    import sys

    x = torch.randn(40, 64)
    y = torch.arange(40) % 10
    save_silo(tmp_path / "rank0", Silo(x, y, x[:10], y[:10], [np.arange(20), np.arange(20, 40)]))
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "fedbn"\nrounds = 2\n[model]\nname = "q_mlp_bn"\n'
                   '[train]\nlocal_steps = 1\nbatch_size = 8\nprogress = false\n')
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "bnfl.train.cross_silo", "--config", str(cfg), "--silo-root",
                           str(tmp_path / "rank{rank}"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cross-silo on 1 ranks: 2 rounds" in proc.stdout
    hist = json.loads((tmp_path / "out" / "history.json").read_text())
    assert hist["meta"]["mode"] == "cross-silo" and hist["meta"]["client_sizes"] == [20, 20]
