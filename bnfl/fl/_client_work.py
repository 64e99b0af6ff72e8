"""The clients' side of a run, written once: one client's round (its local steps and the epilogue
that keeps its state and makes its upload), its batches, its statistics and its accuracy.

:class:`ClientWork` holds these pieces over the clients' state (their local state groups,
algorithm state, batch cursors, this process's training samples); the
:class:`~bnfl.fl.Simulation` uses them for the clients it trains itself (through
:class:`~bnfl.fl.clients.Sequential` or the batched engine), a Flower node's
:class:`~bnfl.fl.flower_client.ClientRunner` for its one client. Neither is a backend of the
other: both are built from the same :meth:`ClientWork._set_up_clients`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bnfl.data.datasets import as_index_array
from bnfl.data.stored import decode, keep_or_move
from bnfl.fedtan import CoupledStep
from bnfl.fl import fast_path
from bnfl.fl._evaluate import accuracy, ema_global_stats
from bnfl.fl._local import LocalOptimizerMixin
from bnfl.fl.augment import make_augmenter
from bnfl.fl.batch_orders import BatchOrders
from bnfl.fl.context import ClientContext, ServerContext
from bnfl.fl.state import state_groups
from bnfl.nn import unfreeze_bn_stats

__all__ = ["ClientWork"]


class ClientWork(LocalOptimizerMixin):
    """The clients' state and one client's work (see the module docstring). A class that uses it
    calls :meth:`_set_up_clients` once, holds a ``history`` (the rounds a divergence error keeps)
    and defines ``_stop(why)`` (raise on a diverged client)."""

    def _set_up_clients(self, model: nn.Module, data: Any, algorithm: Any, config: Any, *,
                        loss_fn: Callable[[Tensor, Tensor], Tensor],
                        samples: Callable[[Any, torch.device, torch.dtype], tuple[Tensor, Tensor, Tensor | None]],
                        request: Callable[..., Any]) -> None:
        """The clients' state of a run of ``model`` on ``data`` with ``algorithm`` and ``config``: the
        key lists (by layer type), the initial global and local state, each client's store, the
        training samples ``samples(data, device, dtype)`` keeps, the :class:`ServerContext` the
        hooks see (``request``: its statistics request)."""
        self.config = config
        self.algorithm = algorithm
        self.loss_fn = loss_fn
        self.device = torch.device(self.config.device)
        self.model_dtype = dtype = getattr(torch, self.config.dtype)
        self.model = copy.deepcopy(model).to(device=self.device, dtype=dtype)
        #: the training samples this process holds; ``sample_rows`` maps a sample id to its row (None: all, in order)
        self.x_train, self.y_train, self.sample_rows = samples(data, self.device, dtype)
        self.x_test = keep_or_move(data.x_test, self.device, dtype)  # stored uint8 pixels stay on the host
        self.y_test = data.y_test.to(self.device)
        self.data = data
        #: the clients' sample ids and the local batch size, as the algorithm partitions them at build
        #: time (centralized learning: all clients pooled into one, batch N*B)
        self.client_indices, self.batch_size = algorithm.partition(data.clients, self.config.batch_size)
        self.num_clients = len(self.client_indices)
        groups = state_groups(self.model)
        self.groups = groups
        keys = list(self.model.state_dict().keys())
        local = set(groups["bn_count"]).union(*(groups[g] for g in algorithm.local_state))
        server = set().union(*(groups[g] for g in algorithm.server_state)) - local
        self.local_keys = [k for k in keys if k in local]
        self.download_keys = [k for k in keys if k not in local]
        self.upload_keys = [k for k in keys if k not in local and k not in server]
        #: the global state under the clients' own: what a client starts a round from where it
        #: received nothing (and a coupled first step loads), and what :meth:`client_state` lays its
        #: local state over. The run's global state between rounds; its start state during one
        #: (what the backend hands :meth:`start_round`); on a Flower node, what the server sent.
        self.base_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.init_local = {k: self.base_state[k].clone() for k in self.local_keys}
        self.client_local: dict[int, dict[str, Tensor]] = {}
        self.client_algorithm: dict[int, dict[str, Any]] = {}  # each client's ClientContext.state
        self.cursors = {c: [0, 0] for c in range(self.num_clients)}  # epoch, batch position
        #: the message plan of the current round (:meth:`Algorithm.round_plan <bnfl.fl.Algorithm.round_plan>`),
        #: as the backend handed it (:meth:`start_round`)
        self.plan = algorithm.round_plan(1)
        #: what the algorithm's hooks see (:mod:`bnfl.fl.context`); they never see the Simulation
        self.server = ServerContext(model=self.model, config=self.config, groups=groups, upload_keys=self.upload_keys,
                                    download_keys=self.download_keys, local_keys=self.local_keys,
                                    client_sizes=[len(i) for i in self.client_indices], weighting=algorithm.weighting,
                                    device=self.device, request=request)
        self.work_model = copy.deepcopy(self.model)
        self._eval_model = copy.deepcopy(self.model)
        self._orders: BatchOrders | None = None  # the clients' batch orders, on first use
        #: per BN layer, the union's element count of the coupled first step when this process
        #: holds only some of its clients (set by a distributed backend); None: sum the step's own
        self.union_count: dict[str, int] | None = None
        #: training-time augmentation of every drawn batch (:mod:`bnfl.fl.augment`), or None
        self.augmenter = make_augmenter(self.config, data)

    def start_round(self, start: Mapping[str, Tensor], plan: Any) -> None:
        """What a backend hands the store of the clients it trains, from the values
        :meth:`Clients.train <bnfl.fl.clients.Clients.train>` received: the global state the
        clients start the round from (where they received nothing) and the round's plan."""
        self.base_state, self.plan = start, plan

    # -- a client's data and batches -----------------------------------------------------------------
    def client_context(self, c: int, received: dict[str, Tensor] | None = None) -> ClientContext:
        """What the algorithm's client hooks see of client ``c`` (:class:`~bnfl.fl.context.ClientContext`)."""
        idx = np.asarray(self.client_indices[c])
        return ClientContext(server=self.server, client=c, indices=idx, received=received or {},
                             first_participation=c not in self.client_local, batch_size=min(self.batch_size, len(idx)),
                             loss_fn=self.loss_fn, data=lambda: self._client_data(c),
                             state=dict(self.client_algorithm.get(c, {})))

    def samples_of(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """The training samples with ids ``ids`` (a 1-D integer tensor on the device)."""
        rows = ids if self.sample_rows is None else self.sample_rows.index_select(0, ids)
        x = self.x_train.index_select(0, rows.to(self.x_train.device))  # = x[rows], faster
        return self._decode(x), self.y_train.index_select(0, rows)

    def _decode(self, x: Tensor) -> Tensor:
        """Stored uint8 pixels standardised on the device (:mod:`bnfl.data.stored`); other data as it is."""
        return decode(x, self.data.stored_norm, self.device, self.model_dtype)

    def _client_data(self, c: int) -> tuple[Tensor, Tensor]:
        return self.samples_of(torch.as_tensor(self.client_indices[c], device=self.device))

    def _epoch_batches(self, c: int, epoch: int) -> Sequence[Tensor]:
        # = list(iterate_batches(idx, min(B, n_c), seed=seed * 1_000_003 + c, epoch=epoch, drop_last=True)),
        # drawn for many clients and epochs at once (bitwise the same streams)
        if self._orders is None:
            self._orders = BatchOrders([as_index_array(i) for i in self.client_indices], self.batch_size,
                                       self.config.seed)
        return self._orders.batches(c, epoch, self.cursors)

    def next_batch(self, c: int) -> tuple[Tensor, Tensor]:
        """Client ``c``'s next mini-batch of its endless, epoch-shuffled stream (augmented when
        ``config.augment`` says so: :mod:`bnfl.fl.augment`)."""
        ids = self.next_batch_ids(c)
        x, y = self.samples_of(ids)
        return (x, y) if self.augmenter is None else (self.augmenter.augment(x, self.augmenter.drawn(self.cursors, c, len(ids))), y)

    def next_batch_ids(self, c: int) -> Tensor:
        """The sample ids of client ``c``'s next mini-batch (:meth:`next_batch` without the samples)."""
        epoch, pos = self.cursors[c]
        batches = self._epoch_batches(c, epoch)
        if pos >= len(batches):
            epoch, pos = epoch + 1, 0
            batches = self._epoch_batches(c, epoch)
        self.cursors[c] = [epoch, pos + 1]
        return batches[pos] if self.device.type == "cpu" else batches[pos].to(self.device)

    def steps_this_round(self, c: int) -> int:
        if self.config.local_unit == "steps":
            return self.config.local_steps
        # epochs: finish the current epoch first so every round covers whole epochs
        epoch, pos = self.cursors[c]
        if pos > 0:
            self.cursors[c] = [epoch + 1, 0]
        return self.config.local_steps * len(self._epoch_batches(c, self.cursors[c][0]))

    # -- client state --------------------------------------------------------------------------
    def client_state(self, c: int) -> dict[str, Tensor]:
        """Full state_dict of client ``c``'s model: :attr:`base_state`, then its local state."""
        state = dict(self.base_state)
        state.update(self.client_local.get(c, self.init_local))
        return state

    def check_loss(self, loss: Tensor, c: int, r: int) -> None:
        if not torch.isfinite(loss).all():
            self._stop(f"round {r}: client {c} reached a non-finite loss ({loss.item()}); training diverged "
                       "(lower the learning rate)")

    # -- a client's round, statistics and accuracy ----------------------------------------------------
    def client_round(self, r: int, c: int, received: dict[str, Tensor], *, lr: float, frozen: bool,
                     first: CoupledStep | None = None, index: int = 0) -> tuple[dict[str, Tensor], float]:
        """Client ``c``'s part of round ``r``: load what it ``received`` over its local state, run the
        algorithm's client hooks around its local steps, keep its local state and momentum, and
        return its upload and mean training loss. ``first`` is the round's coupled first step
        (FedTAN), in which this client is number ``index``. Every engine runs a client through this."""
        alg = self.algorithm
        work = self.work_model
        state = self.client_state(c)
        state.update({k: v for k, v in received.items() if k in state})
        fast_path.load_state(work, state)
        client = self.client_context(c, received)
        alg.client_start(client, r, work)
        opt = self._optimizer(work, alg.initial_momentum(client), lr)
        steps = self.steps_this_round(c)
        total = 0.0
        self._set_bn_frozen(work, frozen)
        for t in range(1, steps + 1):
            opt.zero_grad(set_to_none=True)
            if t == 1 and first is not None:
                loss = first.losses[index]
                self.check_loss(loss, c, r)
                for n, q in work.named_parameters():
                    if n in first.grads[index]:
                        q.grad = first.grads[index][n].clone()
                ema_global_stats(work, first, union_count=self.union_count)
            else:
                x, y = self.next_batch(c)
                loss = alg.local_loss(client, work, x, y)
                self.check_loss(loss.detach(), c, r)
                loss.backward()
            alg.adjust_grads(client, work)
            opt.step()
            alg.after_step(client, t, work, opt, first)
            total += float(loss.detach())
        up = self.keep_client(c, client, work.state_dict(), extra=lambda: alg.extra_upload(client, work, steps, lr),
                              momentum=lambda: self._momentum_of(work, opt))
        return up, total / steps

    def keep_client(self, c: int, client: ClientContext, trained: Mapping[str, Tensor], *,
                    extra: Callable[[], Mapping[str, Tensor]], momentum: Callable[[], dict[str, Tensor]],
                    copy_upload: bool = True) -> dict[str, Tensor]:
        """The end of client ``c``'s round on every engine (sequential and batched): keep its local
        state (from ``trained``, its model's tensors by state key), its algorithm state and momentum
        as the algorithm says, and return its upload as the round's plan says: the upload keys
        (cloned unless ``copy_upload`` is False: the caller's tensors are the round's own), the
        algorithm's ``extra()`` upload and what :meth:`Algorithm.final_momentum
        <bnfl.fl.Algorithm.final_momentum>` returns of ``momentum()``. A plan whose server trains
        (pooled data) uploads the whole trained model besides (not through the channel: the plan
        sends nothing), which the round takes as the global state (:func:`bnfl.fl.engine.run_round`)."""
        plan = self.plan
        if self.local_keys:
            self.client_local[c] = {k: trained[k].detach().clone() for k in self.local_keys}
        up = ({k: trained[k].detach().clone() if copy_upload else trained[k] for k in self.upload_keys}
              if plan.upload else {})
        up.update(extra())
        up.update(self.algorithm.final_momentum(client, momentum))  # kept or uploaded: the algorithm's
        if client.state or c in self.client_algorithm:  # the client's algorithm state goes back to the store
            self.client_algorithm[c] = client.state
        if plan.server_trains:
            up.update({k: trained[k].detach().clone() for k in self.base_state})
        return up

    def client_statistics(self, c: int, state: Mapping[str, Tensor], kind: str) -> dict[str, Tensor]:
        """Client ``c``'s answer to a statistics request ``kind`` on ``state`` over its local state
        (:meth:`Algorithm.client_statistics <bnfl.fl.Algorithm.client_statistics>`). The statistics are
        the model's own: BN layers left frozen by a previous round's local steps (FixBN-type phases)
        are thawed first."""
        unfreeze_bn_stats(self.work_model)
        full = dict(state)
        full.update(self.client_local.get(c, self.init_local))
        fast_path.load_state(self.work_model, full)
        return self.algorithm.client_statistics(self.client_context(c), self.work_model, kind)

    def _accuracy(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[float, float]:
        return accuracy(model, x, y, prepare=self._decode)

    def client_accuracy(self, c: int) -> tuple[float, float]:
        """Client ``c``'s model's accuracy on the global test set and on its own data (its test
        rows, else its training data)."""
        m = self._eval_model
        fast_path.load_state(m, self.client_state(c))
        per = self._accuracy(m, self.x_test, self.y_test)[0]
        if self.data.client_test is not None:
            idx = torch.as_tensor(self.data.client_test[c], device=self.device)
            own = self._accuracy(m, self.x_test[idx.to(self.x_test.device)], self.y_test[idx])[0]
        else:
            own = self._accuracy(m, *self._client_data(c))[0]
        return per, own
