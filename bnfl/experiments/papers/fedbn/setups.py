"""FedBN's experimental setups: the methods compared, the run specs of each profile, the
per-client evaluation protocol.

Profiles (CATALOG section 4): ``paper`` is the paper's setup (the Digit-5 benchmark,
Office-Caltech10, DomainNet and ABIDE I from ``--data-root``; the digits CNN of Table 3 and
AlexNet-BN of Table 9); ``quick`` is the embedded feature-shift proxy on a 2-core CPU (Q-DOM
digit domains with Q-ALEX, Q-ABIDE with a 64-16-16-2 MLP); ``smoke`` is ``quick`` cut to seconds
for CI.

Protocol (FedBN Sec. 5): one client per domain; a personalised method (FedBN, SingleSet) is
evaluated with each client's own model on that client's own test set, a shared-model method
(FedAvg, FedProx) with the global model on each client's test set; the reported number per
client is that accuracy, and the mean over clients weighs clients equally.

Local work is counted in epochs (``local_unit = "epochs"``): E = 1 local epoch per round. The text
trains "300 epochs"; the reference code runs 100 rounds of 1 local epoch (CATALOG §5.8). The
paper profile follows the code (100 rounds); a sweep over E keeps the total T = R E epochs fixed
(FedBN Sec. 3: "the system has T/E communication rounds").

Runs: :func:`fedbn_run` / :func:`fedbn_runs` train through the shared training loop
(:func:`bnfl.experiments.training.train` / ``train_seeds``: the context's engine, the seeds in
lock-step on the batched engine, cached like any run) with the
:class:`~bnfl.experiments.domain_protocol.FedBNProtocol` observer, which records each domain's
accuracy under the protocol above (``domain_acc``), the per-round loss the reference code prints
(``eval_loss``) and, given unseen domains, App. G's new-client accuracy (``unseen_acc``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# called as training.train*(...) so that tests can replace them on bnfl.experiments.training
from bnfl.experiments import training
from bnfl.experiments.claims import Claim, per_seed_claim
from bnfl.experiments.core import Context, deep_merge
from bnfl.experiments.domain_protocol import FedBNProtocol
from bnfl.experiments.papers.fedbn.numbers import BATCH, FEDPROX_MU, LR, ROUNDS_CODE
from bnfl.experiments.setups import label as method_label
from bnfl.experiments.setups import profile_set, seeds, smoke_on_bases, spec
from bnfl.experiments.training import domain_accuracies, mean_over_clients
from bnfl.experiments.tuning import Tuned, tuned_runs
from bnfl.methods import get
from bnfl.plots import color_for

__all__ = [
    "ROWS", "STYLES", "P_DIGITS", "Q_DIGITS", "Q_DOMAINS", "SEEDS", "SMOKE", "SWEEP_SEEDS", "fedbn_run", "fedbn_runs",
    "label", "local_epochs", "profiles", "seed_means", "shift_damage", "spec", "tuned_fedbn_runs", "variant",
]

#: The four methods of Fig. 5 / Tables 1, 11 (paper row name -> bnfl method id). SingleSet trains
#: one model per client on its own data only (bnfl's ``singlenet``).
ROWS: dict[str, str] = {"SingleSet": "singlenet", "FedAvg": "fedavg+bn", "FedProx": "fedprox", "FedBN": "fedbn"}

#: Each row name's line style in the figures: its method's colour.
STYLES: dict[str, dict[str, Any]] = {name: {"color": color_for(mid)} for name, mid in ROWS.items()}
#: Options the methods take in FedBN's experiments (FedProx mu: the reference code's default).
METHOD_OPTIONS: dict[str, dict[str, Any]] = {"fedprox": {"method_options": {"mu": FEDPROX_MU}}}


def variant(key: str) -> dict[str, Any]:
    """The run-spec fields of method ``key`` (a paper row name or a bnfl method id)."""
    mid = get(ROWS.get(key, key)).id
    return {"method": mid, **METHOD_OPTIONS.get(mid, {})}


def label(key: str) -> str:
    """The paper's name for a method id (``fedavg+bn`` -> ``FedAvg``), else bnfl's label."""
    return method_label(key, ROWS)


# -- the per-client protocol (domain_accuracies, mean_over_clients: bnfl.experiments.training) -----
def per_domain_stats(runs: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample std (NaN for one seed) over seeds of each client's accuracy."""
    table = np.array([domain_accuracies(r) for r in runs], dtype=float)  # (seeds, clients)
    mean = table.mean(axis=0)
    std = table.std(axis=0, ddof=1) if table.shape[0] > 1 else np.full(table.shape[1], np.nan)
    return mean, std


