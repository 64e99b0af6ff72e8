"""Stacking beyond one configuration's seeds (issue 38): the rows of a learning-rate grid (one rate
per row), methods that share a model shape, and stacks split where memory says so, each run equal
to its own batched run (float64, 1e-12); one rate stays bitwise today's update; an entry's runs
stacked by the runner equal the seed groups' to rounding."""

from __future__ import annotations

import copy

import pytest
import torch
from test_fl_batched import _max_history_diff, _max_state_diff  # (tests/ is on sys.path)

from bnfl import fl, models
from bnfl.fl.batched import BatchedClients
from bnfl.fl.batched_sgd import StackedSGD
from bnfl.fl.batched_together import coupled_stacks_bitwise
from bnfl.fl.lockstep import run_lockstep
from bnfl.fl.stack_depth import max_rows, row_bytes

SPEC = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": 3, "seed": 0,
        "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 5},
        "train": {"local_steps": 3, "lr": 0.05, "batch_size": 48, "momentum": 0.9, "participation": 0.6,
                  "dtype": "float64", "progress": False, "batched": "on"}}


def _spec(method: str, seed: int, **train) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["method"], spec["seed"] = method, seed
    spec["partition"]["seed"] = seed
    spec["train"].update(train)
    if method == "fixbn":
        spec["method_options"] = {"switch": 2}
    return spec


@pytest.fixture
def stacks_seen(monkeypatch):
    """The number of rows of every batched computation, in order."""
    seen: list[int] = []
    real = BatchedClients._group

    def spy(self, r, rows, **kw):
        seen.append(len(rows))
        return real(self, r, rows, **kw)

    monkeypatch.setattr(BatchedClients, "_group", spy)
    return seen


def _check(together: list, alone: list) -> None:
    for a, b in zip(together, alone, strict=True):
        assert _max_state_diff(a, b) <= 1e-12
        assert _max_history_diff(a.history, b.history) <= 1e-12
        assert a.channel.counters() == b.channel.counters()


def _alone(specs: list[dict]) -> list:
    sims = [fl.build(s) for s in specs]
    for s in sims:
        s.run()
    return sims


@pytest.mark.parametrize("method", ["fedavg+bn", "scaffold"])
def test_a_learning_rate_grid_trains_as_one_stack_with_one_rate_per_row(method, stacks_seen):
    """SCAFFOLD's control variates divide by each client's own rate (extra_upload gets it)."""
    specs = [_spec(method, s, lr=lr) for s, lr in ((0, 0.05), (1, 0.1), (0, 0.02))]
    alone = _alone(specs)
    stacks_seen.clear()
    together = [fl.build(s) for s in specs]
    run_lockstep(together)
    _check(together, alone)
    assert stacks_seen == [9, 9, 9]  # 3 runs x 3 participants in one computation per round


def test_fedtans_coupled_first_step_stacks_its_seeds_each_pooling_its_own_clients(stacks_seen):
    """FedTAN's step 1 (eqs. 39-41, 6) of several seeds in one computation: each seed's BN
    moments are all-reduced over its own clients only, through its own channel (counters equal)."""
    specs = [_spec("fedtan", s, lr=lr) for s, lr in ((0, 0.05), (1, 0.1), (2, 0.05))]
    alone = _alone(specs)
    stacks_seen.clear()
    together = [fl.build(s) for s in specs]
    run_lockstep(together, stack_coupled=True)
    _check(together, alone)
    assert stacks_seen == [9, 9, 9]
    stacks_seen.clear()
    run_lockstep([fl.build(s) for s in specs], stack_coupled=False)  # asked apart: each seed alone
    assert stacks_seen == [3] * 9


def _bitwise(together: list, alone: list) -> None:
    for a, b in zip(together, alone, strict=True):
        sa, sb = a.global_state, b.global_state
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert a.history.without_time() == b.history.without_time()
        assert a.channel.counters() == b.channel.counters()


def _uniform(method: str, seed: int, **train) -> dict:
    """Every client holds more than a batch: each trains ``local_steps`` full batches a round."""
    spec = _spec(method, seed, dtype="float32", batch_size=16, local_steps=2, **train)
    spec["partition"] = {"kind": "dirichlet", "phi": 10.0, "num_clients": 5, "seed": seed}
    return spec


