"""FedTAN's experimental setups: the methods compared, the run specs of each profile.

Profiles (CATALOG section 1): ``paper`` is the paper's setup (CIFAR-10/100, MNIST, Office-Caltech10, DomainNet from
``--data-root``; ResNet-20, R = 10,000 iterations); ``quick`` is the embedded digits proxy on a 2-core CPU; ``smoke``
is ``quick`` cut to seconds for CI. Run specs are the JSON-able dicts of :mod:`bnfl.experiments.training`; a topic
module merges them with :func:`bnfl.experiments.curves.merge_specs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bnfl.data.fedbn_folders import DOMAINNET_TOP10
from bnfl.experiments.core import deep_merge
from bnfl.experiments.papers.fedtan.numbers import CIFAR_ITERATIONS, MNIST_ITERATIONS
from bnfl.experiments.setups import label as method_label
from bnfl.experiments.setups import method_row, profile_set, seeds, smoke_on_bases, spec
from bnfl.methods import get

__all__ = [
    "ALL6", "DOMAINNET", "HEADLINE_INIT", "IID", "INIT_NOTE", "METHOD_OPTIONS", "NONIID", "OFFICE", "P_C10", "P_MNIST",
    "P_MOM", "Q_BASE", "Q_DOM", "Q_MLP1", "Q_MOM", "Q_RES", "REFERENCE_MOMENTUM_NOTE", "SEEDS", "SMOKE", "UNSTATED_R",
    "method_label", "method_row", "profiles", "spec", "variant_spec",
]

#: Options a method takes in FedTAN's experiments beyond its entry in :data:`bnfl.methods.METHODS`
#: (the paper gives no FedProx mu; GN uses 2 groups, as FixBN and HBN do).
METHOD_OPTIONS: dict[str, dict[str, Any]] = {
    "fedavg+gn": {"model": {"groups": 2}},
    "fedprox": {"method_options": {"mu": 0.01}},
}
#: The six schemes of Table 1 and Fig. 4.
ALL6 = ["centralized", "fedtan", "fedavg+bn", "fedavg+alg2", "fedbn", "silobn"]

IID = {"kind": "iid"}
NONIID = {"kind": "classes_per_client", "k": 2}


def variant_spec(key: str) -> dict[str, Any]:
    """The run-spec fields that make method ``key`` (its id and FedTAN's options for it)."""
    return {"method": get(key).id, **METHOD_OPTIONS.get(key, {})}


#: Quick profile: Q-DIG (flat) + Q-MLP-BN, N=5, B=32, E=5, lr 0.1 (CATALOG fig4 quick recipe).
Q_BASE: dict[str, Any] = {
    "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"}, "partition": {"num_clients": 5},
    "rounds": 300, "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1, "eval_every": 15},
}
#: Quick momentum variant (tab1 proxy): momentum 0.9, wd 1e-4, lr 0.05, /10 at 60% and 80%.
Q_MOM: dict[str, Any] = {"train": {"momentum": 0.9, "weight_decay": 1e-4, "lr": 0.05, "fractions": [0.6, 0.8],
                                   "gamma": 0.1}}
#: Quick Q-RES on Q-DIG images (figs. 9-11).
Q_RES: dict[str, Any] = {"data": {"name": "digits", "form": "image"}, "model": {"name": "q_res"},
                         "rounds": 100, "train": {"eval_every": 5}}
#: Quick Q-MLP1 (figs. 6, 14): lr 0.5, R=500.
Q_MLP1: dict[str, Any] = {"model": {"name": "q_mlp1"}, "rounds": 500, "train": {"lr": 0.5, "eval_every": 25}}
#: Quick feature shift (figs. 8, 13): the digits under per-domain transforms, Q-ALEX.
Q_DOM = {"data": {"name": "digit_domains", "form": "image"}, "model": {"name": "q_alex"}, "rounds": 150,
         "train": {"batch_size": 16, "lr": 0.01, "local_steps": 5, "eval_every": 10}}

#: Smoke: seconds. Applied on top of the quick configuration.
SMOKE: dict[str, Any] = {"rounds": 2, "train": {"local_steps": 2, "batch_size": 8, "eval_every": 1}}

