"""Where the paper profiles train with data augmentation, and what the quick profile says about it.

The authors' code of FedTAN (``utils/datasets.py``) and of HBN (``FedBaseline/sampling/dataLoader.py``)
train CIFAR-10/100 with a random crop after 4 pixels of padding and a random horizontal flip; HBN's
Tiny-ImageNet and FedTAN's other data sets get none. The paper profiles of those settings set
``train.augment = "cifar"`` (:data:`CIFAR`); FixBN's paper states no pipeline and its code is not
public: its CIFAR-10 settings use the same recipe as an assumption (:data:`FIXBN_NOTE`). The quick
profiles stay without augmentation (:data:`QUICK_NOTE`); :func:`declare` adds that choice to a
quick configuration's deviations wherever the paper configuration augments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CIFAR", "FIXBN_NOTE", "QUICK_NOTE", "declare", "uses_augmentation"]

#: The run-spec part of the authors' CIFAR pipeline (:mod:`bnfl.data.augment`).
CIFAR: dict[str, Any] = {"train": {"augment": "cifar"}}

QUICK_NOTE = ("no data augmentation at quick (train.augment = 'none'), where the paper profile augments (the "
              "authors' CIFAR recipe: random crop with 4 px padding + horizontal flip; ImageNet: flip): the quick "
              "data are 8x8 digits or vectors, where a 4-pixel shift moves half the digit out of view and a flip "
              "turns one digit into another, and every committed quick number was made without it")

FIXBN_NOTE = ("CIFAR-10 trained with random crop (4 px padding) + horizontal flip [assumed]: the FixBN paper states "
              "no augmentation and its code is not public; this is the pipeline of the FedTAN code whose Table 1 "
              "FixBN reproduces (Table 4), and of HBN's code")


def uses_augmentation(config: Any, kind: str | None = None) -> bool:
    """Whether any run spec inside ``config`` (nested dicts and lists) sets ``augment`` other than
    ``"none"`` (with ``kind``: to ``kind``)."""
    if isinstance(config, Mapping):
        value = config.get("augment")
        if isinstance(value, str) and value != "none" and (kind is None or value == kind):
            return True
        return any(uses_augmentation(v, kind) for v in config.values())
    if isinstance(config, list | tuple):
        return any(uses_augmentation(v, kind) for v in config)
    return False


def declare(quick: Mapping[str, Any], paper: Mapping[str, Any]) -> dict[str, Any]:
    """``quick`` with :data:`QUICK_NOTE` among its deviations when ``paper`` augments (and ``quick`` does not)."""
    out = dict(quick)
    if uses_augmentation(paper) and not uses_augmentation(quick) and QUICK_NOTE not in out.get("deviations", []):
        out["deviations"] = [*out.get("deviations", []), QUICK_NOTE]
    return out