@pytest.mark.parametrize("model", ["q_mlp_bn", "q_mlp1"])
def test_fedtans_stacked_coupled_steps_are_bitwise_each_seed_alone_on_a_linear_model(model, stacks_seen):
    """The quick profile's seed groups (the default): the coupled rounds of an MLP's seeds and
    rates stack when every participant trains the same full batches, each seed pooling its own
    rows through its own all-reduce, and every number is bitwise what the seed computes alone
    (float32, as the committed runs). Q-MLP1's BN has 30 channels a client, which BN's kernel
    would split differently in a longer channel axis: there each seed's BN runs apart."""
    specs = [{**_uniform("fedtan", s, lr=lr), "model": {"name": model}} for s, lr in ((0, 0.05), (1, 0.1), (2, 0.05))]
    apart = [fl.build(s) for s in specs]
    assert all(len(i) >= 16 for sim in apart for i in sim.client_indices)
    run_lockstep(apart, stack_coupled=False)
    stacks_seen.clear()
    together = [fl.build(s) for s in specs]
    run_lockstep(together)
    assert stacks_seen == [9, 9, 9]
    _bitwise(together, apart)


def test_fedtans_coupled_steps_stay_apart_where_stacking_would_pad_or_convolve(stacks_seen):
    """A client smaller than the batch pads the whole stack (other operations for every seed), and
    a grouped convolution's weight gradient changes in the last bit with the stack's depth: by
    default such rounds of FedTAN's seeds train each seed apart, and the runs stay bitwise."""
    small = [_spec("fedtan", s, dtype="float32") for s in (0, 1)]  # phi 0.1: clients under 48 samples
    apart = [fl.build(s) for s in small]
    run_lockstep(apart, stack_coupled=False)
    stacks_seen.clear()
    together = [fl.build(s) for s in small]
    run_lockstep(together)
    assert stacks_seen == [6, 6, 3, 3]  # rounds 1-2 stack; round 3 draws a client under a batch: each seed alone
    _bitwise(together, apart)
    assert coupled_stacks_bitwise(models.build("q_mlp_bn", num_classes=10))
    assert not coupled_stacks_bitwise(models.build("q_scnn", num_classes=10))
    conv = [{**_uniform("fedtan", s), "data": {"name": "digits", "form": "image"}, "model": {"name": "q_scnn"},
             "rounds": 1} for s in (0, 1)]
    stacks_seen.clear()
    run_lockstep([fl.build(s) for s in conv])
    assert stacks_seen == [3, 3]


def test_methods_that_share_a_model_shape_stack_until_their_phases_differ(stacks_seen):
    """FedAvg+BN and FixBN (switch at round 2): one stack while both train BN, apart once FixBN
    freezes its statistics (another frozen phase)."""
    specs = [_spec("fedavg+bn", 0), _spec("fixbn", 1), _spec("fedavg+bn", 2, lr=0.1)]
    alone = _alone(specs)
    stacks_seen.clear()
    together = [fl.build(s) for s in specs]
    run_lockstep(together)
    _check(together, alone)
    assert stacks_seen[:2] == [9, 9] and sorted(stacks_seen[2:]) == [3, 6]


def test_a_stack_over_the_memory_limit_is_split(stacks_seen):
    specs = [_spec("fedavg+bn", s) for s in (0, 1, 2)]
    alone = _alone(specs)
    stacks_seen.clear()
    together = [fl.build(s) for s in specs]
    run_lockstep(together, max_rows=6)
    _check(together, alone)
    assert stacks_seen == [6, 3] * 3


def test_one_rate_for_every_row_is_bitwise_the_one_rate_update():
    torch.manual_seed(0)
    p0, g = torch.randn(3, 7, 5), torch.randn(3, 7, 5)
    outs = []
    for lr in (0.1, [0.1, 0.1, 0.1]):
        p = p0.clone().requires_grad_()
        opt = StackedSGD([p], lr=lr, momentum=0.9, weight_decay=1e-3)
        for _ in range(3):
            p.grad = g.clone()
            opt.step()
        outs.append(p.detach())
        assert opt.row_lr is None
    assert torch.equal(outs[0], outs[1])


