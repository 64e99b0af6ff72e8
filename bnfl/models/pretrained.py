"""Pretrained weights from a local state_dict file in torchvision's key layout (nothing is downloaded).

HBN Table 5 starts MobileNet-v2, ResNet-18/50 and VGG-11/19 from ImageNet weights. bnfl cannot
download them (and torchvision does not import beside the pinned CPU torch), so a user who has
the files (e.g. torchvision's ``resnet50-0676ba61.pth``, ``mobilenet_v2-b0353104.pth``,
``vgg11_bn-6002323d.pth``, ``vgg19_bn-c79401a0.pth``, ``resnet18-f37072fd.pth``) passes the
local path: ``bnfl.models.build("resnet50", num_classes=100, weights="resnet50.pth")``.

What is loaded, layer by layer:

- **Convs and linear layers**: every tensor, shapes must match (a different ``in_channels`` or
  stem is an error naming the key).
- **Head** (``model.head``, e.g. ``fc`` or ``classifier.6``): loaded when its shape matches;
  otherwise (``num_classes`` differs from the file's 1000) it keeps its initialisation, a
  warning says so and :attr:`LoadReport.skipped_head` lists the file's keys.
- **Norm layers**: loaded where the model's layer has exactly the file layer's entries (BN,
  FixBN, frozen BN take BN's weight, bias, running mean/var and count). Any other kind (GN, LN,
  HBN, FBN, static BN, none) keeps its own initialisation: its file entries are skipped with a
  warning and listed in :attr:`LoadReport.skipped_norm`, and the model's own norm entries (e.g.
  HBN's alpha and global statistics) are listed in :attr:`LoadReport.kept`.
  ``norm_state=False`` skips every norm layer's entries: HBN's reference code does this for
  all kinds, BN included (it builds torchvision's pretrained model, then replaces every
  ``BatchNorm2d`` by a fresh layer).

Key layouts: ``mobilenet_v2``, ``resnet50`` and ``vgg11``/``vgg19`` use torchvision's names
directly; torchvision's plain ``vgg11``/``vgg19`` files (no BN, other ``features`` indices) are
matched to the convs in order; torchvision's ``resnet18`` file is renamed to bnfl's
:class:`~bnfl.models.ResNet18` (``stem="imagenet"``): ``bn1`` -> ``norm1``, ``layerI.B`` ->
``stages.(I-1).B``, ``downsample`` -> ``shortcut``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import NamedTuple

from torch import Tensor, nn

from bnfl import _safe_torch
from bnfl.models.resnet import ResNet18
from bnfl.models.vgg import VGG
from bnfl.nn import is_norm_layer

__all__ = ["LoadReport", "load_pretrained", "read_state_dict"]


class LoadReport(NamedTuple):
    """What :func:`load_pretrained` did, as state_dict keys (the model's names)."""

    loaded: tuple[str, ...]  # copied from the file
    skipped_head: tuple[str, ...]  # file keys of the head, left out (class count differs)
    skipped_norm: tuple[str, ...]  # file keys of norm layers whose kind cannot take them
    kept: tuple[str, ...]  # model keys left at their initialisation (norm-local state, new head)


def read_state_dict(path: str | PathLike[str]) -> dict[str, Tensor]:
    """Read a state_dict file (``torch.save(model.state_dict(), path)``) onto the CPU.

    Also accepts a checkpoint dict holding it under ``"state_dict"`` or ``"model"``. Only
    tensors are read (``torch.load(weights_only=True)``: no code in the file runs).

    Raises
    ------
    FileNotFoundError
        No such file; bnfl downloads nothing.
    ValueError
        The file holds no mapping of names to tensors.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"pretrained weights file {str(p)!r} not found; bnfl downloads nothing: save the state_dict "
            "(e.g. torchvision's ImageNet .pth file) on this machine and pass its path"
        )
    try:
        obj = _safe_torch.load(p)
    except Exception as err:  # noqa: BLE001 - torch's zip reader, the safe unpickler, a truncated file
        raise ValueError(f"pretrained weights file {str(p)!r} is unreadable ({_safe_torch.why(err)})") from None
    if isinstance(obj, Mapping):
        for wrapper in ("state_dict", "model"):
            if isinstance(obj.get(wrapper), Mapping):
                obj = obj[wrapper]
                break
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, Tensor) for v in obj.values()):
        raise ValueError(f"{str(p)!r} does not hold a state_dict (a mapping of names to tensors)")
    return {str(k).removeprefix("module."): v for k, v in obj.items()}  # DataParallel's prefix


# --------------------------------------------------------------------------------------------
# Key layouts
# --------------------------------------------------------------------------------------------
def _torchvision_resnet18_to_bnfl(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """torchvision ``resnet18`` keys -> :class:`ResNet18` keys (unchanged if already bnfl's)."""
    if "layer1.0.conv1.weight" not in sd:
        return sd
    out = {}
    for k, v in sd.items():
        k = re.sub(r"^bn1\.", "norm1.", k)
        k = re.sub(r"^layer(\d)\.", lambda m: f"stages.{int(m.group(1)) - 1}.", k)
        k = re.sub(r"\.bn(\d)\.", r".norm\1.", k)
        out[k.replace(".downsample.", ".shortcut.")] = v
    return out


def _plain_vgg_to_model(sd: dict[str, Tensor], model: VGG) -> dict[str, Tensor]:
    """A VGG file without norm layers (torchvision's ``vgg11``: conv, ReLU per conv) -> the
    model's ``features`` indices (conv, norm, ReLU per conv), matching the convs in order."""
    feat = [k for k in sd if k.startswith("features.")]
    if any(sd[k].dim() not in (1, 4) for k in feat):
        return sd
    file_convs = sorted({int(k.split(".")[1]) for k in feat if sd[k].dim() == 4})
    if len(feat) != 2 * len(file_convs):  # norm entries present: not the plain layout
        return sd
    model_convs = [i for i, m in enumerate(model.features) if isinstance(m, nn.Conv2d)]
    if file_convs == model_convs or len(file_convs) != len(model_convs):
        return sd
    index = dict(zip(file_convs, model_convs, strict=True))
    out = {k: v for k, v in sd.items() if not k.startswith("features.")}
    for k in feat:
        _, i, leaf = k.split(".", 2)
        out[f"features.{index[int(i)]}.{leaf}"] = sd[k]
    return out


def _head_of(model: nn.Module) -> str | None:
    head = getattr(model, "head", None)
    if isinstance(head, str):
        return head
    return "fc" if isinstance(getattr(model, "fc", None), nn.Linear) else None


def _under(key: str, prefix: str) -> bool:
    return key.startswith(prefix + ".")


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------
def load_pretrained(model: nn.Module, path: str | PathLike[str], *, norm_state: bool = True) -> LoadReport:
    """Load a local state_dict file into ``model`` (in place), layer by layer as the module
    docstring says; warns about every part left out.

    Parameters
    ----------
    model : nn.Module
        Typically from :func:`bnfl.models.build` (any norm kind, any ``num_classes``).
    path : str or path-like
        A ``.pth`` file with a state_dict in torchvision's layout (or one saved from bnfl).
    norm_state : bool, default True
        Load the norm layers that can take the file's entries; ``False`` keeps every norm layer
        fresh (HBN's reference code).

    Returns
    -------
    LoadReport

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist (nothing is downloaded).
    ValueError
        The file does not fit the model: a shape mismatch outside the head, entries the model
        does not have, or model entries the file lacks (outside norm layers and the head).
    """
    sd = read_state_dict(path)
    if isinstance(model, ResNet18):
        sd = _torchvision_resnet18_to_bnfl(sd)
    if isinstance(model, VGG):
        sd = _plain_vgg_to_model(sd, model)
    own = model.state_dict()
    norms = [name for name, m in model.named_modules() if name and is_norm_layer(m)]
    head = _head_of(model)

    def norm_of(key: str) -> str | None:
        return next((n for n in norms if _under(key, n)), None)

    take: dict[str, Tensor] = {}
    skipped_norm: list[str] = []
    skipped_head: list[str] = []
    # Norm layers: all or nothing per layer, by the layer's own entries.
    for n in norms:
        mine = {k for k in own if _under(k, n)}
        theirs = {k for k in sd if _under(k, n)}
        if not theirs:
            continue
        if norm_state and mine == theirs and all(own[k].shape == sd[k].shape for k in mine):
            take.update({k: sd[k] for k in mine})
        else:
            skipped_norm += sorted(theirs)
    # The head: all or nothing.
    if head is not None:
        theirs = {k for k in sd if _under(k, head)}
        mine = {k for k in own if _under(k, head)}
        if theirs and mine == theirs and all(own[k].shape == sd[k].shape for k in mine):
            take.update({k: sd[k] for k in mine})
        elif theirs:
            skipped_head += sorted(theirs)
    # Everything else must fit exactly.
    rest = [k for k in sd if norm_of(k) is None and not (head and _under(k, head))]
    unexpected = [k for k in rest if k not in own]
    if unexpected:
        raise ValueError(f"{str(path)!r} does not fit {type(model).__name__}: {len(unexpected)} entries the model "
                         f"lacks, e.g. {unexpected[:4]} (a different architecture or key layout?)")
    for k in rest:
        if own[k].shape != sd[k].shape:
            raise ValueError(f"{str(path)!r}: {k!r} has shape {tuple(sd[k].shape)} in the file but "
                             f"{tuple(own[k].shape)} in the model (in_channels, stem or width differ?)")
        take[k] = sd[k]
    missing = [k for k in own if k not in take and norm_of(k) is None and not (head and _under(k, head))]
    if missing:
        raise ValueError(f"{str(path)!r} lacks {len(missing)} entries of {type(model).__name__}, "
                         f"e.g. {missing[:4]}")
    model.load_state_dict(take, strict=False)
    kept = tuple(k for k in own if k not in take)
    if skipped_head:
        last = skipped_head[-1]
        warnings.warn(f"pretrained weights: head {head!r} left at its initialisation: the file's {last!r} has shape "
                      f"{tuple(sd[last].shape)}, which the model's head does not take (num_classes or head "
                      f"layout differ); skipped {len(skipped_head)} entries", stacklevel=2)
    if skipped_norm:
        why = "norm_state=False" if not norm_state else "the model's norm kind has other entries than the file's"
        warnings.warn(f"pretrained weights: {len(skipped_norm)} norm-layer entries skipped ({why}), e.g. "
                      f"{skipped_norm[:3]}; those layers keep their initialisation", stacklevel=2)
    return LoadReport(tuple(take), tuple(skipped_head), tuple(skipped_norm), kept)
