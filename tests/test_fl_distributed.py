"""The torch.distributed backend equals the simulator (gloo on 127.0.0.1, 3 ranks, 5 clients 2+2+1)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bnfl.fl import build
from bnfl.fl.distributed import DistributedSimulation, client_blocks

METHODS = ["fedtan", "fedavg+bn", "fedbn", "hbn", "fixbn"]
#: FedTAN with 2 of 5 clients a round: some rounds leave a rank without a participant, and
#: that rank still joins every coupled-BN all-reduce (with zeros)
PARTIAL = "fedtan@participation=0.4"
#: also in the float64 equality: per-client algorithm state on the ranks (SCAFFOLD's c_i) and a
#: statistics request served by each rank for its own clients (DecoupledBN's recalibration)
MORE = ["scaffold", "decoupled-bn"]
#: the batched engine on each rank over the rank's own participants (none in some rounds), with
#: FedTAN's coupled first step and SCAFFOLD's per-client state: equal to the simulator too
BATCHED = ["fedtan@participation=0.4@batched", "scaffold@batched"]


def _cfg(method: str) -> dict:
    if method.endswith("@batched"):
        cfg = _cfg(method[:-len("@batched")])
        cfg["train"]["batched"] = "on"
        return cfg
    if method.endswith("@float32"):
        cfg = _cfg(method.split("@")[0])
        cfg["train"]["dtype"] = "float32"
        return cfg
    if method == PARTIAL:
        cfg = _cfg("fedtan")
        cfg["train"]["participation"] = 0.4
        return cfg
    return {"method": method, "seed": 3, "rounds": 3,
            "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
            "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 2},
            "train": {"local_steps": 2, "batch_size": 16, "lr": 0.05, "momentum": 0.9,
                      "dtype": "float64", "progress": False, "batched": "off"}}  # the sequential reference


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: float32: the ranks sum in another order (gloo's all-reduce, the coupled-BN exchange split by
#: rank), so states agree to rounding, not bitwise. Measured: the largest |difference| over every
#: global and client-local state tensor of the five methods after 3 rounds is 6.0e-8 (printed by
#: the test); the bound leaves a factor ~17.
F32_ATOL = 1e-6


def _worker(rank: int, world: int, port: int, cfgs: dict[str, dict], out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for m, cfg in cfgs.items():
            ref = build(cfg)
            sim = DistributedSimulation(ref.model, ref.data, ref.algorithm, ref.config)
            hist = sim.run()
            state = sim.state_dict()  # collective: every client's local state
            held: list = [None] * world  # (training samples held, samples of the rank's clients)
            dist.all_gather_object(held, (sim.x_train.shape[0], sum(len(ref.data.clients[c]) for c in sim.clients.owned)))
            results[m] = {"global": sim.global_state, "local": state["client_local"],
                          "rows": hist.without_time(), "counters": sim.channel.counters(),
                          "meta": hist.meta, "held": held}
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def _spawn(world: int, cfgs: dict[str, dict], tmp_path) -> dict:
    out = str(tmp_path / "dist.pt")
    ctx = mp.start_processes(_worker, args=(world, _free_port(), cfgs, out), nprocs=world,
                             join=False, start_method="spawn")
    try:
        while not ctx.join(timeout=120):
            pass
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return torch.load(out, weights_only=False)


def test_client_blocks_and_too_many_ranks():
    assert client_blocks(5, 3) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="4 ranks but only 3 clients"):
        client_blocks(3, 4)


FLOAT64 = [*METHODS, PARTIAL, *MORE, *BATCHED]
FLOAT32 = [f"{m}@float32" for m in METHODS]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Every equality case (float64 and float32) trained by one launch of 3 gloo ranks: a launch
    costs each rank its start-up (Python, torch, bnfl), so the cases share it."""
    return _spawn(3, {m: _cfg(m) for m in [*FLOAT64, *FLOAT32]}, tmp_path_factory.mktemp("ranks"))