def test_one_rate_per_row_equals_each_rows_own_optimizer():
    torch.manual_seed(0)
    p0, g = torch.randn(3, 7, 5, dtype=torch.float64), torch.randn(3, 7, 5, dtype=torch.float64)
    rates = [0.1, 0.03, 0.5]
    p = p0.clone().requires_grad_()
    opt = StackedSGD([p], lr=rates, momentum=0.9, weight_decay=1e-3)
    for t in range(3):
        p.grad = g.clone()
        opt.step(None if t < 2 else 2)  # the last step: the first two rows only
    for j, lr in enumerate(rates):
        q = p0[j:j + 1].clone().requires_grad_()
        one = StackedSGD([q], lr=lr, momentum=0.9, weight_decay=1e-3)
        for _ in range(3 if j < 2 else 2):
            q.grad = g[j:j + 1].clone()
            one.step()
        assert (p.detach()[j] - q.detach()[0]).abs().max() <= 1e-15


def test_the_stack_depth_follows_memory_and_states_its_numbers():
    m = models.build("q_mlp_bn", num_classes=10)
    per = row_bytes(m, (64,), 32)
    params = sum(t.numel() for t in m.state_dict().values() if t.is_floating_point()) * 4
    assert per > 4 * params  # parameters, gradients, momentum, a copy, and activations
    d = max_rows(m, (64,), 32, device="cpu", free=100 * per)
    assert d.rows == 50 and d.row_bytes == per and "stack depth 50 models" in d.describe()
    assert max_rows(m, (64,), 32, device="cpu", free=per).rows == 1  # one model always trains
    assert max_rows(m, (64,), 64, device="cpu", free=100 * per).rows < 50
    with pytest.raises(ValueError, match="fraction"):
        max_rows(m, (64,), 32, device="cpu", fraction=0)


# ------------------------------------------------------------------ the graph-captured steady step
class _EagerGraph:
    """Stands in for a CUDA graph on the CPU: 'captures' nothing and runs the captured body on
    its static inputs at every replay, so the static-tensor machinery (in-place loads, momentum
    buffers and rate columns kept across rounds, uploads copied out) is checked without CUDA."""

    made = 0

    def __init__(self, body, x, y, *, warm=None):
        self.body, self.x, self.y, self.keep = body, x.clone(), y.clone(), []
        if warm is not None:
            warm(self.x, self.y)  # must leave no trace (the runs below still equal their own)
        type(self).made += 1

    def __call__(self, x, y):
        self.x.copy_(x)
        self.y.copy_(y)
        return self.body(self.x, self.y).clone()


@pytest.mark.parametrize("method", ["fedavg+bn", "fixbn", "fedtan"])
def test_the_graphed_steady_step_machinery_equals_the_eager_steps(method, monkeypatch):
    import bnfl.fl.batched as batched
    from bnfl.fl.device_options import DeviceOptions

    specs = [_spec(method, s, lr=lr) for s, lr in ((0, 0.05), (1, 0.1))]
    for s in specs:  # equal batches (no padding mask): the steps after the first replay
        s["partition"] = {"kind": "iid", "num_clients": 5, "seed": s["seed"]}
    alone = _alone(specs)
    monkeypatch.setattr(batched, "graphs_possible", lambda device: True)
    monkeypatch.setattr(batched, "GraphedStep", _EagerGraph)
    _EagerGraph.made = 0
    together = [fl.build(s) for s in specs]
    for sim in together:
        sim.batched_engine.options = DeviceOptions(cuda_graphs=True)
    run_lockstep(together, stack_coupled=True)
    _check(together, alone)
    assert _EagerGraph.made >= 1 and together[0].batched_engine.graph_error is None


def test_device_options_are_off_by_default_and_refuse_non_booleans():
    from bnfl.fl.device_options import DeviceOptions

    assert not DeviceOptions().any and DeviceOptions().describe() == "none"
    assert fl.build(_spec("fedavg+bn", 0)).batched_engine.options == DeviceOptions()
    with pytest.raises(TypeError, match="DeviceOptions.tf32 must be True or False"):
        DeviceOptions(tf32="yes")
    with pytest.raises(ValueError, match="graph_max_images must be a positive int"):
        DeviceOptions(graph_max_images=0)


def test_steps_larger_than_graph_max_images_run_eagerly(monkeypatch):
    import bnfl.fl.batched as batched
    from bnfl.fl.device_options import DeviceOptions

    spec = _spec("fedavg+bn", 0)
    spec["partition"] = {"kind": "iid", "num_clients": 5, "seed": 0}
    monkeypatch.setattr(batched, "graphs_possible", lambda device: True)
    monkeypatch.setattr(batched, "GraphedStep", _EagerGraph)
    made = []
    for limit in (3 * 48, 3 * 48 - 1):  # 3 participants x 48 images per step
        _EagerGraph.made = 0
        sim = fl.build(spec)
        sim.batched_engine.options = DeviceOptions(cuda_graphs=True, graph_max_images=limit)
        sim.run()
        made.append(_EagerGraph.made)
    assert made[0] >= 1 and made[1] == 0