#: Paper profile: CIFAR-10, ResNet-20, B=128, E=5, lr 0.5 -> 0.05 after 6000, R=10,000 (Sec. 6.1), with
#: the authors' augmentation (:mod:`bnfl.experiments.augmentation`).
P_C10: dict[str, Any] = {
    "data": {"name": "cifar10"}, "model": {"name": "resnet20"}, "partition": {"num_clients": 5},
    "rounds": CIFAR_ITERATIONS,
    "train": {"local_steps": 5, "batch_size": 128, "lr": 0.5, "milestones": [6000], "gamma": 0.1, "eval_every": 100,
              "augment": "cifar"},  # random crop (4 px padding) + flip, as the authors' utils/datasets.py
}
#: ... with momentum 0.9 and wd 1e-4: a further drop to 0.005 after 8000.
P_MOM: dict[str, Any] = {"train": {"momentum": 0.9, "weight_decay": 1e-4, "milestones": [6000, 8000]}}
#: MNIST 784x30x10 + BN, B=128, lr 0.5, no momentum, R=500 [inferred].
P_MNIST: dict[str, Any] = {
    "data": {"name": "mnist", "flatten": True}, "model": {"name": "fedtan_mlp"}, "partition": {"num_clients": 5},
    "rounds": MNIST_ITERATIONS, "train": {"local_steps": 5, "batch_size": 128, "lr": 0.5, "eval_every": 10},
}
#: Office-Caltech10 (Fig. 8) and DomainNet (Fig. 13): one domain per client, AlexNet-BN. DomainNet takes
#: Supplement F's "top ten most common classes, following ... FedBN" (the FedBN release's list).
OFFICE = {"data": {"name": "office_caltech10", "domains": ["amazon", "caltech", "dslr", "webcam"], "size": 256},
          "model": {"name": "alexnet_bn"}, "partition": {"num_clients": 4}, "rounds": 1000,
          "train": {"batch_size": 32, "lr": 0.01, "local_steps": 5, "eval_every": 20}}
DOMAINNET = {"data": {"name": "domainnet", "size": 256, "classes": list(DOMAINNET_TOP10),
                      "domains": ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"]},
             "model": {"name": "alexnet_bn"}, "partition": {"num_clients": 6}, "rounds": 1000,
             "train": {"batch_size": 32, "lr": 0.01, "local_steps": 5, "eval_every": 20}}
UNSTATED_R = ("the paper does not state the number of iterations for this data set; the paper profile "
              "uses R = 1000 [assumed]")

#: The FedTAN authors' initialisation (their ``nets/ResNet20.py``: ``kaiming_normal_`` on every conv and linear
#: weight): the headline init of the digits cells that report both (fig4, tab1). On Q-MLP-BN (linear layers only)
#: ``init="he_normal"`` is exactly that scheme; at the paper profile ResNet-20 already initialises so
#: (``init="authors"`` equals its default).
HEADLINE_INIT = "he_normal"
INIT_NOTE = ("Initialisation: the FedTAN authors' ResNet-20 draws every conv and linear weight He-normal "
             "(kaiming_normal_); bnfl's models keep PyTorch's default (uniform +-1/sqrt(fan_in)) unless told. "
             "This entry's headline numbers use the authors' He-normal init (model init='he_normal'); the "
             "non-iid cells are also run with PyTorch's default init and reported beside them (claims "
             "ending in '-pytorch-init'), since FedBN, SiloBN and FedAvg+BN move with it.")


#: Repeats at quick: 5 since issue 47 (the catalog's 3 before; the paper averages 5 runs; amendment A13 in
#: figures/PROTOCOL-LOG.json). The batched engine trains an
#: entry's seeds together in lock-step (``bnfl reproduce --batched auto``, the default).
SEEDS = seeds(quick=5, paper=5)


def profiles(quick: Mapping[str, Any], paper: Mapping[str, Any], *,
             smoke: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """``{"smoke", "quick", "paper"}`` configs; smoke = quick with :data:`SMOKE` on its base(s)."""
    return profile_set(deep_merge(smoke_on_bases(quick, SMOKE), smoke or {}), quick, paper,
                       note="smoke profile: 2 rounds of 2 local steps, batch 8: checks the machinery, "
                            "not the paper's claims")


#: Where an entry trains FedTAN with momentum, it follows bnfl's convention, and the authors' code
#: differs (docs page "FedTAN: bnfl and the authors' code").
REFERENCE_MOMENTUM_NOTE = (
    "FedTAN with momentum follows bnfl: one optimizer per client and round, so the momentum of the "
    "coupled first local step carries into steps 2..E. The authors' code starts a fresh optimizer "
    "after step 1 (bnfl: FedTAN(first_step_momentum='discard')). Measured on tab1's quick setup, 3 seeds: "
    "FedTAN 96.02 ± 0.32 (bnfl) vs 94.81 ± 1.31 (the authors' convention), a paired difference of "
    "-1.20 ± 1.25 pts (benchmarks/fedtan_reference_variants.py; docs: fedtan-reference-code).")
