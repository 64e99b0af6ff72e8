"""Issue 26 item 1: an algorithm's state is a value the engine keeps, never an attribute.

A client's state (``ClientContext.state``: SCAFFOLD's c_i, MOON's previous model) goes into the
client's round and comes back out of it, into the engine's store ``Simulation.client_algorithm``;
a round's working memory is ``ClientContext.scratch``; the server's state (SCAFFOLD's c, FedAdam's
moments, HBN's flags) is ``ServerContext.state``. Checkpoints and Flower nodes carry them as
values: nothing of the algorithm object is pickled, and nothing is guessed from key types.
"""

from __future__ import annotations

import copy

import pytest
import torch

from bnfl import fl
from bnfl.fl import Algorithm

#: methods whose hooks keep state between calls: per client (scaffold, moon), per client round
#: (fedprox, fedsam, fedacg's anchor), on the server (fedadam, fedacg, hbn, fbn)
STATEFUL = ["scaffold", "moon", "fedprox", "fedsam", "fedadam+bn", "fedacg+bn", "hbn", "fbn"]


def _cfg(method: str, **train) -> dict:
    opts = {"solver": "scaffold", "alpha_sharing": "averaged", "final_round": False} if method == "hbn" else {}
    return {"method": method, "method_options": opts, "seed": 1, "rounds": 2,
            "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
            "partition": {"kind": "dirichlet", "num_clients": 3, "phi": 0.5},
            "train": {"local_steps": 2, "batch_size": 8, "lr": 0.05, "dtype": "float64", "progress": False,
                      "batched": "off", **train}}


def _fields(obj: object) -> dict:
    """An algorithm's attributes, a nested algorithm's (HBN's solver) as its own attributes."""
    return {k: _fields(v) if isinstance(v, Algorithm) else v for k, v in vars(obj).items()}


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("method", STATEFUL)
def test_an_algorithm_object_holds_its_options_only(method):
    """After two rounds the algorithm's attributes are what its constructor set: the state is in
    the engine's client store and the server context."""
    sim = fl.build(_cfg(method))
    before = _fields(copy.deepcopy(sim.algorithm))
    sim.run()
    assert _fields(sim.algorithm) == before
    if method not in ("fedprox", "fedsam"):  # these two keep a round's scratch only
        assert sim.server.state or sim.client_algorithm, f"{method} keeps state, so the engine must hold some"


def test_scaffold_client_state_is_per_client_and_server_state_is_c():
    sim = fl.build(_cfg("scaffold"))
    sim.run()
    assert sorted(sim.client_algorithm) == [0, 1, 2]
    ci = {c: s["scaffold.ci"] for c, s in sim.client_algorithm.items()}
    first = next(iter(ci[0]))
    assert not torch.equal(ci[0][first], ci[1][first])  # one c_i per client
    assert set(sim.server.state["scaffold.c"]) == set(ci[0])


@pytest.mark.parametrize(("method", "batched"), [("scaffold", "off"), ("scaffold", "on"), ("moon", "off"),
                                                 ("fedadam+bn", "on"), ("hbn", "off"), ("hbn", "on")])
def test_a_resumed_run_carries_the_algorithm_state_bitwise(tmp_path, method, batched):
    """Stop after round 1 with a checkpoint, continue in a new Simulation (a new algorithm
    object): the same final model and the same client and server state as one run (MOON's own
    local_loss is not batched)."""
    whole = fl.build(_cfg(method, batched=batched))
    whole.run()
    cfg = _cfg(method, batched=batched) | {"out": str(tmp_path / "run")}
    fl.build(cfg).run(stop_after=1)
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert ckpt["client_algorithm"] or ckpt["server_state"]
    resumed = fl.build(cfg)
    resumed.run(resume=True)
    assert _equal(resumed.global_state, whole.global_state)
    assert _equal(resumed.client_algorithm, whole.client_algorithm)
    assert _equal(resumed.server.state, whole.server.state)


def test_a_flower_node_keeps_only_its_own_client_state():
    """What a node writes into its Context: its client's algorithm state, as a value (no
    algorithm object, no other client's entries), and it loads back equal."""
    pytest.importorskip("flwr")
    from flwr.app import RecordDict

    from bnfl.fl._flower_records import load_client_state, save_client_state

    sim = fl.build(_cfg("scaffold"))
    sim.run(stop_after=1)
    context = RecordDict()
    save_client_state(sim, 1, context)
    fresh = fl.build(_cfg("scaffold"))
    load_client_state(fresh, 1, context)
    assert list(fresh.client_algorithm) == [1]
    assert _equal(fresh.client_algorithm[1], sim.client_algorithm[1])
    assert fresh.server.state == {}  # the server's c never reaches a node's Context


class _InProcessGrid:
    """The two calls the ServerApp makes of a Flower ``Grid`` (``get_node_ids``,
    ``send_and_receive``), answered by the ClientApp in this process, one ``Context`` per node:
    the apps' messages and Context state without Ray (whose start-up costs most of a launch)."""

    def __init__(self, app, num_clients: int) -> None:
        from flwr.app import Context, RecordDict

        self.app = app
        self.contexts = {n + 1: Context(run_id=1, node_id=n + 1, node_config={"partition-id": n}, state=RecordDict(),
                                        run_config={}) for n in range(num_clients)}

    def get_node_ids(self):
        return list(self.contexts)

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for m in messages:
            node = m.metadata.dst_node_id
            reply = self.app(m, self.contexts[node])
            reply.metadata.__dict__["_src_node_id"] = node  # the node that answered (read-only for apps)
            replies.append(reply)
        return replies


@pytest.fixture
def _flower_task_identity():
    """Messages are stamped with the task's identity (set by Flower's runtime; here by hand)."""
    pytest.importorskip("flwr")
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


@pytest.mark.usefixtures("_flower_task_identity")
@pytest.mark.parametrize("method", ["scaffold", "moon", "fedacg+bn"])
def test_flower_apps_carry_the_algorithm_state_bit_for_bit(method):
    """The ServerApp and the ClientApp (every node's state in its Context between messages) end
    with the simulator's global state, each client's algorithm state and the server's, bit for
    bit. FedACG: a node anchors its regulariser at the lookahead it received (before, a node had
    no anchor: 1e-6 away from the simulator after 2 rounds)."""
    from flwr.app import Context, RecordDict

    from bnfl.fl.flower import FlowerResult, client_app, server_app
    from bnfl.train.config import setup_from_config

    cfg = _cfg(method, momentum=0.9)
    ref = fl.build(cfg)
    ref.run()
    setup = setup_from_config(cfg, out=None, answer_inspect=True)
    result = FlowerResult()
    app = server_app(setup, [result], collect_client_state=True)
    app(_InProcessGrid(client_app(setup), len(setup.data.clients)),
        Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    assert _equal(result.global_state, ref.global_state)
    assert _equal({c: s["algorithm"] for c, s in result.client_state.items() if s["algorithm"]}, ref.client_algorithm)
    assert _equal(result.algorithm_state, ref.server.state)