# ------------------------------------------------------------------------ an entry's runs stacked
def _grid_entry(ctx):
    """A learning-rate grid of two methods that share a model shape, each over the seeds."""
    from bnfl.experiments.training import final, train_seeds

    spec = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "rounds": 2,
            "partition": {"kind": "dirichlet", "phi": 0.3, "num_clients": 4},
            "train": {"local_steps": 2, "batch_size": 16, "eval_every": 1, "dtype": "float64"}}
    out = {}
    for method in ("fedavg+bn", "fedprox"):
        for lr in (0.05, 0.2):
            runs = train_seeds(ctx, {**spec, "method": method, "train": {**spec["train"], "lr": lr}})
            out[(method, lr)] = [final(r) for r in runs]
    return out


def test_an_entrys_runs_are_planned_stacked_and_found_by_its_compute(stacks_seen):
    from bnfl.experiments.cache import RunCache
    from bnfl.experiments.core import Context
    from bnfl.experiments.stacking import stack_entry

    plain = _grid_entry(Context(profile="quick", seeds=[0, 1], cache=RunCache(None), batched="auto"))
    ctx = Context(profile="quick", seeds=[0, 1], cache=RunCache(None), batched="auto", stack="entry")
    stacks_seen.clear()
    report = stack_entry(ctx, _grid_entry)
    assert report["planned"] == 8 and report["stacked"] == 8
    # FedAvg+BN's 4 runs (2 rates x 2 seeds) share one computation; FedProx's hook stacks apart
    assert max(stacks_seen) == 16 and sorted(g["runs"] for g in report["groups"]) == [8]
    misses = ctx.cache.misses
    got = _grid_entry(ctx)
    assert ctx.cache.misses == misses  # every run came from the stacked computation
    for key, vals in plain.items():
        assert got[key] == pytest.approx(vals, abs=1e-3), key


def test_the_paper_profile_on_cuda_stacks_the_entry_with_cuda_graphs_and_the_quick_profile_does_not():
    from bnfl.experiments.core import Context
    from bnfl.experiments.runner import _identity
    from bnfl.experiments.stacking import default_stack
    from bnfl.experiments.training import _key, canonical, device_options

    assert default_stack("paper", "cuda", "auto") == "entry" and default_stack("paper", "cuda:1", "on") == "entry"
    assert default_stack("quick", "cuda", "auto") == default_stack("paper", "cpu", "auto") == "seeds"
    assert default_stack("paper", "cuda", "off") == "seeds"
    paper = Context(profile="paper", device="cuda", batched="auto", stack="entry")
    assert device_options(paper).cuda_graphs and not device_options(paper).bf16
    quick = Context(profile="quick", batched="auto")
    assert not device_options(quick).any
    spec = canonical(_spec("fedavg+bn", 0))
    # the quick profile's run keys and result identities are what they were (no new field)
    assert set(_key(quick, spec, [0, 1, 2])) == {"spec", "device", "batched", "seed_group"}
    assert set(_key(paper, spec, [0, 1, 2])) == {"spec", "device", "batched", "stack", "device_options"}
    assert set(_identity("x", "quick", {}, [0], "cpu", None, "auto")) == {"id", "profile", "config", "seeds",
                                                                          "device", "code", "batched"}


def test_a_rate_that_changes_every_round_keeps_at_most_four_graphs(monkeypatch):
    """Each rate is a captured constant: a new graph per rate, the oldest freed beyond four."""
    import bnfl.fl.batched as batched
    from bnfl.fl.device_options import DeviceOptions

    spec = _spec("fedavg+bn", 0)
    spec["rounds"] = 7
    spec["partition"] = {"kind": "iid", "num_clients": 5, "seed": 0}
    spec["train"]["milestones"] = [1, 2, 3, 4, 5, 6]  # lr *= gamma after every round
    monkeypatch.setattr(batched, "graphs_possible", lambda device: True)
    monkeypatch.setattr(batched, "GraphedStep", _EagerGraph)
    _EagerGraph.made = 0
    sim = fl.build(spec)
    sim.batched_engine.options = DeviceOptions(cuda_graphs=True)
    sim.run()
    assert _EagerGraph.made == 7
    assert [len(g) for g in sim.batched_engine._graphs.values()] == [4]
