r"""The batched simulation engine: a round's clients train their local steps as one computation.

:meth:`Simulation.client_round <bnfl.fl.Simulation.client_round>` runs one client at a time,
which for small models costs mostly per-operation overhead. Here the round's clients (same
architecture) are stacked into one :class:`~bnfl.nn.batched.BatchedNet`: every local step is
one forward and one backward over the clients' concatenated mini-batches and one SGD step over
the stacked parameters and momentum buffers. Everything a client owns stays per client:

* mini-batches: each client's batch ids come from its own stream
  (:meth:`Simulation.next_batch_ids <bnfl.fl.Simulation.next_batch_ids>`), so both engines see
  the same batches; clients with smaller batches are padded to the largest and masked (BN
  statistics and losses over real rows only, :func:`~bnfl.nn.batched.masked_batch_norm`);
  clients with different step counts (``local_unit="epochs"`` over uneven data) run together,
  ordered by their counts: at step ``t`` the clients that still train are the first ones, the
  others' rows are left as they are (:meth:`BatchedNet.first_clients
  <bnfl.nn.batched.BatchedNet.first_clients>`, ``StackedSGD.step(rows)``);
* BN: each client's channels are normalised with its own batch statistics and its running
  statistics updated as ``nn.BatchNorm`` does; FixBN's frozen phase normalises with them;
  GroupNorm/LN/IN use per-sample statistics and each client's affine parameters;
* SGD: :class:`StackedSGD` over the stacked tensors is the per-client update (SGD with momentum
  and weight decay is elementwise), ``torch.optim.SGD``'s arithmetic as ``_foreach`` ops;
  momentum buffers are stacked from, and returned to, the clients' (or the broadcast global)
  buffers;
* algorithm hooks: ``client_start``, ``adjust_grads``, ``after_step`` and ``extra_upload`` are
  the algorithm's own, called once per client on a per-client view of the stacked tensors
  (:meth:`BatchedNet.client_view <bnfl.nn.batched.BatchedNet.client_view>`), with the
  algorithm's per-client scratch attributes (FedProx's anchor, SCAFFOLD's start point) kept
  apart per client (:class:`_HookScope`);
* FedTAN's coupled first step (Algorithms 1-3) is step 1 of the batched clients
  (:meth:`BatchedClients._coupled_step`): the BN layers pool the clients' moments through the
  channel's all-reduce (:func:`~bnfl.nn.batched.coupled_batch_norm`, eqs. 39-40), the backward
  of :math:`\sum_i p_i F_i` is eq. 41, and eq. 6 updates all clients' stacked running
  statistics at once. FedAvg+Algorithm 2 (local stat-gradients) and backends with their own
  exchange (torch.distributed, Flower) keep :func:`bnfl.fedtan.coupled_step`, whose gradients
  then enter step 1.

The losses are checked for divergence and read once per round (no device sync per step). On a
``torch.distributed`` rank the engine batches the rank's own participants (none in some rounds).

HBN's hooks (eq. 7 statistics of the downloaded model, each client's alpha) and FBN's
(cumulative batch moments) run on the per-client views; the hybrid and FBN layers are batched
(:mod:`bnfl.nn.batched_norms`).

What cannot be batched (what :meth:`Algorithm.batching_obstacle
<bnfl.fl.Algorithm.batching_obstacle>` names: an algorithm with its own ``local_loss``, MOON,
FedSAM, HBN on them, HBN's moving-average and fixed-alpha ablations; a model with layers
:func:`~bnfl.nn.batched.batching_obstacle` refuses: weight-standardised convolutions, dropout)
runs sequentially under ``batched="auto"`` and raises under
``batched="on"``. The results equal the sequential engine's up to rounding (float64: 1e-12;
float32: 1e-5, see ``tests/test_fl_batched.py``), not bitwise; ``TrainConfig.batched`` defaults
to ``"auto"`` and ``"off"`` is the bitwise reference (:func:`choose`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from bnfl.fedtan import CoupledStep
from bnfl.fl._evaluate import _cross_entropy
from bnfl.fl.augment import BatchAugmenter, augment_rows
from bnfl.fl.batched_sgd import ClientOptimizer, StackedSGD
from bnfl.fl.clients import Clients, Sequential
from bnfl.fl.device_options import DeviceOptions, GraphedStep
from bnfl.functional import ema
from bnfl.nn import freeze_bn_stats, unfreeze_bn_stats
from bnfl.nn.batched import BatchedNet, batching_obstacle
from bnfl.stats import Moments

if TYPE_CHECKING:
    from bnfl.fl._host import ClientHost

__all__ = ["BATCHED_MODES", "BatchedClients", "DeferredCoupledStep", "StackedSGD", "batched_obstacle", "choose",
           "engine_line", "in_round_order", "same_samples", "select_batched"]

#: ``TrainConfig.batched``: never, where possible, or always (an error naming the obstacle).
BATCHED_MODES = ("off", "auto", "on")

_CLIENT_HOOKS = ("client_start", "adjust_grads", "after_step", "extra_upload")
#: captured CUDA graphs kept per stacked net (shapes, rates, frozen phase); older ones are freed
_GRAPHS_KEPT = 4
_MISSING = object()


def batched_obstacle(sim: ClientHost) -> str | None:
    """Why the clients of ``sim`` cannot train as one batched computation, or ``None``.

    The algorithm says what it needs (:meth:`Algorithm.batching_obstacle
    <bnfl.fl.Algorithm.batching_obstacle>`: e.g. its own ``local_loss``, MOON's representations or
    FedSAM's perturbed weights); a model needs layers that
    :func:`~bnfl.nn.batched.batching_obstacle` accepts.
    """
    if sim.clients_elsewhere:
        return "this engine runs the clients itself (on Flower: each on its own node), not as one computation here"
    why = sim.algorithm.batching_obstacle()
    return why if why is not None else batching_obstacle(sim.model)


def select_batched(sim: ClientHost) -> tuple[BatchedClients | None, str]:
    """The batched engine for ``sim`` per ``sim.config.batched`` and why (or why not).

    ``"off"``: ``None``; ``"auto"``: batched unless :func:`batched_obstacle`; ``"on"``: batched
    or a ``ValueError`` naming the obstacle.
    """
    mode = sim.config.batched
    if mode == "off":
        return None, "batched='off'"
    why = batched_obstacle(sim)
    if why is None:
        return BatchedClients(sim), "batched"
    if mode == "on":
        raise ValueError(f"batched='on' but this run cannot be batched: {why}. Use batched='auto' (falls back to "
                         "the sequential engine) or 'off'")
    return None, why


@dataclass(frozen=True)
class DeferredCoupledStep:
    """The algorithm's coupled first step left to the batched engine (:meth:`~bnfl.fl.batched.BatchedClients.defer_first_step`):
    step 1 of the round's local steps runs the BN layers coupled (:func:`~bnfl.nn.batched.coupled_batch_norm`)
    with the participants' weights ``weights`` (:math:`p_i`, in the order of the participants)."""

    step: Any  # the algorithm's CoupledFirstStep (bnfl.fl.algorithms, which sits above this engine's pieces)
    weights: tuple[float, ...]


def in_round_order(rows: Sequence[Any], uploads: Mapping[Any, dict[str, Tensor]],
                   losses: Mapping[Any, float]) -> tuple[list[dict[str, Tensor]], list[float]]:
    """One simulation's uploads and losses in the order of its participants."""
    ordered = sorted(rows, key=lambda row: row.index)
    return [uploads[row] for row in ordered], [losses[row] for row in ordered]


def same_samples(a: ClientHost, b: ClientHost) -> bool:
    """Whether two simulations hold the same training tensors (the same data loaded once: seeds
    of one configuration differ in their partition, not in their samples)."""
    return a._rows is None and b._rows is None and a.x_train is b.x_train and a.y_train is b.y_train


# -- which engine trains a simulation's clients, and the line that says why -------------------------
# Which engine trains a simulation's clients, and the line that says why.
# :class:`~bnfl.fl.TrainConfig` ``batched`` picks between the batched engine
# (:mod:`bnfl.fl.batched`, the default where it can run: ``"auto"``) and the sequential one (the
# reference, one client at a time). :func:`choose` makes the choice for a
# :class:`~bnfl.fl.Simulation` and writes it to ``History.meta["batched"]``: the mode asked for,
# whether the batched engine is used, the reason, and one line a person reads, e.g.::
#     batched: batched='auto' chose the batched engine: the clients share one architecture (Net)
#     and nothing in FedTAN or the model needs one client at a time; equal to batched='off' up to
#     rounding, not bitwise
#     sequential: batched='auto' fell back to the sequential engine: MOON defines its own
#     local_loss, which runs one client's model (...)
# A backend whose clients run elsewhere (Flower's nodes) runs them one by one through
# :meth:`Simulation.client_round <bnfl.fl.Simulation.client_round>`: ``"auto"`` is sequential
# there and the line says so; a torch.distributed rank batches its own participants.
_NOT_BITWISE = "equal to batched='off' up to rounding, not bitwise"


def engine_line(mode: str, used: bool, why: str, *, model: str = "", algorithm: str = "") -> str:
    """The one-line account of the engine choice (``History.meta["batched"]["line"]``).

    Parameters
    ----------
    mode : {"off", "auto", "on"}
        ``TrainConfig.batched``.
    used : bool
        Whether the batched engine trains the clients.
    why : str
        :func:`bnfl.fl.batched.select_batched`'s reason (the obstacle when it fell back).
    model, algorithm : str
        Class names of the model and the algorithm, for the batched case's reason.
    """
    if used:
        if mode == "on":
            return f"batched: batched='on' ({_NOT_BITWISE})"
        arch = f" ({model})" if model else ""
        alg = f" in {algorithm}" if algorithm else ""
        return (f"batched: batched='{mode}' chose the batched engine: the clients share one architecture{arch} and "
                f"nothing{alg} or the model needs one client at a time; {_NOT_BITWISE}")
    if mode == "off":
        return "sequential: batched='off' (the reference engine, one client at a time; bitwise reproducible)"
    return f"sequential: batched='{mode}' fell back to the sequential engine: {why}"


def choose(sim: ClientHost) -> tuple[BatchedClients | None, dict[str, Any]]:
    """The batched engine of ``sim`` (``None``: sequential) and its ``History.meta["batched"]``
    entry: ``mode``, ``used``, ``why`` and ``line`` (:func:`engine_line`). Raises the
    ``ValueError`` of :func:`~bnfl.fl.batched.select_batched` under ``batched="on"`` when the run
    cannot be batched."""
    engine, why = select_batched(sim)
    mode, used = sim.config.batched, engine is not None
    line = engine_line(mode, used, why, model=type(sim.model).__name__, algorithm=type(sim.algorithm).__name__)
    return engine, {"mode": mode, "used": used, "why": why, "line": line}


def graphs_possible(device: torch.device) -> bool:
    """Whether ``DeviceOptions.cuda_graphs`` can capture on ``device`` (a CUDA device)."""
    return device.type == "cuda"


@torch.no_grad()
def _ema_global_stats(net: BatchedNet, step: CoupledStep, union_count: Mapping[str, int] | None,
                      rows: slice | None = None) -> None:
    r"""FedTAN eq. 6 for every client at once: each client's running statistics
    :math:`\bar S_k \leftarrow (1-\rho)\bar S_k + \rho(\bar\mu, \tfrac{m}{m-1}\bar\sigma^2)` with the
    global statistics of the coupled step, rows ``(K, C)`` against ``(C,)``:
    :func:`bnfl.fl.engine.ema_global_stats` applied to each client's model (same operations).
    ``rows``: only these clients' rows (one simulation's, of several stacked)."""
    for name, m in net.net.named_modules():
        if name not in step.layer_stats or not isinstance(m, _BatchNorm) or not m.track_running_stats:
            continue
        mean, var = step.layer_stats[name]
        count = union_count[name] if union_count is not None else sum(mom.count for mom in step.local_stats[name])
        rm, rv = net.buffers[f"{name}.running_mean"], net.buffers[f"{name}.running_var"]  # (K, C)
        nbt = net.buffers[f"{name}.num_batches_tracked"]
        if rows is not None:
            rm, rv, nbt = rm[rows], rv[rows], nbt[rows]
        nbt.add_(1)
        unbiased = Moments(count=count, mean=mean, var=var).unbiased_var()  # raises for count < 2
        rm.copy_(ema(rm, mean.to(rm.dtype), m.momentum))  # batching_obstacle: momentum is a number
        rv.copy_(ema(rv, unbiased.to(rv.dtype), m.momentum))


class _HookScope:
    """Per-client scratch of a user's algorithm whose hooks keep state between a client's calls in
    instance attributes (bnfl's own keep it in ``client.scratch``/``client.state``, one context per
    client): attributes a client's hook call rebinds are saved for that client and restored before
    its next call, as if the clients ran one by one."""

    def __init__(self, algs: Sequence[Any]) -> None:  # the rows' bnfl.fl.Algorithm objects
        self.algs = list(algs)  # row j's algorithm (several simulations' clients train together)
        self.saved: list[dict[str, Any]] = [{} for _ in self.algs]

    def call(self, j: int, hook: str, *args: Any) -> Any:
        alg = self.algs[j]
        d = vars(alg)
        d.update(self.saved[j])
        before = dict(d)
        out = getattr(alg, hook)(*args)
        self.saved[j].update({n: v for n, v in d.items() if before.get(n, _MISSING) is not v})
        return out


@dataclass(frozen=True, eq=False)  # identity: a row is a key of the results
class _Row:
    """One client of a batched computation: its simulation, id, what it received this round, its
    position among that simulation's participants, and its number of local steps."""

    sim: ClientHost
    client: int
    received: dict[str, Tensor]
    index: int
    steps: int


class BatchedClients(Clients):
    """The batched engine of one :class:`~bnfl.fl.Simulation` (built by :func:`select_batched`): its
    :class:`~bnfl.fl.clients.Clients` in this process, whose local steps run as one computation;
    requests and evaluation go one client at a time (:class:`~bnfl.fl.clients.Sequential`)."""

    def __init__(self, sim: ClientHost) -> None:
        self.sim = sim
        self.one_by_one = Sequential(sim)
        alg = sim.algorithm
        used = alg.view_hooks()
        self.hooks = {h: h in used for h in _CLIENT_HOOKS}
        #: one BatchedNet per number of clients trained together (built once, loaded every round)
        self._nets: dict[int, BatchedNet] = {}
        #: CUDA graphs, channels-last, TF32, bf16 (:mod:`bnfl.fl.device_options`; all off by default)
        self.options = DeviceOptions()
        #: per BatchedNet: its captured steps, and its momentum buffers and rate columns kept across rounds
        self._graphs: dict[int, dict[tuple, GraphedStep]] = {}
        self._static: dict[int, dict] = {}
        #: why a capture failed (the steps then run eagerly), or None
        self.graph_error: str | None = None

    # -- the Clients interface ----------------------------------------------------------------------
    def train(self, r: int, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float, frozen: bool,
              first: Any = None) -> tuple[list[int], list[dict[str, Tensor]], list[float]]:
        uploads, losses = self.run(r, clients, received, lr=lr, frozen=frozen, first=first)
        return list(clients), uploads, losses

    def exchange(self, step: Any, clients: Sequence[int], weights: Sequence[float], *, frozen: bool) -> Any:
        """Step 1 of the batched local steps (:meth:`defer_first_step`) where it can be, else the
        step itself with the channel's all-reduce."""
        deferred = self.defer_first_step(step, weights, frozen)
        return deferred if deferred is not None else self.one_by_one.exchange(step, clients, weights, frozen=frozen)

    def request(self, kind: str, clients: Sequence[int], state: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
        return self.one_by_one.request(kind, clients, state)

    def accuracies(self, clients: Sequence[int]) -> list[tuple[float, float]]:
        return self.one_by_one.accuracies(clients)

    def defer_first_step(self, step: Any, weights: Sequence[float],
                         frozen: bool) -> DeferredCoupledStep | None:
        """The round's coupled first ``step`` as step 1 of the batched local steps, or None when
        :meth:`CoupledFirstStep.run <bnfl.fl.algorithms._coupled.CoupledFirstStep.run>` must run it:
        only a step whose backward exchange is the autograd of its forward
        (:attr:`~bnfl.fl.algorithms._coupled.CoupledFirstStep.backward_is_autograd`: FedTAN's;
        FedAvg+Algorithm 2's local stat-gradients are not), local steps (one group of clients), BN
        not frozen, no ``client_start`` hook (it would run before the coupled step sequentially)."""
        if (not step.backward_is_autograd or frozen or self.sim.config.local_unit != "steps"
                or self.hooks["client_start"]):
            return None
        return DeferredCoupledStep(step, tuple(float(w) for w in weights))

    def run(self, r: int, clients: Sequence[int], received: Sequence[dict[str, Tensor]], *, lr: float, frozen: bool,
            first: CoupledStep | None) -> tuple[list[dict[str, Tensor]], list[float]]:
        """The uploads and mean losses of ``clients`` (this process's participants, in order) after
        their local steps of round ``r``; the batched counterpart of one
        :meth:`~bnfl.fl.Simulation.client_round` per client (same state updates)."""
        if not clients:  # a torch.distributed rank without participants this round
            return [], []
        rows = self._rows(r, clients, received)
        ups, ls, failed = self._group(r, sorted(rows, key=lambda row: -row.steps), lr=lr, frozen=frozen, first=first)
        if failed:
            raise failed[self.sim]
        return in_round_order(rows, ups, ls)

    def _rows(self, r: int, clients: Sequence[int], received: Sequence[dict[str, Tensor]]) -> list[_Row]:
        sim = self.sim
        steps = [sim._steps_this_round(c) for c in clients]
        if min(steps, default=1) < 1:
            raise ValueError(f"round {r}: a client has no local step ({steps})")
        # received[j] is what the j-th of ``clients`` got (a torch.distributed rank passes the
        # round's broadcast, one copy per participant, and trains the first len(clients) of them)
        return [_Row(sim, int(c), received[j], j, s) for j, (c, s) in enumerate(zip(clients, steps, strict=True))]

    def _group(self, r: int, rows: list[_Row], *, lr: float | Sequence[float], frozen: bool,
               first: CoupledStep | DeferredCoupledStep | Mapping[Any, DeferredCoupledStep] | None,
               ) -> tuple[dict[_Row, dict[str, Tensor]], dict[_Row, float], dict[ClientHost, Exception]]:
        """The clients ``rows`` (of one or several simulations with the same architecture,
        algorithm and optimiser settings) train ``row.steps`` local steps each, as one
        computation. ``rows`` come in order of non-increasing steps (stable), so at step ``t`` the
        first ``a_t`` clients (``steps >= t``) run and the others keep their state
        (:meth:`BatchedNet.first_clients`; local epochs over uneven data give uneven counts).
        ``lr``: the rate of every row, or one per row (runs of a learning-rate grid stacked
        together, :class:`StackedSGD`). Returns each row's upload and mean loss, and the error of
        each simulation one of whose clients diverged (nothing of that simulation's clients is
        kept then)."""
        sim = self.sim
        k = len(rows)
        steps = [row.steps for row in rows]
        states = []
        for row in rows:
            st = row.sim.client_state(row.client)
            st.update({key: v for key, v in row.received.items() if key in st})
            states.append(st)
        contexts = [row.sim.client_context(row.client, row.received) for row in rows]
        opts = self.options
        graphs = opts.cuda_graphs and graphs_possible(sim.device) and self.graph_error is None
        net = self._nets.get(k)
        if net is None:
            net = self._nets[k] = BatchedNet(sim.model, states)
        else:
            net.load(states, in_place=graphs)
        net.frozen = frozen
        net.channels_last = opts.channels_last
        need_views = any(self.hooks.values())
        views = [net.client_view(j) for j in range(k)] if need_views else []
        for v in views:
            (freeze_bn_stats if frozen else unfreeze_bn_stats)(v)
        scope = _HookScope([row.sim.algorithm for row in rows])
        if self.hooks["client_start"]:
            for j in range(k):
                scope.call(j, "client_start", contexts[j], r, views[j])
        opt = self._optimizer(net, [row.sim.algorithm.initial_momentum(ctx) for row, ctx in zip(rows, contexts, strict=True)], lr)
        client_opts = [ClientOptimizer(opt, v, j) for j, v in enumerate(views)]
        sizes = [ctx.batch_size for ctx in contexts]
        n = max(sizes)
        net.set_mask(sizes, n)
        deferred: dict[Any, DeferredCoupledStep] | None = None
        if isinstance(first, DeferredCoupledStep):
            deferred, first = {sim: first}, None
        elif isinstance(first, Mapping):  # several simulations' deferred steps (run_together)
            deferred, first = dict(first), None
        if first is not None and any(row.sim is not sim for row in rows):
            raise ValueError("a coupled first step couples one simulation's clients; train them apart")
        if deferred is not None and any(row.sim not in deferred for row in rows):
            raise ValueError("every stacked simulation needs its deferred coupled step")
        index = [row.index for row in rows]
        # a step may replay a graph when no hook acts on it (an algorithm's after_step_first_only:
        # its after_step acts on step 1 only, FedTAN's)
        quiet = not self.hooks["after_step"] or all(getattr(row.sim.algorithm, "after_step_first_only", False)
                                                    for row in rows)
        steady_ok = (graphs and net.mask is None and not self.hooks["adjust_grads"] and quiet
                     and k * n <= opts.graph_max_images)  # a graph pays where the step is launch-bound
        with opts.precision(sim.device):
            step_losses = self._steps(r, net, opt, rows, contexts, views, client_opts, scope, k, n, sizes,
                                             steps, index, deferred, first, frozen, steady_ok)
        per_step = torch.stack(step_losses)  # (steps, K)
        failed = self._check(per_step, rows, r)
        totals = per_step.tolist()  # summed in Python in step order, as client_round does
        means = {row: sum(t[j] for t in totals[:row.steps]) / row.steps for j, row in enumerate(rows)}
        return self._finish(net, opt, rows, contexts, views, scope, lr, failed, copy=graphs), means, failed

    def _steps(self, r: int, net: BatchedNet, opt: StackedSGD, rows: list[_Row], contexts: list, views: list,
               client_opts: list, scope: _HookScope, k: int, n: int, sizes: list[int], steps: list[int],
               index: list[int], deferred: Mapping[Any, DeferredCoupledStep] | None, first: CoupledStep | None,
               frozen: bool, steady_ok: bool) -> list[Tensor]:
        """The local steps of :meth:`_group`; returns each step's ``(K,)`` losses (clients that
        finished: 0). ``steady_ok``: steps after the first with every client training may replay
        a captured CUDA graph (:meth:`_replay`)."""
        sim = self.sim
        names = list(net.params)
        coupled = {} if first is None else {sim: first}  # each simulation's coupled step of this round
        step_losses = []  # (K,) per step; checked and read once, after the steps (no sync per step)
        for t in range(1, steps[0] + 1):
            a = sum(1 for s in steps if s >= t)  # clients still training: the first a
            if steady_ok and t > 1 and a == k:
                x, y = self._next_batches(rows, n)  # (K*n, ...)
                loss = self._replay(net, opt, x, y, k, n, sizes, frozen)
                if loss is not None:
                    step_losses.append(loss)
                    continue
                steady_ok = False  # the capture failed: eager from here (graph_error says why)
            opt.zero_grad()
            if t == 1 and deferred is not None:
                loss, coupled = self._coupled_step(net, rows, k, n, sizes, deferred, index)
            elif t == 1 and first is not None:
                loss = torch.stack([first.losses[i].detach() for i in index])  # (K,)
                for name in names:
                    if name in first.grads[index[0]]:
                        net.params[name].grad = torch.stack([first.grads[i][name] for i in index])  # (K, *shape)
                _ema_global_stats(net, first, sim._union_count)
            else:
                x, y = self._next_batches(rows[:a], n)  # (a*n, ...)
                with net.first_clients(a):
                    with self.options.autocast(sim.device):
                        out = net(x)
                    loss = self._losses(out, y, a, n, net.mask, sizes[:a])  # (a,)
                    del out  # (nothing may keep this step's autograd graph alive: a graph capture follows)
                loss.sum().backward()
            if self.hooks["adjust_grads"]:
                for j in range(a):
                    net.sync_grads(j)
                    scope.call(j, "adjust_grads", contexts[j], views[j])
                    net.collect_grads(j)
            opt.step(None if a == k else a)
            if self.hooks["after_step"]:
                for j in range(a):
                    scope.call(j, "after_step", contexts[j], t, views[j], client_opts[j], coupled.get(rows[j].sim))
            loss = loss.detach()
            step_losses.append(loss if a == k else torch.cat([loss, loss.new_zeros(k - a)]))  # finished: 0
        return step_losses

    def _replay(self, net: BatchedNet, opt: StackedSGD, x: Tensor, y: Tensor, k: int, n: int, sizes: list[int],
                frozen: bool) -> Tensor | None:
        """One steady local step as a replayed CUDA graph (captured on first use for this net, batch
        shape, learning rate(s) and frozen phase; :mod:`bnfl.fl.device_options`): the same
        forward, loss, backward and update as the eager step. The momentum buffers and per-row rate
        columns are moved into tensors the net keeps across rounds (the graph reads those). Returns
        the ``(K,)`` losses, or None when the capture failed (``graph_error``; eager from then on)."""
        static = self._static.setdefault(id(net), {"momentum": {}, "columns": {}})
        with torch.no_grad():
            for p in opt.params:
                buf = opt.state.get(p, {}).get("momentum_buffer")
                if buf is None:
                    continue
                kept = static["momentum"].get(id(p))
                if kept is None or kept[0] is not p:
                    kept = static["momentum"][id(p)] = (p, buf.clone())
                elif kept[1] is not buf:
                    kept[1].copy_(buf)
                opt.state[p]["momentum_buffer"] = kept[1]
        rates = tuple(opt.row_lr) if opt.row_lr is not None else (opt.param_groups[0]["lr"],)
        opt._columns = static["columns"].setdefault(rates, {})
        key = (tuple(x.shape), x.dtype, tuple(y.shape), rates, frozen)
        graphs = self._graphs.setdefault(id(net), {})
        step = graphs.get(key)
        if step is None:
            device = self.sim.device

            def body(xs: Tensor, ys: Tensor) -> Tensor:
                opt.zero_grad()  # (the backward writes fresh gradients)
                with self.options.autocast(device):
                    out = net(xs)
                loss = self._losses(out, ys, k, n, None, sizes)
                loss.sum().backward()
                opt.step(None)
                return loss.detach()

            def warm(xs: Tensor, ys: Tensor) -> None:  # a forward and backward that leave no trace
                kept = {name: b.clone() for name, b in net.buffers.items()}
                opt.zero_grad()
                with self.options.autocast(device):
                    out = net(xs)
                self._losses(out, ys, k, n, None, sizes).sum().backward()
                opt.zero_grad()
                with torch.no_grad():
                    for name, b in net.buffers.items():
                        b.copy_(kept[name])

            if opt.row_lr is not None:  # the rate columns exist before the capture (a host copy cannot be captured)
                for q in opt.params:
                    opt._column(q, q.shape[0])
            while len(graphs) >= _GRAPHS_KEPT:  # e.g. a rate that changes every round: the oldest graphs go
                graphs.pop(next(iter(graphs)))
            gc.collect()  # no earlier step's autograd graph alive (its gradient accumulators are on another stream)
            try:
                step = graphs[key] = GraphedStep(body, x, y, warm=warm)
            except Exception as err:  # noqa: BLE001 - reported; the steps run eagerly
                self.graph_error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                opt.zero_grad()
                return None
            step.keep = [p.grad for p in opt.params]  # the graph's gradients stay allocated
        return step(x, y)

    # -- pieces ---------------------------------------------------------------------------------
    def _coupled_step(self, net: BatchedNet, rows: list[_Row], k: int, n: int, sizes: list[int],
                      deferred: Mapping[Any, DeferredCoupledStep], index: list[int],
                      ) -> tuple[Tensor, dict[Any, CoupledStep]]:
        r"""FedTAN's first local step (Algorithms 1-3) on the stacked clients: the forward with
        coupled BN (eqs. 39-40 through the channel's all-reduce), the backward of
        :math:`T=\sum_i p_i F_i` (eq. 41's stat-gradient all-reduce is the autograd of the
        all-reduce; counted when the backward passes it), per-client gradients
        :math:`g_i = p_i^{-1}\partial T/\partial w_i` in ``.grad``, and FedTAN eq. 6 on the
        running statistics. What :func:`bnfl.fl.coupled.coupled_first_step` and the sequential
        step 1 compute, with the same channel accounting; returns the losses (K,) and each
        simulation's step. Several simulations stacked (``deferred``: each one's step, their rows
        contiguous): each all-reduce pools one simulation's rows through its own channel, and
        :math:`\sum_s T_s` is differentiated at once (simulations share no parameter)."""
        x, y = self._next_batches(rows, n)  # (K*n, ...)
        sims = list(dict.fromkeys(row.sim for row in rows))
        spans = []  # each simulation's rows: a slice (rows of one simulation are contiguous)
        at = 0
        for s in sims:
            m = sum(1 for row in rows if row.sim is s)
            if any(row.sim is not s for row in rows[at:at + m]):
                raise ValueError("the rows of a simulation in a stacked coupled step must be contiguous")
            spans.append(slice(at, at + m))
            at += m
        p = torch.tensor([deferred[row.sim].weights[i] for row, i in zip(rows, index, strict=True)],
                         dtype=x.dtype, device=x.device)  # (K,)
        owner = None if len(sims) == 1 else torch.tensor([g for g, sl in enumerate(spans)
                                                          for _ in range(sl.stop - sl.start)], device=x.device)

        def stat_grads(layer: str, size: int) -> Callable[[Tensor], None]:
            def count(_g: Tensor) -> None:  # eq. 41: [dT/dmu | dT/dsigma^2] all-reduced in the backward
                for s, sl in zip(sims, spans, strict=True):
                    ks = sl.stop - sl.start
                    s.channel.count("allreduce", f"{layer}.stat-grads", up=size * ks, down=size, clients=ks,
                                    closes_round=True)
            return count

        def reduce(layer: str, kind: str, parts: Tensor) -> Tensor:
            if owner is None:  # one simulation: its channel's all-reduce
                out = sims[0].channel.allreduce(parts, p, tag=f"{layer}.{kind}")
            else:  # each simulation's rows pooled apart, one op; each channel counts its all-reduce
                out = parts.new_zeros(len(sims), parts.shape[1]).index_add(0, owner, parts * p[:, None])  # (S, C)
                size = parts.shape[1] * parts.element_size()
                for s, sl in zip(sims, spans, strict=True):
                    ks = sl.stop - sl.start
                    s.channel.count("allreduce", f"{layer}.{kind}", up=size * ks, down=size, clients=ks,
                                    closes_round=True)
            if kind == "mean" and out.requires_grad:
                out.register_hook(stat_grads(layer, 2 * parts.shape[1] * parts.element_size()))
            return out if owner is None else out[owner]  # (C,), or (K, C): each row its simulation's

        net.couple, net.coupled_stats = reduce, {}
        try:
            out = net(x)
        finally:
            net.couple = None
        loss = self._losses(out, y, k, n, net.mask, sizes)  # (K,) F_i
        (loss * p).sum().backward()
        grads = {}
        with torch.no_grad():
            for name, q in net.params.items():
                if q.grad is not None:
                    q.grad.div_(p.reshape(-1, *([1] * (q.grad.dim() - 1))))  # p_i g_i -> g_i
                    grads[name] = q.grad.unbind(0)
        stats = net.coupled_stats
        steps = {}
        for s, sl in zip(sims, spans, strict=True):
            js = range(sl.start, sl.stop)
            first = sl.start  # a row of this simulation: its global statistics
            steps[s] = step = CoupledStep(
                grads=[{name: g[j] for name, g in grads.items()} for j in js], losses=loss.detach()[sl],
                layer_stats={layer: (gm.detach(), gv.detach()) if owner is None else
                             (gm.detach()[first], gv.detach()[first]) for layer, (_, _, _, gm, gv) in stats.items()},
                local_stats={layer: [Moments(count=cnt[j], mean=mk[j], var=vk[j]) for j in js]
                             for layer, (mk, vk, cnt, _, _) in stats.items()})
            _ema_global_stats(net, step, s._union_count, rows=None if owner is None else sl)
        net.coupled_stats = {}  # (its global moments hold the autograd graph)
        return loss, steps

    def _next_batches(self, rows: Sequence[_Row], n: int) -> tuple[Tensor, Tensor]:
        """Each client's next mini-batch (its own stream), concatenated: ``(len(rows)*n, ...)``;
        a smaller batch is padded to ``n`` rows with copies of its first sample (masked out).
        Clients of simulations that share their training samples are gathered at once; with
        ``config.augment`` every block gets the crops and flips the sequential engine gives it
        (:func:`bnfl.fl.augment.augment_rows`)."""
        ids = [row.sim.next_batch_ids(row.client) for row in rows]
        owners = [row.sim for row in rows]
        augmenters = [o._augment for o in owners]
        drawn = [BatchAugmenter.drawn(row.sim.cursors, row.client, i.shape[0]) for row, i in zip(rows, ids, strict=True)] \
            if any(a is not None for a in augmenters) else []
        flat = _padded(ids, n)  # (len(rows)*n,)
        if all(o is owners[0] or same_samples(o, owners[0]) for o in owners):
            x, y = owners[0]._samples(flat)
        else:
            parts = [o._samples(i) for o, i in zip(owners, flat.split(n), strict=True)]
            x, y = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
        if not drawn:
            return x, y
        return augment_rows(x, augmenters, drawn, n), y  # the sequential engine's crops and flips

    def _optimizer(self, net: BatchedNet, bufs: Sequence[dict[str, Tensor] | None],
                   lr: float | Sequence[float]) -> StackedSGD:
        """One SGD over the stacked parameters; momentum buffers stacked from each client's initial
        ones (``bufs``: :meth:`Algorithm.initial_momentum <bnfl.fl.Algorithm.initial_momentum>`),
        zero rows for clients without."""
        cfg = self.sim.config
        opt = StackedSGD([p for p in net.params.values() if p.requires_grad], lr=lr, momentum=cfg.momentum,
                         weight_decay=cfg.weight_decay)
        if cfg.momentum <= 0 or not any(bufs):
            return opt
        with torch.no_grad():
            for name, p in net.params.items():
                rows = [b[name] if b and name in b else torch.zeros_like(p[0]) for b in bufs]
                opt.state.setdefault(p, {})["momentum_buffer"] = torch.stack(rows)  # (K, *shape)
        return opt


    def _losses(self, out: Tensor, y: Tensor, k: int, n: int, mask: Tensor | None, sizes: list[int]) -> Tensor:
        """(K,) each client's batch-mean loss over its real rows (``sim.loss_fn`` per client unless
        it is the default cross-entropy on class labels, then one per-sample call)."""
        sim = self.sim
        if sim.loss_fn is _cross_entropy and y.dim() == 1 and not y.is_floating_point():
            per = F.cross_entropy(out, y, reduction="none").reshape(k, n)  # (K*n,) -> (K, n)
            if mask is None:
                return per.mean(1)
            return (per * mask.to(per.dtype)).sum(1) / torch.tensor(sizes, dtype=per.dtype, device=per.device)
        outs, ys = out.reshape(k, n, *out.shape[1:]), y.reshape(k, n, *y.shape[1:])  # (K*n, ...) -> (K, n, ...)
        return torch.stack([sim.loss_fn(outs[j, :sizes[j]], ys[j, :sizes[j]]).reshape(()) for j in range(k)])

    @staticmethod
    def _check(losses: Tensor, rows: Sequence[_Row], r: int) -> dict[ClientHost, Exception]:
        """``losses`` of shape (steps, K): in each simulation, the first client (in its round
        order, ``row.index``) with a non-finite loss diverged, as the sequential engine reports it
        (no client's state has been kept yet); returns each such simulation's error."""
        failed: dict[ClientHost, Exception] = {}
        if bool(torch.isfinite(losses).all()):
            return failed
        bad = ~torch.isfinite(losses)  # (steps, K)
        for j in sorted((int(q) for q in bad.any(0).nonzero()[:, 0]), key=lambda q: rows[q].index):
            row = rows[j]
            if row.sim in failed:
                continue
            t = int(bad[:, j].nonzero()[0, 0])
            try:
                row.sim._check_loss(losses[t, j], row.client, r)
            except Exception as err:  # DivergenceError, with the history so far
                failed[row.sim] = err
        return failed

    def _finish(self, net: BatchedNet, opt: StackedSGD, rows: Sequence[_Row], contexts: list, views: list,
                scope: _HookScope, lr: float | Sequence[float], failed: Mapping[ClientHost, Exception],
                *, copy: bool = False) -> dict[_Row, dict[str, Tensor]]:
        """Keep each client's local state and momentum, return its upload (client_round's end);
        the clients of a simulation in ``failed`` keep nothing."""
        # every client's row of every tensor: (K, *shape) -> K views (*shape). The stacked tensors
        # are this round's own (the next round stacks new ones), so uploads may be views; what a
        # client keeps is cloned row by row (a kept view would hold all K rows' memory)
        tensors = {name: t.detach().unbind(0) for name, t in (*net.params.items(), *net.buffers.items())}
        mom: dict[str, tuple[Tensor, ...]] = {}

        def momentum(j: int) -> dict[str, Tensor]:  # client j's buffers, stacked rows unbound on first use
            if not mom:
                for name, p in net.params.items():
                    buf = opt.state.get(p, {}).get("momentum_buffer")
                    mom[name] = (buf if buf is not None else torch.zeros_like(p.detach())).unbind(0)
            return {name: b[j].clone() for name, b in mom.items()}
        uploads = {}
        for j, row in enumerate(rows):
            if row.sim in failed:
                continue

            def extra(j: int = j, row: _Row = row) -> Mapping[str, Tensor]:
                if not self.hooks["extra_upload"]:
                    return {}
                return scope.call(j, "extra_upload", contexts[j], views[j], row.steps, opt.lr_of(j))

            # copy: the stacked tensors are kept for the next round
            uploads[row] = row.sim.keep_client(row.client, contexts[j], {key: rows_[j] for key, rows_ in tensors.items()},
                                               extra=extra, momentum=lambda j=j: momentum(j), copy_upload=copy)
        return uploads


def _padded(ids: Sequence[Tensor], n: int) -> Tensor:
    """The clients' batch ids concatenated, each padded to ``n`` with copies of its first id:
    ``(len(ids)*n,)``, by one gather instead of one concatenation per short batch."""
    flat = torch.cat(list(ids))  # (sum of sizes,)
    if flat.shape[0] == n * len(ids):
        return flat
    sizes = torch.tensor([i.shape[0] for i in ids], device=flat.device)  # (K,)
    starts = torch.cumsum(sizes, 0) - sizes  # (K,)
    pos = torch.arange(n, device=flat.device)[None, :]  # (1, n)
    at = starts[:, None] + torch.where(pos < sizes[:, None], pos, 0)  # (K, n): padding -> the first id
    return flat[at.reshape(-1)]
