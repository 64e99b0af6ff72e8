"""The recipes of docs/recipes.md run, and each does what the page says it does.

- examples/recipes/plain_loop.py: FedBN/FixBN/HBN/FedTAN in a plain PyTorch loop;
- examples/recipes/flower_strategy.py: a Flower strategy that keeps BN state local by layer type
  (tested on Flower's record types: Flower's simulation runtime costs far more than 20 s to start);
- examples/run.annotated.toml: names every field of the config schema and parses.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import torch
import torch.nn.functional as F

from bnfl import stats
from bnfl.fl import hbn_client_stats
from bnfl.fl.engine import TrainConfig
from bnfl.fl.state import GROUPS, keys_in
from bnfl.nn import bn_modules
from bnfl.train.config import _SCHEDULE_KEYS, PARTITIONS, RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "examples" / "recipes"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def loop():
    return _module("plain_loop")


# -- bnfl.fl.state.keys_in: the pure helper the recipes use ---------------------------------------

def test_keys_in_selects_by_layer_type_not_name():
    from torch import nn

    # a BN layer named "fc" and a Linear named "bn": the names lie, the types do not
    model = nn.Sequential()
    model.add_module("bn", nn.Linear(4, 3))
    model.add_module("fc", nn.BatchNorm1d(3))
    assert keys_in(model, "bn_affine") == ["fc.weight", "fc.bias"]
    assert keys_in(model, "bn_stats", "bn_count") == ["fc.running_mean", "fc.running_var", "fc.num_batches_tracked"]
    assert keys_in(model, "other") == ["bn.weight", "bn.bias"]
    assert sorted(sum((keys_in(model, g) for g in GROUPS), [])) == sorted(model.state_dict())
    with pytest.raises(ValueError, match="unknown group.*'bn'.*valid: bn_affine"):
        keys_in(model, "bn")
    with pytest.raises(ValueError, match="none given"):
        keys_in(model)


# -- recipe (a): a plain PyTorch loop --------------------------------------------------------------

def test_plain_loop_fedtan_round_is_one_centralized_step_and_fedavg_bn_is_not(loop):
    """One round of one local step: FedTAN moves the model exactly as one centralized SGD step on
    the union of the clients' batches (eqs. 39-41); FedAvg+BN does not."""
    torch.manual_seed(0)
    start = loop.make_model()
    lr = 0.1
    res = loop.federated("fedtan", rounds=1, local_steps=1, lr=lr, batch_size=16)
    xb = torch.cat([x for x, _ in res["first_batches"]])
    yb = torch.cat([y for _, y in res["first_batches"]])
    start.train()
    grads = torch.autograd.grad(F.cross_entropy(start(xb), yb), list(start.parameters()))
    params = dict(res["server"].named_parameters())
    for (name, w0), g in zip(start.named_parameters(), grads, strict=True):
        torch.testing.assert_close(params[name], w0 - lr * g, rtol=1e-5, atol=1e-6, msg=name)
    # the running statistics: what PyTorch's centralized forward on the union batch stored
    for key in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(res["server"][1], key), getattr(start[1], key), rtol=1e-5, atol=1e-6)

    plain = loop.federated("fedavg+bn", rounds=1, local_steps=1, lr=lr, batch_size=16)  # the same batches
    gap = max((dict(plain["server"].named_parameters())[n] - params[n]).abs().max().item() for n in params)
    assert gap > 1e-3, "FedAvg+BN should not equal the coupled step under label skew"


def test_plain_loop_fedbn_keeps_bn_on_the_client(loop):
    res = loop.federated("fedbn", rounds=2, local_steps=2)
    server, kept = res["server"], res["client_local"]
    bn_keys = keys_in(server, "bn_affine", "bn_stats", "bn_count")
    assert res["local_keys"] == bn_keys and bn_keys
    torch.manual_seed(0)
    init = loop.make_model().state_dict()
    for k in bn_keys:  # the server's BN state was never averaged: still the initial one
        assert torch.equal(server.state_dict()[k], init[k]), k
    # each client's BN statistics are its own (label skew: they differ)
    k = keys_in(server, "bn_stats")[0]
    assert not torch.allclose(kept[0][k], kept[1][k])


