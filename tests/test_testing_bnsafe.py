"""bnfl.compat.flower.BNSafe without a runtime: the messages it sends and how it aggregates replies
(each policy), with a grid that only names its nodes and replies made in this process. The run on
Flower's simulation runtime is tests/test_testing_flower.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAdam, FedAvg  # noqa: E402

from bnfl import compat  # noqa: E402
from bnfl.compat.flower import BNSafe  # noqa: E402

SIZES = (4, 9, 6)


@pytest.fixture(autouse=True)
def _flower_task_identity():
    """Messages are stamped with the task's identity (set by Flower's runtime; here by hand)."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


class Grid:
    """Only what a strategy's configure_train asks of a grid: the connected nodes."""

    def get_node_ids(self):
        return [11, 12, 13]


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))


def client_state(c: int) -> dict:
    model = net().train()
    gen = torch.Generator().manual_seed(c)
    model(3.0 * c + (c + 1) * torch.randn(SIZES[c], 3, generator=gen))
    return model.state_dict()


def replies(messages, metrics=None) -> list[Message]:
    out = []
    for c, msg in enumerate(messages):
        content = RecordDict({"arrays": ArrayRecord(client_state(c)),
                              "metrics": MetricRecord({"num-examples": SIZES[c], **(metrics or {}).get(c, {})})})
        out.append(Message(content=content, reply_to=msg))
    return out


def as_torch(arrays: ArrayRecord) -> dict:
    return {k: torch.from_numpy(np.array(a.numpy())) for k, a in arrays.items()}


@pytest.mark.parametrize("policy", ["exact", "average"])
def test_bn_statistics_follow_the_policy_and_the_rest_the_wrapped_strategy(policy):
    strategy = BNSafe(FedAvg(min_available_nodes=3, min_train_nodes=3), model=net(), policy=policy)
    messages = list(strategy.configure_train(1, ArrayRecord(net().state_dict()), ConfigRecord(), Grid()))
    assert len(messages) == 3
    sent = set(messages[0].content["arrays"].keys())
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked", "0.weight"} <= sent  # sent with the model
    reps = replies(messages)
    before = [set(r.content["arrays"].keys()) for r in reps]
    arrays, _ = strategy.aggregate_train(1, reps)
    assert [set(r.content["arrays"].keys()) for r in reps] == before  # the replies are left as they came
    got = as_torch(arrays)
    want = compat.aggregate_state_dicts([client_state(c) for c in range(3)], SIZES, model=net(), policy=policy)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7)
    assert got["1.num_batches_tracked"].dtype == torch.int64


def test_local_policy_sends_no_statistics_back():
    strategy = BNSafe(FedAvg(min_available_nodes=3, min_train_nodes=3), model=net(), policy="local")
    messages = list(strategy.configure_train(1, ArrayRecord(net().state_dict()), ConfigRecord(), Grid()))
    arrays, _ = strategy.aggregate_train(1, replies(messages))
    assert set(arrays.keys()) == {"0.weight", "0.bias", "1.weight", "1.bias"}


def test_a_clients_own_count_takes_precedence():
    strategy = BNSafe(FedAvg(min_available_nodes=3, min_train_nodes=3), model=net())
    messages = list(strategy.configure_train(1, ArrayRecord(net().state_dict()), ConfigRecord(), Grid()))
    own = (2, 5, 6)  # e.g. statistics over fewer examples than the client trained on
    arrays, _ = strategy.aggregate_train(1, replies(messages, {c: {"bn-count.1": n} for c, n in enumerate(own)}))
    counts = [{"1": n} for n in own]
    want = compat.aggregate_state_dicts([client_state(c) for c in range(3)], SIZES, model=net(), counts=counts)
    torch.testing.assert_close(as_torch(arrays)["1.running_var"], want["1.running_var"], rtol=1e-6, atol=1e-7)
    default = compat.aggregate_state_dicts([client_state(c) for c in range(3)], SIZES, model=net())
    assert not torch.allclose(default["1.running_var"], want["1.running_var"])  # the counts mattered


def test_fedadam_sees_no_bn_statistics():
    inner = FedAdam(min_available_nodes=3, min_train_nodes=3)
    strategy = BNSafe(inner, model=net())
    messages = list(strategy.configure_train(1, ArrayRecord(net().state_dict()), ConfigRecord(), Grid()))
    strategy.aggregate_train(1, replies(messages))
    assert set(inner.current_arrays) == {"0.weight", "0.bias", "1.weight", "1.bias"}
    assert set(inner.m_t) == set(inner.current_arrays)


def test_bad_input_is_one_clear_line():
    with pytest.raises(TypeError, match="BNSafe wraps a flwr.serverapp.strategy.Strategy, got dict"):
        BNSafe({}, model=net())
    with pytest.raises(ValueError, match="unknown policy 'fedbn'"):
        BNSafe(FedAvg(), model=net(), policy="fedbn")