# -- quick-scale bases ---------------------------------------------------------------------------
#: Q-DOM stand-ins for the five digits datasets (CATALOG fedbn-fig3: D0-D4). The most shifted
#: domain is defined by the pixel histogram's distance to D0 (fedbn-fig5's check).
Q_DOMAINS: tuple[str, ...] = ("clean", "contrast", "blur", "noise", "thick")
#: 1797 digits / 5 domains = 359 -> 287 train / 72 test per domain.
Q_TRAIN_PER_DOMAIN = 287
#: Q-DOM with D0-D4, Q-ALEX, one client per domain, B = 32, lr 0.01, E = 1 local epoch, R = 100.
Q_DIGITS: dict[str, Any] = {
    "data": {"name": "digit_domains", "form": "image", "domains": list(Q_DOMAINS)},
    "model": {"name": "q_alex"},
    "partition": {"kind": "by_domain"},
    "rounds": ROUNDS_CODE,
    "train": {"batch_size": BATCH, "lr": LR, "local_steps": 1, "local_unit": "epochs", "eval_every": ROUNDS_CODE},
}

# -- paper-scale bases ---------------------------------------------------------------------------
#: The Digit-5 benchmark (10% = 743 training samples per client), the Table 3 CNN, 28x28x3.
P_DIGITS: dict[str, Any] = {
    "data": {"name": "digit5", "fraction": 0.1},
    "model": {"name": "digit_cnn"},
    "partition": {"kind": "by_domain"},
    "rounds": ROUNDS_CODE,
    "train": {"batch_size": BATCH, "lr": LR, "local_steps": 1, "local_unit": "epochs", "eval_every": 10},
}