def test_plain_loop_fixbn_freezes_the_statistics_after_t_star(loop):
    res = loop.federated("fixbn", rounds=4, local_steps=2, switch=2)
    h = res["history"]
    for k, v in h[1]["stats"].items():  # rounds 3 and 4 keep the statistics of round T* = 2
        if v.is_floating_point():  # (up to the rounding of averaging K equal copies)
            for later in (h[2], h[3]):
                torch.testing.assert_close(later["stats"][k], v, rtol=1e-6, atol=1e-7, msg=k)
    moved = max((h[1]["stats"][k] - v).abs().max().item() for k, v in h[0]["stats"].items() if v.is_floating_point())
    assert moved > 1e-3  # before T* they move


def test_plain_loop_hbn_pools_eq8_and_keeps_alpha_local(loop):
    res = loop.federated("hbn", rounds=1, local_steps=2)
    torch.manual_seed(0)
    start = loop.make_model(hybrid=True)
    data, _ = loop.clients_data()
    moments = [hbn_client_stats(start, x) for x, _ in data]
    for name, layer in bn_modules(res["server"]):
        mean, var = stats.hbn_global([m[name] for m in moments])
        torch.testing.assert_close(layer.global_mean, mean)
        torch.testing.assert_close(layer.global_var, var)
        assert torch.equal(layer.alpha, torch.zeros_like(layer.alpha))  # never averaged
    assert res["local_keys"] == keys_in(res["server"], "local")
    assert not torch.equal(res["client_local"][0][res["local_keys"][0]], torch.zeros(32))


