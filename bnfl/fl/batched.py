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
  (:func:`bnfl.fl.batched_step.coupled_step`, eqs. 39-41 and 6). FedAvg+Algorithm 2 (local
  stat-gradients) and backends with their own exchange (torch.distributed, Flower) keep
  :func:`bnfl.fedtan.coupled_step`, whose gradients then enter step 1.

The losses are checked for divergence and read once per round (no device sync per step). On a
``torch.distributed`` rank the engine batches the rank's own participants (none in some rounds).

HBN's and FBN's hooks run on the per-client views; their layers are batched (:mod:`bnfl.nn.batched_norms`).

What cannot be batched (what :meth:`Algorithm.batching_obstacle <bnfl.fl.Algorithm.batching_obstacle>`
names: an algorithm with its own ``local_loss``, MOON, FedSAM, HBN on them, HBN's moving-average and
fixed-alpha ablations; a model with layers :func:`~bnfl.nn.batched.batching_obstacle` refuses:
weight-standardised convolutions, dropout) runs sequentially under ``batched="auto"`` and raises under
``batched="on"``. The results equal the sequential engine's up to rounding (float64: 1e-12; float32:
1e-5, see ``tests/test_fl_batched.py``), not bitwise; ``TrainConfig.batched`` defaults to ``"auto"``
and ``"off"`` is the bitwise reference (:func:`bnfl.fl.batched_choice.choose`).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from bnfl.fedtan import CoupledStep
from bnfl.fl._evaluate import _cross_entropy
from bnfl.fl.augment import BatchAugmenter, augment_rows
from bnfl.fl.batched_sgd import ClientOptimizer, StackedSGD
from bnfl.fl.batched_step import (
    client_losses,
    coupled_step,
    ema_stacked_stats,
    forward_backward,
    in_round_order,
    padded,
    simulation_spans,
)
from bnfl.fl.clients import Clients, Sequential
from bnfl.fl.device_options import DeviceOptions, GraphedStep
from bnfl.nn import freeze_bn_stats, unfreeze_bn_stats
from bnfl.nn.batched import BatchedNet

if TYPE_CHECKING:
    from bnfl.fl._host import ClientHost

__all__ = ["BATCHED_MODES", "BatchedClients", "DeferredCoupledStep", "StackedSGD", "graphs_possible", "in_round_order",
           "same_samples"]

#: ``TrainConfig.batched``: never, where possible, or always (an error naming the obstacle).
BATCHED_MODES = ("off", "auto", "on")
_CLIENT_HOOKS = ("client_start", "adjust_grads", "after_step", "extra_upload")
#: captured CUDA graphs kept per stacked net (shapes, rates, frozen phase); older ones are freed
_GRAPHS_KEPT = 4
_MISSING = object()


@dataclass(frozen=True)
class DeferredCoupledStep:
    """The algorithm's coupled first step left to the batched engine (:meth:`~bnfl.fl.batched.BatchedClients.defer_first_step`):
    step 1 of the round's local steps runs the BN layers coupled (:func:`~bnfl.nn.batched.coupled_batch_norm`)
    with the participants' weights ``weights`` (:math:`p_i`, in the order of the participants)."""

    step: Any  # the algorithm's CoupledFirstStep (bnfl.fl.algorithms, which sits above this engine's pieces)
    weights: tuple[float, ...]


def same_samples(a: ClientHost, b: ClientHost) -> bool:
    """Whether two simulations hold the same training tensors (the same data loaded once: seeds
    of one configuration differ in their partition, not in their samples)."""
    return a.sample_rows is None and b.sample_rows is None and a.x_train is b.x_train and a.y_train is b.y_train