def test_three_ranks_equal_the_simulator(ranks):
    got = ranks
    for m in FLOAT64:
        sim = build(_cfg(m.replace("@batched", "")))  # the sequential simulator
        assert got[m]["meta"]["batched"]["used"] is m.endswith("@batched"), m
        hist = sim.run()
        d = got[m]
        assert d["meta"]["engine"] == "torch.distributed" and d["meta"]["world_size"] == 3
        assert d["meta"]["mode"] == "simulation-over-ranks", m  # every rank loaded the whole data set
        # each rank keeps only its own clients' training samples
        assert [h for h, _ in d["held"]] == [n for _, n in d["held"]], (m, d["held"])
        assert sum(h for h, _ in d["held"]) == sum(len(c) for c in sim.data.clients) < sim.x_train.shape[0], m
        assert d["counters"] == sim.channel.counters(), m
        for k, v in sim.global_state.items():
            torch.testing.assert_close(d["global"][k], v, rtol=0, atol=1e-12, msg=f"{m} {k}")
        assert sorted(d["local"]) == sorted(sim.client_local), m
        for c, s in sim.client_local.items():
            for k, v in s.items():
                torch.testing.assert_close(d["local"][c][k], v, rtol=0, atol=1e-12, msg=f"{m} client {c} {k}")
        rows = hist.without_time()
        assert len(d["rows"]) == len(rows), m
        for a, b in zip(d["rows"], rows, strict=True):
            assert a.keys() == b.keys(), m
            for key in a:
                if isinstance(b[key], float):
                    assert a[key] == pytest.approx(b[key], abs=1e-12), (m, key)
                else:
                    assert a[key] == b[key], (m, key)


#: BNFL_DIST_TIMEOUT of the ranks in the "-mid" fault modes (the process group's and the barrier's timeout)
MID_TIMEOUT_S = 3