def test_plain_loop_script_runs_every_method():
    proc = subprocess.run([sys.executable, str(RECIPES / "plain_loop.py"), "--rounds", "2"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for m in ("fedavg+bn", "fedbn", "fixbn", "hbn", "fedtan"):
        assert re.search(rf"^{re.escape(m)} +test accuracy after 2 rounds: \d+\.\d\d%$", proc.stdout, re.M), proc.stdout


# -- recipe (c): the annotated run.toml -----------------------------------------------------------

ANNOTATED = ROOT / "examples" / "run.annotated.toml"


def _named(text: str) -> set[str]:
    """Every key the file names, set or commented out (``key =`` at the start of a line, after an
    optional ``#``), plus the tables (``[name]``)."""
    keys = set(re.findall(r"^\s*#?\s*([A-Za-z_][A-Za-z0-9_]*)\s*=", text, re.M))
    tables = set(re.findall(r"^\s*#?\s*\[([A-Za-z_]+)\]", text, re.M))
    return keys | tables


def test_annotated_run_toml_parses_and_builds():
    cfg = load_config(ANNOTATED)
    assert cfg.method == "fedtan"
    cfg.train_config()


def test_annotated_run_toml_names_every_field_of_the_schema():
    """Fails when the schema gains a field (RunConfig, TrainConfig, a schedule or partition
    option) that the annotated file does not name, set or commented out."""
    text = ANNOTATED.read_text()
    named = _named(text)
    schema = {f.name for f in dataclasses.fields(RunConfig)}
    schema |= {f.name for f in dataclasses.fields(TrainConfig)} - {"rounds", "seed", "device", "schedule",
                                                                  "checkpoint_dir"}
    schema |= set(_SCHEDULE_KEYS) | {"kind", "num_clients"} | {o for kind in PARTITIONS.values() for o in kind.options}
    missing = sorted(schema - named)
    assert not missing, f"examples/run.annotated.toml does not name: {missing}"
    for kind in PARTITIONS:  # every partition kind is named too
        assert re.search(rf'"{kind}"', text), kind
    # every named key line carries a comment
    for line in text.splitlines():
        if re.match(r"^\s*[A-Za-z_]+\s*=", line):
            assert "#" in line, f"no comment on: {line}"


def test_annotated_checker_sees_a_missing_field(tmp_path):
    text = ANNOTATED.read_text()
    assert "momentum_mode" in _named(text)
    assert "momentum_mode" not in _named(re.sub(r"^.*momentum_mode.*$", "", text, flags=re.M))
    tomllib.loads(text)  # plain TOML


# -- recipe (b): Flower strategy that keeps BN local by layer type --------------------------------

@pytest.fixture(scope="module")
def flower():
    pytest.importorskip("flwr")
    from flwr.supercore.task_identity import TaskIdentity

    # Flower's runtime sets the identity of the task it runs in before any Message is made; here
    # the functions are called directly, as one node of run 1 would call them
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    try:
        yield _module("flower_strategy")
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def test_flower_strategy_sends_and_averages_only_non_bn_state(flower):
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    torch.manual_seed(0)
    model = flower.make_model()
    strategy = flower.KeepBNLocal(model=model)
    shared = flower.shared_keys(model)
    assert shared == keys_in(model, "other")
    full = model.state_dict()

    # configure_train: what the server sends holds no BN tensor
    sent = strategy.global_record()
    assert set(sent.keys()) == set(shared)

    # the client: loads the shared part, keeps its BN part, returns only the shared part
    replies, locals_ = [], []
    for i, n in enumerate((30, 10)):
        client = flower.make_model()
        client.load_state_dict({k: torch.full_like(v, float(i)) if v.is_floating_point() else v
                                for k, v in full.items()})
        before = {k: v.clone() for k, v in client.state_dict().items()}
        flower.load_shared(client, sent)
        for k in keys_in(client, "bn_affine", "bn_stats", "bn_count"):
            assert torch.equal(client.state_dict()[k], before[k]), k  # BN untouched by the download
        for k in shared:
            assert torch.equal(client.state_dict()[k], full[k]), k
        with torch.no_grad():  # pretend training moved every tensor
            for p in client.parameters():
                p.add_(1.0 + i)
        locals_.append(client)
        content = RecordDict({"arrays": flower.shared_record(client), "metrics": MetricRecord({"num-examples": n})})
        replies.append(Message(content, reply_to=Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=i + 1,
                                                         message_type="train")))
    arrays, _ = strategy.aggregate_train(1, replies)
    assert set(arrays.keys()) == set(shared)
    avg = arrays.to_torch_state_dict()
    for k in shared:
        want = (30 * locals_[0].state_dict()[k] + 10 * locals_[1].state_dict()[k]) / 40
        torch.testing.assert_close(avg[k], want, msg=k)
    assert isinstance(arrays, ArrayRecord)


def test_flower_strategy_catches_a_reply_with_bn_state(flower):
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    model = flower.make_model()
    strategy = flower.KeepBNLocal(model=model)
    bad = ArrayRecord(model.state_dict())  # a client that uploads everything, BN included
    content = RecordDict({"arrays": bad, "metrics": MetricRecord({"num-examples": 5})})
    msg = Message(content, reply_to=Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=1,
                                            message_type="train"))
    with pytest.raises(ValueError, match="BN state"):
        strategy.aggregate_train(1, [msg])


class _Grid:
    """The one Grid method FedAvg's node sampling calls."""

    def get_node_ids(self):
        return [11, 12]


def test_flower_configure_train_drops_bn_arrays(flower):
    from flwr.app import ArrayRecord, ConfigRecord

    model = flower.make_model()
    strategy = flower.KeepBNLocal(model=model)
    messages = list(strategy.configure_train(1, ArrayRecord(model.state_dict()), ConfigRecord({}), _Grid()))
    assert sorted(m.metadata.dst_node_id for m in messages) == [11, 12]
    for m in messages:
        assert set(m.content["arrays"].keys()) == set(keys_in(model, "other"))
        assert m.content["config"]["server-round"] == 1


