"""HBN (Chen et al.): hybrid BN whose global statistics the server pools from eq. 7 moments,
optionally plugged into another FL solver (HBN Table 4)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from bnfl import stats
from bnfl.fl.algorithms._base import Aggregated, Algorithm
from bnfl.fl.algorithms._hbn_options import (
    REFERENCE_CODE,
    REFERENCE_STAT_SAMPLES,
    alpha_parameters,
    forward_to_solver,
    hbn_reference_stats,
    in_samples,
    pool,
)
from bnfl.fl.algorithms._registry import make_algorithm, register_algorithm
from bnfl.fl.algorithms._statistics import (
    _global_stats_layers,
    _moments_upload,
    _ServerStatistics,
    hbn_client_stats,
)

if TYPE_CHECKING:
    from bnfl.fl.context import ClientContext

__all__ = ["HBN"]


#: HBN Table 6 ablations (3)-(5): the fixed alpha of each mode (sigmoid(alpha) = weight on global).
_FIXED_ALPHA = {"global": math.inf, "batch": -math.inf, "equal": 0.0}


@register_algorithm
class HBN(_ServerStatistics, Algorithm):
    r"""HBN (Chen et al., Alg. 1), optionally on top of another FL solver.

    Each round: clients download :math:`\{\omega_g, \mu_g, \sigma^2_g\}^{t-1}`, compute eq. 7
    statistics of the downloaded model on their data (:func:`hbn_client_stats`), train with
    hybrid normalisation (eqs. 9-10; global statistics frozen, per-client alpha never sent),
    upload :math:`\omega_k` and the eq. 7 moments; the server pools the moments with eq. 8
    (unbiased, :func:`bnfl.stats.hbn_global`), applies the EMA of eq. 11 with weight ``lam`` and
    averages :math:`\omega` with :math:`N_k/N`. After the last round, a statistics-only round
    ``T+1`` (same statistics update, :math:`\omega_g^{T+1} = \omega_g^T`).

    With ``solver`` (HBN Table 4: "HBN as a plug-in"), the local steps and the server's model
    update are those of that bnfl algorithm (e.g. FedProx's proximal term, SCAFFOLD's control
    variates, FedAdam's server Adam, MOON's contrastive loss, FedSAM's SAM steps, FedACG's
    lookahead); HBN adds its statistics protocol on top: eq. 7 uploads, eqs. 8/11 on the server,
    alpha kept on the client, round T+1. ``solver="fedavg"`` is HBN as published. Every hook of
    :class:`~bnfl.fl.Algorithm` that HBN does not extend is forwarded to the solver,
    including hooks added to the contract later.

    Parameters
    ----------
    lam : float, default 0.01
        :math:`\lambda \in (0, 1]` of eq. 11 (1 reproduces eq. 8; the reference code: 0.002).
    stat_samples : int, optional
        Compute eq. 7 on a uniformly random subset of this many local samples (seeded per
        round and client) instead of all local data.
    final_round : bool, default True
        Run the statistics-only round T+1. The reference code instead trains T+1 rounds:
        ``rounds=T+1`` with ``final_round=False``.
    solver : str, default "fedavg"
        The bnfl algorithm (:data:`bnfl.fl.ALGORITHMS`) HBN is plugged into; it must be a
        shared-model FedAvg-type method (not HBN/FBN, FedTAN-type, centralized or personalised).
    solver_options : dict, optional
        Keyword options of ``solver``.
    client_stats : {"eq7", "moving-average"}, default "eq7"
        Table 6 ablation (1): ``"moving-average"`` uploads, instead of eq. 7, an exponential
        moving average of the batch moments each hybrid layer saw during local training
        (weight 0.1 on each new batch, starting from the downloaded global statistics; biased
        batch variance), with the client's element count; there is no round T+1 (nothing is
        trained in it to collect averages from).
    pooling : {"eq8", "average"}, default "eq8"
        Table 6 ablation (2): ``"average"`` pools with the naive weighted average
        :math:`\sum_k (N_k/N)\sigma_k^2` (:func:`bnfl.stats.average`), no between-client term.
    alpha : {"learned", "global", "batch", "equal"}, default "learned"
        Table 6 ablations (3)-(5): a fixed, untrained alpha of :math:`+\infty` (global statistics
        only), :math:`-\infty` (batch statistics only) or 0 (1:1).
    count : {"elements", "samples"}, default "elements"
        What eq. 8 counts per client: every element of a channel (:math:`N_k H W`; then eq. 8 is
        the sample variance of the union) or, as the reference code, samples.
    stat_source : {"eq7", "reference"}, default "eq7"
        ``"reference"``: upload :func:`bnfl.fl.hbn_reference_stats` (alpha-mixed statistics of a hybrid
        forward) of the first 64 samples of the client's index list, unshuffled, instead of eq. 7.
    first_estimate : {"replace", "blend"}, default "replace"
        ``"blend"``: the first eq. 8 estimate is blended into the placeholder (0, 1) with ``lam``.
    alpha_sharing : {"local", "averaged"}, default "local"
        ``"averaged"``: clients also upload alpha (key ``hbn.alpha.<name>``), the server keeps the
        weighted average of the round's alphas and a client's first participation starts from
        the latest average; afterwards each client keeps its own alpha.
    clip_grad_norm : float, optional
        Clip every local gradient (after the solver's adjustment) to this global L2 norm.
    eval_stats : {"global", "recompute"}, default "global"
        ``"recompute"``: on rounds that are evaluated, the round's clients recompute their
        statistics (``stat_source``, ``count``) on the new global model and the evaluation uses
        their pooled statistics with weight 1 (no EMA) (:meth:`evaluation_state`, a request
        not counted as communication); the server's own statistics are not changed by it.

    Notes
    -----
    The server starts from the layer's placeholder statistics (0, 1); the first eq. 8 estimate
    replaces them (no EMA in round 1), later rounds apply eq. 11. Eq. 7 runs the client's data
    (all of it, or ``stat_samples``) as one batch: exact, but memory grows with the client size.
    :meth:`reference_code` sets every option above as the authors' code has it.
    """

    name = "hbn"
    local_state = frozenset({"local"})
    server_state = frozenset({"bn_stats"})
    stats_tag = "hbn"
    #: the hooks HBN extends itself; every other public method of Algorithm goes to the solver
    _OWN_HOOKS = frozenset({"begin_round", "client_start", "adjust_grads", "after_step", "extra_upload", "aggregate",
                            "client_statistics", "statistics_only_round", "aggregate_statistics", "view_hooks",
                            "evaluation_state", "state_dict", "load_state_dict", "batching_obstacle", "round_plan"})

    def __init__(self, *, lam: float = 0.01, stat_samples: int | None = None, final_round: bool = True,
                 solver: str = "fedavg", solver_options: dict[str, Any] | None = None, client_stats: str = "eq7",
                 pooling: str = "eq8", alpha: str = "learned", count: str = "elements", stat_source: str = "eq7",
                 first_estimate: str = "replace", alpha_sharing: str = "local", clip_grad_norm: float | None = None,
                 eval_stats: str = "global") -> None:
        if not (0 < lam <= 1):
            raise ValueError(f"HBN lam must be in (0, 1], got {lam!r}")
        if stat_samples is not None and (int(stat_samples) != stat_samples or stat_samples < 2):
            raise ValueError(f"HBN stat_samples must be an integer >= 2, got {stat_samples!r}")
        for label, value, valid in (("client_stats", client_stats, ("eq7", "moving-average")),
                                    ("pooling", pooling, ("eq8", "average")),
                                    ("alpha", alpha, ("learned", *_FIXED_ALPHA)),
                                    ("count", count, ("elements", "samples")),
                                    ("stat_source", stat_source, ("eq7", "reference")),
                                    ("first_estimate", first_estimate, ("replace", "blend")),
                                    ("alpha_sharing", alpha_sharing, ("local", "averaged")),
                                    ("eval_stats", eval_stats, ("global", "recompute"))):
            if value not in valid:
                raise ValueError(f"HBN {label} must be one of {', '.join(valid)}; got {value!r}")
        if clip_grad_norm is not None and not (isinstance(clip_grad_norm, int | float) and 0 < clip_grad_norm < math.inf):
            raise ValueError(f"HBN clip_grad_norm must be a finite number > 0 or None, got {clip_grad_norm!r}")
        if stat_source != "eq7" and (client_stats != "eq7" or stat_samples is not None):
            raise ValueError(f"HBN stat_source={stat_source!r} fixes the statistics batch (the first 64 samples); it "
                             "cannot be combined with client_stats='moving-average' or stat_samples")
        self.lam = float(lam)
        self.stat_samples = stat_samples
        self.final_round = bool(final_round)
        self.client_stats, self.pooling, self.alpha = client_stats, pooling, alpha
        self.count, self.stat_source, self.first_estimate = count, stat_source, first_estimate
        self.alpha_sharing, self.eval_stats = alpha_sharing, eval_stats
        self.clip_grad_norm = None if clip_grad_norm is None else float(clip_grad_norm)
        self.solver_name = str(solver).lower()
        self.solver_options = dict(solver_options or {})
        base = make_algorithm(self.solver_name, **self.solver_options)
        if (isinstance(base, _ServerStatistics) or base.centralized or base.personalized or not base.communicates
                or type(base).coupled_step is not Algorithm.coupled_step or type(base).frozen_stats is not Algorithm.frozen_stats):
            raise ValueError(f"HBN cannot be plugged into {self.solver_name!r}: the solver must be a shared-model "
                             "FedAvg-type method (e.g. fedavg, fedprox, scaffold, fedadam, moon, fedsam, fedacg, fedwon)")
        self.solver = base
        self.local_state = HBN.local_state | base.local_state
        self.weighting = base.weighting

    @classmethod
    def reference_code(cls, **overrides: Any) -> HBN:
        """HBN with every choice of the authors' code (``_hbn_options.REFERENCE_CODE``), ``overrides`` on top.

        The code also trains T+1 rounds (give ``rounds=T+1``) and decays the learning rate by
        0.998 a round (a :class:`~bnfl.fl.TrainConfig` schedule); see ``docs/hbn-reference-code.md``.
        """
        return cls(**{**REFERENCE_CODE, **overrides})

    # -- HBN's own work ---------------------------------------------------------------------
    def _client_moments(self, client: ClientContext, r: int, model: nn.Module) -> dict[str, stats.Moments]:
        x, _ = client.data()
        if self.stat_source == "reference":
            x = x[:REFERENCE_STAT_SAMPLES]  # the first batch of the unshuffled index list
        elif self.stat_samples is not None and self.stat_samples < client.size:
            rng = np.random.default_rng([client.server.config.seed, r, client.client, 7])
            pos = rng.choice(client.size, size=self.stat_samples, replace=False)
            pos = pos[np.argsort(client.indices[pos], kind="stable")]  # in the order of the sample ids
            x = x[torch.as_tensor(pos, device=x.device)]
        moments = hbn_reference_stats(model, x) if self.stat_source == "reference" else hbn_client_stats(model, x)
        return in_samples(moments, len(x)) if self.count == "samples" else moments

    def _track_moving_average(self, client: ClientContext, model: nn.Module) -> None:
        """Ablation (1): EMA (weight 0.1 on the new batch) of each hybrid layer's batch moments,
        one update per local step: a solver that runs a second forward in a step (FedSAM's
        perturbed pass) does not count the batch twice. The averages, the layers seen in this
        step and the forward hooks are the client's round scratch (``client.scratch["hbn.*"]``)."""
        c_size, scratch = client.size, client.scratch
        ema = scratch["hbn.ema"] = {n: stats.Moments(count=c_size, mean=m.global_mean.detach().clone(),
                                                     var=m.global_var.detach().clone())
                                    for n, m in _global_stats_layers(model)}
        scratch["hbn.seen"] = set()  # layers already updated in this step
        per_sample = self.count == "samples"

        def hook(name: str):
            def update(m: nn.Module, args: tuple[Tensor, ...], _out: Tensor) -> None:
                if not m.training or name in scratch["hbn.seen"]:
                    return
                scratch["hbn.seen"].add(name)
                h = args[0].detach()
                mom = stats.moments(h)
                old = ema[name]
                # elements per channel of the client (or its samples)
                count = c_size * (h[0, 0].numel() if h.dim() > 2 and not per_sample else 1)
                ema[name] = stats.Moments(count=count, mean=0.9 * old.mean + 0.1 * mom.mean,
                                          var=0.9 * old.var + 0.1 * mom.var)
            return update

        scratch["hbn.hooks"] = [m.register_forward_hook(hook(n)) for n, m in _global_stats_layers(model)]

    @staticmethod
    def _check_layers(model: nn.Module) -> None:
        if not _global_stats_layers(model):
            raise ValueError("HBN needs HybridBatchNorm layers; build the model with norm='hbn'")

    def _prepare(self, client: ClientContext, model: nn.Module) -> None:
        """Sets alpha as the options say (a first participation's average, fixed values)."""
        average = client.server.state.get("hbn.alpha_average")  # server state (alpha_sharing="averaged")
        if self.alpha_sharing == "averaged" and average and client.first_participation:
            with torch.no_grad():  # a client's first participation starts from the server's average
                for n, p in model.named_parameters():
                    if n in average:
                        p.copy_(average[n])
        self._fix_alpha(model)

    def _fix_alpha(self, model: nn.Module) -> None:
        """Table 6 ablations (3)-(5): alpha set to its fixed value. It stays a parameter (so the
        hook works on a batched client's view of the stacked alpha); :meth:`adjust_grads` zeroes
        its gradient and :meth:`after_step` sets it again, so no optimizer step (momentum, weight
        decay) moves it."""
        if self.alpha == "learned":
            return
        with torch.no_grad():
            for _, p in alpha_parameters(model):
                p.fill_(_FIXED_ALPHA[self.alpha])

    def begin_round(self, server, r, clients, state):
        return self.solver.begin_round(server, r, clients, state)

    def client_start(self, client, r, model):
        self._check_layers(model)
        self.solver.client_start(client, r, model)
        self._prepare(client, model)
        if self.client_stats == "moving-average":
            self._track_moving_average(client, model)
        else:
            client.scratch["hbn.moments"] = self._client_moments(client, r, model)

    def adjust_grads(self, client, model):
        client.scratch["hbn.seen"] = set()  # once per local step: the next forward is the next step's
        self.solver.adjust_grads(client, model)
        if self.alpha != "learned":
            for _, p in alpha_parameters(model):
                if p.grad is not None:
                    p.grad.zero_()
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip_grad_norm)

    def after_step(self, client, t, model, optimizer, coupled):
        self.solver.after_step(client, t, model, optimizer, coupled)
        self._fix_alpha(model)

    def extra_upload(self, client, model, steps, lr):
        up = dict(self.solver.extra_upload(client, model, steps, lr))
        if self.alpha_sharing == "averaged":
            up.update({f"hbn.alpha.{n}": p.detach().clone() for n, p in alpha_parameters(model)})
        hooks = client.scratch.pop("hbn.hooks", None)
        if hooks:
            for h in hooks:
                h.remove()
            up.update(_moments_upload(self.stats_tag, client.scratch["hbn.ema"]))
        else:
            up.update(_moments_upload(self.stats_tag, client.scratch["hbn.moments"]))
        return up

    def aggregate(self, server, state, clients, weights, uploads):
        new = Aggregated.of(self.solver.aggregate(server, state, clients, weights, uploads), server)
        if self.alpha_sharing == "averaged":
            keys = [k for k in uploads[0] if k.startswith("hbn.alpha.")]
            new.server_state["hbn.alpha_average"] = {
                k[len("hbn.alpha."):]: sum(w * u[k] for w, u in zip(weights, uploads, strict=True)) for k in keys}
        new.update(self.pooled_statistics(server, state, uploads))
        new.server_state.update(self.statistics_server_state())
        return new

    def round_plan(self, r):
        plan = super().round_plan(r)  # its coupled_step and frozen_stats: the solver's (forwarded), or a subclass's
        if self.alpha_sharing == "averaged":  # client_start reads the server's state, no message carries it
            plan = dataclasses.replace(plan, outside_messages=(
                "HBN alpha_sharing='averaged' gives first-time clients the server's average alpha outside the "
                "messages; use alpha_sharing='local' (the paper's)"))
        return plan

    def view_hooks(self):
        """HBN's own client hooks, where its options use them, and its solver's: eq. 7 at the start
        and the statistics upload always; ``adjust_grads`` for gradient clipping or a fixed alpha;
        ``after_step`` for a fixed alpha (its moving-average ablation, whose ``adjust_grads`` marks
        the next forward as the next step's, is not batched)."""
        used = set(self.solver.view_hooks()) | {"client_start", "extra_upload"}
        if self.clip_grad_norm is not None or self.alpha != "learned":
            used.add("adjust_grads")
        if self.alpha != "learned":
            used.add("after_step")
        return frozenset(used)

    def batching_obstacle(self):
        """HBN's hooks run on per-client views of the batched clients (eq. 7 with the view's
        forward, alpha as the view's parameter); not batched: ablation (1)'s moving averages
        (forward hooks on one client's layers) and whatever the solver cannot batch. A fixed alpha
        (Table 6 (3)-(5)) is batched: its gradient is zeroed and its value set again after each step."""
        if self.client_stats == "moving-average":
            return "HBN client_stats='moving-average' hooks the layers of one client's model"
        why = self.solver.batching_obstacle()
        return None if why is None else f"HBN's solver {self.solver_name!r}: {why}"

    # -- the statistics-only round T+1 and the evaluation statistics ------------------------------
    def statistics_only_round(self):
        # ablation (1) has no training in round T+1 to collect moving averages from
        return self.final_round and self.client_stats != "moving-average"

    def client_statistics(self, client, model, kind):
        r = client.server.round
        if kind == "final":  # eq. 7 on the final model; no solver work
            self._check_layers(model)
            self._prepare(client, model)
        elif kind != "evaluation":
            return super().client_statistics(client, model, kind)
        return _moments_upload(self.stats_tag, self._client_moments(client, r, model))

    def aggregate_statistics(self, server, state, clients, weights, uploads):
        return Aggregated({**state, **self.pooled_statistics(server, state, uploads)},
                          {**server.state, **self.statistics_server_state()})

    def evaluation_state(self, server, state, clients):
        """``eval_stats="recompute"`` (the reference code's test): the round's ``clients`` recompute
        their statistics on the new global model and the evaluation uses them pooled with weight 1."""
        if self.eval_stats != "recompute" or not clients:
            return state
        uploads = server.request("evaluation", clients, state, tag=None)
        new = dict(state)
        tag = self.stats_tag
        for n, _ in _global_stats_layers(server.model):
            parts = [stats.Moments(count=int(u[f"{tag}.{n}.count"].item()), mean=u[f"{tag}.{n}.mean"],
                                   var=u[f"{tag}.{n}.var"]) for u in uploads]
            prefix = f"{n}." if n else ""
            new[prefix + "global_mean"], new[prefix + "global_var"] = pool(parts, self.pooling)
        return new

    def state_dict(self):
        solver = self.solver.state_dict()  # a user solver's own; HBN's state is ServerContext.state
        return {"solver": solver} if solver else {}

    def load_state_dict(self, state):
        if "solver" in state:
            self.solver.load_state_dict(state["solver"])

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v, d in (
            ("client_stats", self.client_stats, "eq7"), ("pooling", self.pooling, "eq8"),
            ("alpha", self.alpha, "learned"), ("count", self.count, "elements"), ("stat_source", self.stat_source, "eq7"),
            ("first_estimate", self.first_estimate, "replace"), ("alpha_sharing", self.alpha_sharing, "local"),
            ("clip_grad_norm", self.clip_grad_norm, None), ("eval_stats", self.eval_stats, "global")) if v != d)
        if self.solver_name != "fedavg":
            extra = f", solver={self.solver!r}" + extra
        return f"HBN(lam={self.lam}, stat_samples={self.stat_samples}, final_round={self.final_round}{extra})"


# Every public method of the Algorithm contract that HBN does not extend goes to the solver
# (local_loss, after_step, extra_download, coupled_step, frozen_stats, and any hook added later).
for _name, _member in vars(Algorithm).items():
    if callable(_member) and not _name.startswith("_") and _name not in HBN._OWN_HOOKS:
        setattr(HBN, _name, forward_to_solver(_name))