def local_epochs(E: int, total_epochs: int = ROUNDS_CODE) -> dict[str, Any]:
    """Spec fields for E local epochs per round at a fixed budget of ``total_epochs`` = R E epochs
    (FedBN Sec. 3: "the system has T/E communication rounds"); R = T // E, at least 1.

    Every entry that sweeps E builds its runs with this, so equal settings share their runs.
    """
    if E < 1 or total_epochs < 1:
        raise ValueError(f"E and total_epochs must be positive, got {E}, {total_epochs}")
    rounds = max(1, total_epochs // E)
    return {"rounds": rounds, "train": {"local_steps": int(E), "local_unit": "epochs", "eval_every": rounds}}


#: Repeats: "5 trials with different seeds" (Fig. 5, Tables 1 and 11); quick as the catalog says.
SEEDS = seeds(quick=5, paper=5)
#: Repeats of the sweeps the paper shows as single runs (Figs. 4, 8, Tables 13-16): at quick the
#: 5 seeds since issue 47 (at least 5 on every trained entry; amendment A13 in figures/PROTOCOL-LOG.json; 3 before),
#: trained in lock-step on the batched engine.
SWEEP_SEEDS = seeds(quick=5, paper=5)


def seed_means(runs: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each seed's equal-weight mean over clients (:func:`mean_over_clients`), in seed order."""
    return [mean_over_clients(r) for r in runs]


SMOKE: dict[str, Any] = {"rounds": 2, "train": {"batch_size": 16, "eval_every": 2}}
SMOKE_NOTE = "smoke profile: 2 rounds: checks the machinery, not the paper's claims"


def profiles(quick: Mapping[str, Any], paper: Mapping[str, Any], *,
             smoke: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """``{"smoke", "quick", "paper"}`` configs; smoke = quick with :data:`SMOKE` merged into every
    ``base*`` key, then ``smoke``."""
    return profile_set(deep_merge(smoke_on_bases(quick, SMOKE), smoke or {}), quick, paper, note=SMOKE_NOTE,
                       declare_quick=False)


# -- runs under FedBN's protocol ------------------------------------------------------------------
def fedbn_run(ctx: Context, spec: Mapping[str, Any], *, unseen: Sequence[str] = (), curve: bool = True) -> dict[str, Any]:
    """One run of ``spec`` under FedBN's protocol (module docstring): :func:`bnfl.experiments.training.train`
    with the :class:`FedBNProtocol` observer, on the context's engine, cached like any run.
    ``curve=False`` skips the per-round ``eval_loss`` (entries that read only final accuracies)."""
    return training.train(ctx, spec, observers=[FedBNProtocol(unseen, curve=curve, data=spec["data"], data_root=ctx.data_root)])


def fedbn_runs(ctx: Context, spec: Mapping[str, Any], *, unseen: Sequence[str] = (),
               curve: bool = True) -> list[dict[str, Any]]:
    """:func:`fedbn_run` once per seed of ``ctx.seeds`` (the seed sets init, batches and partition),
    the seeds in lock-step on the batched engine (:func:`bnfl.experiments.training.train_seeds`)."""
    return training.train_seeds(ctx, spec, observers=[FedBNProtocol(unseen, curve=curve, data=spec["data"], data_root=ctx.data_root)])


def tuned_fedbn_runs(ctx: Context, base: Mapping[str, Any], keys: Sequence[str], tune: Mapping[str, Any], *,
                     unseen: Sequence[str] = (), curve: bool = True) -> tuple[dict[str, list], dict[str, Tuned]]:
    """Each row ``keys`` (:data:`ROWS`) on ``base`` at its own rate, tuned from the entry's ``tune`` table
    and scored as FedBN's claims judge (:func:`~bnfl.experiments.training.mean_over_clients`, each client on
    its own domain), then trained by :func:`fedbn_runs` over the context's seeds: the runs and the rates."""
    runs, rates = {}, {}
    for k in keys:
        rates[k], runs[k] = tuned_runs(ctx, spec(base, variant(k)), tune, score=mean_over_clients,
                                       train=lambda c, s: fedbn_runs(c, s, unseen=unseen, curve=curve))
    return runs, rates


def shift_damage(ctx: Context, base: Mapping[str, Any], shifted: Sequence[Mapping[str, Any]], *,
                 name: str = "shift-damage", where: str = "") -> Claim:
    """The precondition of FedBN's headline rows, measured with the entry's own model, domains and
    recipe (issue 47): FedAvg with an iid split of the same domains (as many clients as domains, each
    a random mix of them; the same batch size, steps and rate) minus FedAvg on the entry's one client
    per domain (``shifted``: those runs over the context's seeds), each the mean over domains of the
    global model on each domain's own test set, paired by seed. Above 0: the feature shift damages
    FedAvg+BN here, so FedBN has something to repair; a headline row whose claim this does not show
    reads *not testable here*. ``where``: the setting in words, for the statement."""
    clients = len(shifted[0].get("domains") or base["data"].get("domains") or [])
    if clients < 2:
        raise ValueError(f"{name}: the shifted runs name {clients} domain(s); the iid control needs at least 2")
    control = fedbn_runs(ctx, spec(base, variant("FedAvg"), {"partition": {"kind": "iid", "num_clients": clients}}),
                         curve=False)
    n_test = sum(shifted[0].get("n_test_domain") or []) or None
    a, b = seed_means(control), seed_means(shifted)
    return per_seed_claim(name, f"{where}the feature shift damages FedAvg+BN (iid control - one client per domain > 0, "
                          "the common rate; the precondition of FedBN's claims)", a, 0.0, baseline=b,
                          seeds=list(ctx.seeds)[:len(a)], n_test=n_test,
                          detail=f"FedAvg iid control {np.mean(a):.2f} vs one client per domain {np.mean(b):.2f}",
                          why="FedAvg+BN is not hurt by this feature shift: nothing here for FedBN to repair")