def test_flower_client_keeps_its_bn_state_in_its_context_between_rounds(flower):
    from flwr.app import ConfigRecord, Context, Message, RecordDict

    torch.manual_seed(0)
    strategy = flower.KeepBNLocal(model=flower.make_model())
    ctx = Context(run_id=1, node_id=5, node_config={"partition-id": 1, "num-partitions": 3}, state=RecordDict(),
                  run_config={"local-steps": 2})
    stats_key = keys_in(flower.make_model(), "bn_stats")[0]
    seen = []
    for rnd in (1, 2):
        msg = Message(RecordDict({"arrays": strategy.global_record(), "config": ConfigRecord({"server-round": rnd})}),
                      dst_node_id=5, message_type="train")
        reply = flower.train(msg, ctx)
        assert set(reply.content["arrays"].keys()) == set(strategy.shared)
        kept = ctx.state["bn"].to_torch_state_dict()
        assert set(kept) == set(keys_in(flower.make_model(), "bn_affine", "bn_stats", "bn_count"))
        seen.append(kept[stats_key].clone())
    # round 2 started from round 1's statistics (kept in the Context), not from the fresh model's
    assert int(ctx.state["bn"].to_torch_state_dict()[keys_in(flower.make_model(), "bn_count")[0]]) == 4
    assert not torch.equal(seen[0], seen[1])


def test_flower_client_evaluates_with_its_own_bn_state(flower):
    from flwr.app import ConfigRecord, Context, Message, RecordDict

    torch.manual_seed(0)
    strategy = flower.KeepBNLocal(model=flower.make_model())
    ctx = Context(run_id=1, node_id=5, node_config={"partition-id": 1, "num-partitions": 3}, state=RecordDict(),
                  run_config={"local-steps": 2})
    msg = Message(RecordDict({"arrays": strategy.global_record(), "config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=5, message_type="train")
    flower.train(msg, ctx)
    ev = Message(RecordDict({"arrays": strategy.global_record(), "config": ConfigRecord({"server-round": 1})}),
                 dst_node_id=5, message_type="evaluate")
    got = flower.evaluate(ev, ctx).content["metrics"]
    x, y = flower.load_partition(1, 3, test=True)
    model = flower.make_model()
    model.load_state_dict({**model.state_dict(), **ctx.state["bn"].to_torch_state_dict(),
                           **strategy.global_record().to_torch_state_dict()})
    with torch.no_grad():
        want = float((model.eval()(x).argmax(1) == y).float().mean())
    assert got["accuracy"] == pytest.approx(want) and got["num-examples"] == len(x)


def _processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose environment holds ``marker`` (every descendant of a process
    started with it inherits it, daemons that leave its session included)."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in env.read_bytes():
                found.append(int(env.parent.name))
        except OSError:  # gone, or not ours
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_flower_recipe_runs_as_written_prints_accuracy_and_leaves_no_process():
    """The command docs/recipes.md shows: three rounds on Flower's simulation runtime in one
    process, each round's evaluated accuracy printed, and no process (Ray's daemons, a SuperLink)
    alive afterwards. Nothing listens beyond this machine: the recipe binds Ray's local cluster to
    127.0.0.1."""
    import os
    import signal
    import time
    import uuid

    pytest.importorskip("flwr")
    marker = f"BNFL_RECIPE_TEST={uuid.uuid4().hex}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", marker.split("=")[0]: marker.split("=")[1]}
    try:
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "recipes" / "flower_strategy.py"),
                               "--rounds", "2"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        acc = [float(a) for a in re.findall(r"round \d: evaluated accuracy ([\d.]+)%", done.stdout)]
        assert len(acc) == 2 and all(0 < a <= 100 for a in acc), done.stdout[-2000:]
        deadline = time.monotonic() + 20  # Ray's actors exit a moment after the driver returns
        while (left := _processes_with(marker)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"processes left behind 20 s after the run: {left}"
    finally:
        for pid in _processes_with(marker):  # whatever a failure left: ours only, by marker
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