def _fault_worker(rank: int, world: int, port: int, cfgs: dict[str, dict] | dict, mode: str, out: str) -> None:
    """``mode``: "die" (rank 2 exits after round 1), "hang" (rank 2 sleeps in round 2),
    "die-mid"/"hang-mid" (rank 2 exits/sleeps inside round 1, after its client's local steps and
    before the uploads are gathered; the group made by ``init_from_env`` with
    ``BNFL_DIST_TIMEOUT=MID_TIMEOUT_S``), "stop" (every rank stops after round 2, checkpoint
    kept), "resume" (continue from it). ``cfgs``: one run config, or ``{name: config}`` run one
    after another in the same ranks ("resume" saves ``{name: result}`` to ``out``)."""
    import time

    from bnfl.fl.distributed import TIMEOUT_ENV, init_from_env

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    mid = mode.endswith("-mid")
    if mid:  # the timeouts the code sets, from its one setting
        os.environ[TIMEOUT_ENV] = str(MID_TIMEOUT_S)
        init_from_env(rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    named = {"": cfgs} if "method" in cfgs else cfgs
    results = {}
    t0 = time.perf_counter()
    try:
        for name, cfg in named.items():
            ref = build(cfg)
            sim = DistributedSimulation(ref.model, ref.data, ref.algorithm, ref.config,
                                        **({} if mid else {"barrier_timeout_s": 4}))
            if mid and rank == 2:
                def client_round(r, c, *args, _train=sim.client_round, **kwargs):
                    got = _train(r, c, *args, **kwargs)  # the client's local steps of round r
                    if r == 1:
                        with open(f"{out}.fault", "w") as f:  # when the others start to wait
                            f.write(f"{time.time()}")
                    if r == 1 and mode == "die-mid":
                        os._exit(3)
                    if r == 1 and mode == "hang-mid":
                        time.sleep(60)
                    return got
                sim.client_round = client_round
            if mode in ("die", "hang") and rank == 2:
                def fault(s, r):
                    if r == 1 and mode == "die":
                        os._exit(3)
                    if r == 1 and mode == "hang":
                        time.sleep(60)
                sim.round_hooks.append(fault)
            t0 = time.perf_counter()
            sim.run(resume=mode == "resume", stop_after=2 if mode == "stop" else None)
            results[name] = {"global": sim.global_state, "rows": sim.history.without_time(),
                             "counters": sim.channel.counters()}
        if mode == "resume" and rank == 0:
            torch.save(results if "" not in named else results[""], out)
        dist.destroy_process_group()
    except RuntimeError as err:
        with open(f"{out}.rank{rank}", "w") as f:  # "-mid": the seconds since rank 2's fault
            seconds = time.time() - float(open(f"{out}.fault").read()) if mid else time.perf_counter() - t0
            f.write(f"{seconds:.1f}\n{err}")
        os._exit(4)


def _spawn_fault(cfg: dict, mode: str, out: str, world: int = 3, wait_for=(0, 1, 2)) -> list[int | None]:
    """Run ``_fault_worker`` on ``world`` processes (each left to fail on its own: no
    terminate-the-rest) until the ranks ``wait_for`` end; return the exit codes; every process
    is gone afterwards."""
    import time

    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_fault_worker, args=(r, world, port, cfg, mode, out)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        t0 = time.perf_counter()
        while any(procs[r].is_alive() for r in wait_for) and time.perf_counter() - t0 < 90:
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
    return [p.exitcode for p in procs]


@pytest.mark.parametrize("mode", ["die", "hang"])
def test_a_dead_or_hung_rank_stops_the_others_naming_it(tmp_path, mode):
    out = str(tmp_path / "fault")
    _spawn_fault(_cfg("fedavg+bn") | {"rounds": 4}, mode, out, wait_for=(0, 1))
    for rank in (0, 1):
        seconds, msg = (tmp_path / f"fault.rank{rank}").read_text().split("\n", 1)
        assert float(seconds) < 30, msg
        assert "did not reach round 2" in msg, msg
    msg0 = (tmp_path / "fault.rank0").read_text()
    assert "2" in msg0.split("hung):", 1)[1], msg0  # gloo's monitored barrier names the missing rank


@pytest.mark.parametrize("mode", ["die-mid", "hang-mid"])
def test_a_rank_lost_inside_a_round_stops_the_others_naming_it(tmp_path, mode):
    """Rank 2 dies or hangs after its local training in round 1, while ranks 0 and 1 wait for its
    upload in the gather: both stop within the timeout (3 s, from BNFL_DIST_TIMEOUT through
    init_from_env) plus the probe (3 s) and a margin after rank 2's fault, each naming rank 2."""
    from bnfl.fl.distributed import probe_seconds

    out = str(tmp_path / "fault")
    _spawn_fault(_cfg("fedavg+bn") | {"rounds": 4}, mode, out, wait_for=(0, 1))
    for rank in (0, 1):
        seconds, msg = (tmp_path / f"fault.rank{rank}").read_text().split("\n", 1)
        assert msg.startswith(f"rank {rank}: rank 2 stopped answering in round 1 within {MID_TIMEOUT_S} s"), msg
        assert "missing rank 2;" in msg and "\n" not in msg, msg
        assert float(seconds) < MID_TIMEOUT_S + probe_seconds(MID_TIMEOUT_S) + 4, msg


def test_the_timeout_is_30_s_or_bnfl_dist_timeout(monkeypatch):
    from bnfl.fl.distributed import TIMEOUT_ENV, default_timeout_s, probe_seconds

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert default_timeout_s() == 30.0 and probe_seconds(30.0) == 5.0  # docs/distributed.md: 30 s, plus 5 s
    monkeypatch.setenv(TIMEOUT_ENV, "120")
    assert default_timeout_s() == 120.0
    for bad in ("abc", "0", "-5", "nan", "inf"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=f"^{TIMEOUT_ENV} must be a number of seconds > 0"):
            default_timeout_s()


def test_a_lost_rank_is_one_line_of_bnfl_train_and_other_errors_pass_through(monkeypatch):
    import argparse

    from bnfl.fl.distributed import RankLostError, _is_comm_failure
    from bnfl.train import _cli_guard

    def lost(args):
        raise RankLostError("rank 1: rank 2 stopped answering in round 1 within 30 s (died or hung): missing rank 2",
                            [2])

    with pytest.raises(ValueError, match="^rank 1: rank 2 stopped answering"):
        _cli_guard.guarded(lost, argparse.Namespace(command="train"))
    # gloo's messages (measured) are failures of a collective; an error of the computation is not
    assert _is_comm_failure(RuntimeError("[/x/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [1]:2"))
    assert _is_comm_failure(RuntimeError("Timed out waiting 3000ms for recv operation to complete"))
    assert not _is_comm_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x64 and 32x10)"))