def graphs_possible(device: torch.device) -> bool:
    """Whether ``DeviceOptions.cuda_graphs`` can capture on ``device`` (a CUDA device)."""
    return device.type == "cuda"


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
    """The batched engine of one :class:`~bnfl.fl.Simulation` (built by :func:`bnfl.fl.batched_choice.select_batched`): its
    :class:`~bnfl.fl.clients.Clients` in this process, whose local steps run as one computation;
    requests and evaluation go one client at a time (:class:`~bnfl.fl.clients.Sequential`)."""

    def __init__(self, sim: ClientHost) -> None:
        self.sim = sim
        self.one_by_one = Sequential(sim)
        alg = sim.algorithm
        used = alg.view_hooks()
        self.hooks = {h: h in used for h in _CLIENT_HOOKS}
        self.per_sample = sim.loss_fn is _cross_entropy  # the default loss: one per-sample call for all rows
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
    def train(self, r: int, plan: Any, clients: list[int], received: Sequence[dict[str, Tensor]], *, lr: float,
              start: Mapping[str, Tensor], first: Any = None) -> tuple[list[int], list[dict[str, Tensor]], list[float]]:
        self.sim.start_round(start, plan)
        uploads, losses = self.run(r, clients, received, lr=lr, frozen=plan.freeze_bn, first=first)
        return list(clients), uploads, losses

    def exchange(self, step: Any, clients: Sequence[int], weights: Sequence[float], *, plan: Any,
                 start: Mapping[str, Tensor]) -> Any:
        """Step 1 of the batched local steps (:meth:`defer_first_step`) where it can be, else the
        step itself with the channel's all-reduce."""
        self.sim.start_round(start, plan)
        deferred = self.defer_first_step(step, weights, plan.freeze_bn)
        return deferred if deferred is not None else self.one_by_one.exchange(step, clients, weights, plan=plan,
                                                                               start=start)

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
        rows = self.rows_of(r, clients, received)
        ups, ls, failed = self._group(r, sorted(rows, key=lambda row: -row.steps), lr=lr, frozen=frozen, first=first)
        if failed:
            raise failed[self.sim]
        return in_round_order(rows, ups, ls)

    def rows_of(self, r: int, clients: Sequence[int], received: Sequence[dict[str, Tensor]]) -> list[_Row]:
        sim = self.sim
        steps = [sim.steps_this_round(c) for c in clients]
        if min(steps, default=1) < 1:
            raise ValueError(f"round {r}: a client has no local step ({steps})")
        # received[j] is what the j-th of ``clients`` got (a torch.distributed rank passes the
        # round's broadcast, one copy per participant, and trains the first len(clients) of them)
        return [_Row(sim, int(c), received[j], j, s) for j, (c, s) in enumerate(zip(clients, steps, strict=True))]

    def _group(self, r: int, rows: list[_Row], *, lr: float | Sequence[float], frozen: bool,
               first: CoupledStep | DeferredCoupledStep | Mapping[Any, DeferredCoupledStep] | None,
               apart: bool = False,
               ) -> tuple[dict[_Row, dict[str, Tensor]], dict[_Row, float], dict[ClientHost, Exception]]:
        """The clients ``rows`` (of one or several simulations with the same architecture,
        algorithm and optimiser settings) train ``row.steps`` local steps each, as one
        computation. ``rows`` come in order of non-increasing steps (stable), so at step ``t`` the
        first ``a_t`` clients (``steps >= t``) run and the others keep their state
        (:meth:`BatchedNet.first_clients`; local epochs over uneven data give uneven counts).
        ``lr``: the rate of every row, or one per row (runs of a learning-rate grid stacked
        together, :class:`StackedSGD`). Returns each row's upload and mean loss, and the error of
        each simulation one of whose clients diverged (nothing of that simulation's clients is
        kept then). ``apart``: BN layers of unaligned width run per simulation (:attr:`BatchedNet.apart`)."""
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
        net.apart = simulation_spans(rows) if apart else None
        try:
            with opts.precision(sim.device):
                step_losses = self._steps(r, net, opt, rows, contexts, views, client_opts, scope, k, n, sizes,
                                          steps, index, deferred, first, frozen, steady_ok)
        finally:
            net.apart = None
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
                ema_stacked_stats(net, first, sim.union_count)
            else:
                x, y = self._next_batches(rows[:a], n)  # (a*n, ...)
                loss = forward_backward(net, x, y, a, n, sizes, loss_fn=sim.loss_fn, per_sample=self.per_sample,
                                        autocast=lambda: self.options.autocast(sim.device))  # (a,)
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
                loss = client_losses(out, ys, k, n, None, sizes, self.sim.loss_fn, per_sample=self.per_sample)
                loss.sum().backward()
                opt.step(None)
                return loss.detach()

            def warm(xs: Tensor, ys: Tensor) -> None:  # a forward and backward that leave no trace
                kept = {name: b.clone() for name, b in net.buffers.items()}
                opt.zero_grad()
                with self.options.autocast(device):
                    out = net(xs)
                client_losses(out, ys, k, n, None, sizes, self.sim.loss_fn, per_sample=self.per_sample).sum().backward()
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
                      deferred: Mapping[Any, DeferredCoupledStep], index: list[int]) -> tuple[Tensor, dict]:
        """FedTAN's first local step on the rows' next batches (:func:`~bnfl.fl.batched_step.coupled_step`)."""
        x, y = self._next_batches(rows, n)  # (K*n, ...)
        return coupled_step(net, x, y, rows, k, n, sizes, deferred, index, self.sim.loss_fn, self.per_sample)

    def _next_batches(self, rows: Sequence[_Row], n: int) -> tuple[Tensor, Tensor]:
        """Each client's next mini-batch (its own stream), concatenated: ``(len(rows)*n, ...)``;
        a smaller batch is padded to ``n`` rows with copies of its first sample (masked out).
        Clients of simulations that share their training samples are gathered at once; with
        ``config.augment`` every block gets the crops and flips the sequential engine gives it
        (:func:`bnfl.fl.augment.augment_rows`)."""
        ids = [row.sim.next_batch_ids(row.client) for row in rows]
        owners = [row.sim for row in rows]
        augmenters = [o.augmenter for o in owners]
        drawn = [BatchAugmenter.drawn(row.sim.cursors, row.client, i.shape[0]) for row, i in zip(rows, ids, strict=True)] \
            if any(a is not None for a in augmenters) else []
        flat = padded(ids, n)  # (len(rows)*n,)
        if all(o is owners[0] or same_samples(o, owners[0]) for o in owners):
            x, y = owners[0].samples_of(flat)
        else:
            parts = [o.samples_of(i) for o, i in zip(owners, flat.split(n), strict=True)]
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
                row.sim.check_loss(losses[t, j], row.client, r)
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


