"""FixBN's experimental setups: budgets, the methods compared, the run specs of each profile.

Profiles (CATALOG section 3): ``paper`` is the paper's setup (CIFAR-10 / Tiny-ImageNet /
ImageNet-1K / Cityscapes from ``--data-root``; ResNet-20/18, DeepLab-v3+); ``quick`` is the
embedded digits proxy on a 2-core CPU (Q-DIG, Q-SEG, Q-GAUSS; Q-MLP-BN, Q-RES, Q-LeNet, Q-FCN);
``smoke`` is ``quick`` cut to seconds for CI.

Budgets (Sec. 6.1): a *fixed-epoch* budget of ``epochs`` passes of local SGD over all clients
gives ``rounds = epochs |D| / (B E M)`` (:func:`rounds_for_epochs`); the alternative is a
*fixed number of rounds*. The learning rate drops x0.1 at 50% and 75% of the rounds
(:data:`DECAY`, read by :class:`bnfl.fl.TrainConfig` as ``fractions``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bnfl.experiments.augmentation import FIXBN_NOTE, uses_augmentation
from bnfl.experiments.core import deep_merge
from bnfl.experiments.papers.fixbn.numbers import BATCH, LR, LR_FRACTIONS, MOMENTUM
from bnfl.experiments.setups import label, profile_set, seeds, spec
from bnfl.methods import get

__all__ = ["DECAY", "IID", "PARTITIONS", "SEEDS", "SHARDS", "dirichlet", "label", "profiles", "rounds_for_epochs",
           "rounds_for_steps", "spec", "variant"]

#: lr x0.1 at 50% and 75% of the rounds (Sec. 6.1), SGD momentum 0.9, batch 20.
DECAY: dict[str, Any] = {"train": {"momentum": MOMENTUM, "lr": LR, "fractions": list(LR_FRACTIONS), "gamma": 0.1,
                                   "batch_size": BATCH}}

IID = {"kind": "iid"}
#: Shards: each client holds 20% of the classes (2 of CIFAR-10's 10). At quick scale Q-DIG-2
#: (2 classes per client, equal sizes; CATALOG fixbn-fig3 quick recipe).
SHARDS = {"kind": "classes_per_client", "k": 2}


def dirichlet(phi: float) -> dict[str, Any]:
    """Dirichlet(phi) over classes (Hsu et al. 2019)."""
    return {"kind": "dirichlet", "phi": float(phi)}


#: Partition grid of Fig. 3 (name, partition).
PARTITIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("IID", IID), ("Dir(0.6)", dirichlet(0.6)), ("Dir(0.3)", dirichlet(0.3)), ("Dir(0.1)", dirichlet(0.1)),
    ("Shards", SHARDS),
)


def rounds_for_epochs(epochs: float, n_train: int, batch: int, local_steps: int, clients: int) -> float:
    """Rounds of a fixed-epoch budget, ``epochs |D| / (B E M)`` (FixBN Sec. 6.1; may be fractional).

    FixBN's Fig. 5 caption: 128 epochs of CIFAR-10 (``|D|`` = 50,000) with B = 20, E = 20, M = 5 is
    3200 rounds; at E = 2500 the formula gives 25.6 rounds (CATALOG §5.6).
    """
    for name, v in (("n_train", n_train), ("batch", batch), ("local_steps", local_steps), ("clients", clients)):
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return epochs * n_train / (batch * local_steps * clients)


def rounds_for_steps(steps_per_client: int, local_steps: int) -> int:
    """Rounds of a fixed budget of local SGD steps per client (``steps / E``, at least 1)."""
    if local_steps <= 0 or steps_per_client <= 0:
        raise ValueError(f"steps_per_client and local_steps must be positive, got {steps_per_client}, {local_steps}")
    return max(1, math.ceil(steps_per_client / local_steps))


def variant(key: str, **method_options: Any) -> dict[str, Any]:
    """Run-spec fields of method ``key`` (GN with 2 groups, the FixBN/HBN reading of "group size 2")."""
    out: dict[str, Any] = {"method": get(key).id}
    if method_options:
        out["method_options"] = dict(method_options)
    return out


# -- quick-scale bases -----------------------------------------------------------------------------
#: Q-DIG flat + Q-MLP-BN, 5 clients (the model of the E-sweeps: Q-RES is 6x slower per step).
Q_MLP: dict[str, Any] = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
                         "partition": {"num_clients": 5}}
#: Q-DIG images + Q-RES (ResNet-20 stand-in, 7 norm layers).
Q_RES: dict[str, Any] = {"data": {"name": "digits", "form": "image"}, "model": {"name": "q_res"},
                         "partition": {"num_clients": 5}}
#: Q-DIG images + Q-LeNet (LeNet-like CNN stand-in).
Q_LENET: dict[str, Any] = {"data": {"name": "digits", "form": "image"}, "model": {"name": "q_lenet"},
                           "partition": {"num_clients": 5}}
Q_DIG_TRAIN = 1437  # Q-DIG training samples (80% of 1797)


# -- paper-scale bases -------------------------------------------------------------------------------
P_C10: dict[str, Any] = {"data": {"name": "cifar10"}, "model": {"name": "resnet20"},
                         "partition": {"num_clients": 5}, "train": {"augment": "cifar"}}  # [assumed]: FIXBN_NOTE
P_TINY: dict[str, Any] = {"data": {"name": "tiny_imagenet"}, "model": {"name": "resnet18"},
                          "partition": {"num_clients": 10}}

#: Repeats: the paper reports "the average of 3 runs" (Sec. 6.1); 5 at quick since issue 47 (3 before;
#: amendment A13 in figures/PROTOCOL-LOG.json; the batched engine
#: trains them together in lock-step, ``bnfl reproduce --batched auto``, the default), 1 at smoke.
SEEDS = seeds(quick=5, paper=3)

SMOKE_NOTE = "smoke profile: a few rounds of a few steps: checks the machinery, not the paper's claims"


def profiles(quick: Mapping[str, Any], paper: Mapping[str, Any], smoke: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"smoke", "quick", "paper"}`` configs; smoke = quick with ``smoke`` merged in."""
    paper = {**paper, "deviations": list(paper.get("deviations", []))}
    if uses_augmentation(paper, "cifar") and FIXBN_NOTE not in paper["deviations"]:
        paper["deviations"].append(FIXBN_NOTE)
    return profile_set(deep_merge(quick, smoke), quick, paper, note=SMOKE_NOTE)