def test_resume_from_checkpoint_equals_an_uninterrupted_run(tmp_path):
    """FedTAN and SCAFFOLD (each rank's clients' c_i are kept) stop after round 2 of 3 with their
    checkpoints, then resume in new ranks (one launch for each step, the two runs in turn)."""
    methods = ["fedtan", "scaffold"]
    cfgs = {m: _cfg(m) | {"out": str(tmp_path / f"ckpt-{m}")} for m in methods}
    out = str(tmp_path / "resumed.pt")
    assert _spawn_fault(cfgs, "stop", out) == [0, 0, 0]
    assert all((tmp_path / f"ckpt-{m}" / "checkpoint.pt").exists() for m in methods)
    assert _spawn_fault(cfgs, "resume", out) == [0, 0, 0]
    resumed = torch.load(out, weights_only=False)
    for m in methods:
        got = resumed[m]
        sim = build(_cfg(m))
        hist = sim.run()
        assert got["counters"] == sim.channel.counters(), m
        for k, v in sim.global_state.items():
            torch.testing.assert_close(got["global"][k], v, rtol=0, atol=1e-12, msg=f"{m} {k}")
        assert [r["round"] for r in got["rows"]] == [r["round"] for r in hist.without_time()], m


def test_more_ranks_than_clients_is_an_error_before_training(tmp_path):
    cfg = _cfg("fedavg+bn")
    cfg["partition"] = {"kind": "classes_per_client", "num_clients": 2, "k": 5}
    codes = _spawn_fault(cfg, "stop", str(tmp_path / "x"))
    assert all(c not in (0, None) for c in codes), codes
    assert not (tmp_path / "x.rank0").exists()  # a ValueError at construction, not a failure in training


def test_engine_is_chosen_from_the_torchrun_environment(monkeypatch):
    from bnfl.train.config import resolve_engine

    for k in ("WORLD_SIZE", "RANK", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    assert resolve_engine("auto") == "simulation"
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert resolve_engine(None) == "distributed"
    assert resolve_engine("simulation") == "simulation"
    assert resolve_engine("flower") == "flower"  # named engines win over the torchrun environment
    with pytest.raises(ValueError, match="engine must be one of"):
        resolve_engine("ray")


def test_three_ranks_in_float32_equal_the_simulator_to_rounding(ranks):
    got = ranks
    worst = 0.0
    for m in FLOAT32:
        sim = build(_cfg(m))
        hist = sim.run()
        d = got[m]
        assert d["counters"] == sim.channel.counters(), m
        states = [(d["global"], sim.global_state)] + [(d["local"][c], s) for c, s in sim.client_local.items()]
        for a, b in states:
            for k, v in b.items():
                if v.is_floating_point():
                    worst = max(worst, float((a[k] - v).abs().max()))
                    torch.testing.assert_close(a[k], v, rtol=0, atol=F32_ATOL, msg=f"{m} {k}")
                else:
                    assert torch.equal(a[k], v), (m, k)
        for a, b in zip(d["rows"], hist.without_time(), strict=True):
            assert a["test_acc"] == pytest.approx(b["test_acc"], abs=2 / 360 + 1e-12), m  # at most 2 test samples
    print(f"float32: largest |distributed - simulator| over every state tensor: {worst:.3g}")
