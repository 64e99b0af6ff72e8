"""Model registry: the papers' models and the quick-profile stand-ins, norm layer pluggable.

>>> from bnfl import models
>>> net = models.build("resnet20", norm="gn")          # FedTAN / FixBN CIFAR-10 model with GN
>>> sorted(models.available())[:3]
['alexnet_bn', 'digit_cnn', 'fedtan_mlp']

Every builder takes ``num_classes``, ``in_channels``, ``input_size`` (ignored by models with
global pooling), ``norm`` (any kind of :data:`bnfl.nn.NORM_KINDS`) and the norm options
``groups``, ``eps``, ``momentum`` for :func:`bnfl.nn.make_norm`, and ``init``
(:mod:`bnfl.models.inits`): ``"pytorch"`` (default; the class's own initialisation: PyTorch's
default, ResNet-20 family: Kaiming-normal conv/linear weights, as the CIFAR reference code),
``"he_normal"`` or ``"authors"`` (the paper's code's scheme where it states one).
``torch.manual_seed(s)`` before :func:`build` gives the same weights every time.

================  ==============================================================  =================================
name              model                                                           default input
================  ==============================================================  =================================
fedtan_mlp        784-30-10 MLP, one norm after the hidden layer                  (1, 28, 28) MNIST
mlp               MLP with ``hidden=(...)`` widths                                (1, 28, 28) or ``in_features``
simple_cnn        HBN Table 7 Simple-CNN                                          (3, 32, 32)
simple_cnn_fedfn  Simple-CNN, FedFN column (FN before the head)                   (3, 32, 32)
resnet20          CIFAR ResNet-20, option-A shortcuts (L=19)                      (3, 32, 32)
resnet18          CIFAR ResNet-18, 3x3 stem (``stem="imagenet"``: torchvision's)  (3, 32, 32)
digit_cnn         FedBN Table 3 digits CNN                                        (3, 28, 28)
alexnet_bn        FedBN Table 9 AlexNet-BN                                        (3, 256, 256)
q_mlp1            Q-MLP1: 64-30-norm-ReLU-10                                      (1, 8, 8) digits
q_mlp_bn          Q-MLP-BN: 64-32-norm-ReLU-32-norm-ReLU-10                       (1, 8, 8)
q_res             Q-RES: tiny ResNet, 8/16/32 ch, 1 block/stage (L=7)             (1, 8, 8)
q_plain           Q-PLAIN: 10 linear layers, width 32                             (1, 8, 8)
q_scnn            Q-SCNN: Simple-CNN pattern at 8x8                               (1, 8, 8)
q_alex            Q-ALEX: 3 conv + 2 FC, norm after all but the last              (1, 8, 8)
q_fcn             Q-FCN: 3 conv+norm, 1x1 classifier (segmentation)               (1, 8, 8); Q-SEG: 2 or 11 classes
resnet20_fixup    ResNet-20 layout, FixUp init, no norm (``norm`` ignored)         (3, 32, 32)
q_res_fixup       Q-RES layout, FixUp init, no norm                               (1, 8, 8)
lenet             LeNet-like CNN, norm after each conv (FixBN Fig. 5)             (3, 32, 32)
q_lenet           LeNet-like CNN at 8x8: 3x3 'same' convs, FC 64                  (1, 8, 8)
deeplabv3plus     DeepLab-v3+ (``backbone=`` mobilenet_v2 | resnet18), per-pixel   (3, 64, 128) Cityscapes
mobilenet_v2      MobileNet-v2, torchvision layout (HBN Table 5)                  (3, 32, 32) CIFAR-100; any size
resnet50          ResNet-50, torchvision layout, bottleneck v1.5 (HBN Table 5)    (3, 32, 32); any size
vgg11             VGG-11, norm after each conv (vgg11_bn layout; HBN Table 5)     (3, 32, 32); at least 32x32
vgg19             VGG-19, norm after each conv (vgg19_bn layout; HBN Table 5)     (3, 32, 32); at least 32x32
tiny_vgg          tiny-VGG: 6 conv+norm+ReLU, 3 max-pools, global pool, FC        (1, 8, 8) digits
tiny_mobilenet    tiny-MobileNet: 5 inverted residual (depthwise) blocks, FC      (1, 8, 8) digits
================  ==============================================================  =================================

HBN Table 5's models (``mobilenet_v2``, ``resnet50``, ``vgg11``, ``vgg19``, and ``resnet18`` with
``stem="imagenet"``) run on 32x32 CIFAR-100 as torchvision's networks, unchanged but for the
norm slot and the dropout (removed by default, ``dropout=`` puts it back). VGG's head is
torchvision's 7x7-pool + 4096-4096 FC (``head="cifar"``: global pool + one FC, not HBN's).
``weights="file.pth"`` loads a local state_dict in torchvision's layout after building
(:func:`load_pretrained`; nothing is downloaded): the head is left out when ``num_classes``
differs, norm layers of a kind other than BN keep their initialisation, and a warning says so.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from torch import nn

from bnfl.models.cnn import AlexNetBN, DigitCNN, SimpleCNN, TinyFCN
from bnfl.models.deeplab import DeepLabV3Plus
from bnfl.models.fixup import FixupResNet
from bnfl.models.inits import INITS, apply_init
from bnfl.models.lenet import LeNet
from bnfl.models.mlp import MLP
from bnfl.models.mobilenet import TINY_SETTINGS, MobileNetV2
from bnfl.models.pretrained import LoadReport, load_pretrained
from bnfl.models.resnet import CifarResNet, ResNet18, ResNet50
from bnfl.models.vgg import VGG
from bnfl.nn import NORM_KINDS
from bnfl.registry import Registry, is_import_string

__all__ = [
    "MLP",
    "AlexNetBN",
    "CifarResNet",
    "DeepLabV3Plus",
    "DigitCNN",
    "FixupResNet",
    "LeNet",
    "LoadReport",
    "MobileNetV2",
    "ResNet18",
    "ResNet50",
    "SimpleCNN",
    "TinyFCN",
    "VGG",
    "INITS",
    "available",
    "build",
    "build_for",
    "load_pretrained",
    "MODELS",
    "register",
]

_Builder = Callable[..., nn.Module]


class _Entry(NamedTuple):
    builder: _Builder  # builder(in_channels, input_size, num_classes, norm, norm_kw, **kw); public: keywords
    in_channels: int  # default C
    input_size: int  # default H = W
    flat: bool  # takes in_channels * input_size**2 flat features (an MLP)
    public: bool = False  # a user's builder: builder(input_shape=..., num_classes=..., norm=..., **options)


def _as_entry(spec: str, obj: Any) -> _Entry:
    if isinstance(obj, _Entry):
        return obj
    if not callable(obj):
        raise ValueError(f"model {spec!r} is {obj!r}, not a function or class that builds an nn.Module")
    return _Entry(obj, 0, 0, False, True)


#: Every model builder by name (a :class:`~bnfl.registry.Registry`): the papers' models below,
#: a user's registered with :func:`register`, and by import string or entry point of group
#: ``bnfl.models`` a function ``fn(*, input_shape, num_classes, norm, **options) -> nn.Module``.
MODELS: Registry[_Entry] = Registry(
    "model", group="bnfl.models", listing="available", sort=True, convert=_as_entry,
    accepts=lambda o: isinstance(o, _Entry) or isinstance(o, type) and issubclass(o, nn.Module),
    expects="an nn.Module subclass or a function marked @plugin('model')")


def _register(name: str, in_channels: int, input_size: int, *, flat: bool = False) -> Callable[[_Builder], _Builder]:
    def deco(fn: _Builder) -> _Builder:
        MODELS.register(name, _Entry(fn, in_channels, input_size, flat))
        return fn

    return deco


def register(name: str | None = None, *, replace: bool = False) -> Callable[[_Builder], _Builder]:
    """Decorator: register a model builder under ``name`` (default: the function's name).

    The builder is called with keywords ``input_shape`` (one sample's shape, ``(C, H, W)`` or
    ``(D,)``), ``num_classes`` and ``norm`` (the method's kind, :data:`bnfl.nn.NORM_KINDS`), and
    the norm options ``groups``, ``eps``, ``momentum`` where its signature names them, then the
    ``[model]`` options of the run config; it returns an ``nn.Module``. Example::

        @models.register("my_net")
        def my_net(*, input_shape, num_classes, norm="bn", hidden=32):
            ...

    The same function also runs unregistered, by import string (``name = "mypkg.nets:my_net"``)
    or by an entry point of group ``bnfl.models``.
    """

    def deco(fn: _Builder) -> _Builder:
        MODELS.register(name or fn.__name__, _Entry(fn, 0, 0, False, True), replace=replace)
        return fn

    return deco


def _build_public(name: str, fn: _Builder, input_shape: tuple[int, ...], num_classes: int, norm: str,
                  nkw: dict[str, Any], kw: dict[str, Any]) -> nn.Module:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    norm_kw = {k: v for k, v in nkw.items() if takes_all or k in params}
    net = fn(input_shape=input_shape, num_classes=num_classes, norm=norm, **norm_kw, **kw)
    if not isinstance(net, nn.Module):
        raise ValueError(f"model {name!r} returned {type(net).__name__}, not a torch.nn.Module")
    return net


@_register("fedtan_mlp", 1, 28, flat=True)
def _fedtan_mlp(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return MLP(c * s * s, (30,), num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("mlp", 1, 28, flat=True)
def _mlp(c: int, s: int, n: int, norm: str, nkw: dict, *, hidden: tuple[int, ...] = (30,),
         in_features: int | None = None) -> nn.Module:
    return MLP(in_features or c * s * s, hidden, num_classes=n, norm=norm, norm_kw=nkw)


@_register("simple_cnn", 3, 32)
def _simple_cnn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return SimpleCNN(in_channels=c, input_size=s, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("simple_cnn_fedfn", 3, 32)
def _simple_cnn_fedfn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return SimpleCNN(in_channels=c, input_size=s, num_classes=n, norm=norm, norm_kw=nkw,
                     fedfn_head=True, **kw)


@_register("resnet20", 3, 32)
def _resnet20(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return CifarResNet(3, (16, 32, 64), in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("resnet18", 3, 32)
def _resnet18(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return ResNet18(in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("digit_cnn", 3, 28)
def _digit_cnn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return DigitCNN(in_channels=c, input_size=s, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("alexnet_bn", 3, 256)
def _alexnet_bn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return AlexNetBN(in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("q_mlp1", 1, 8, flat=True)
def _q_mlp1(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return MLP(c * s * s, (30,), num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("q_mlp_bn", 1, 8, flat=True)
def _q_mlp_bn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return MLP(c * s * s, (32, 32), num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("q_res", 1, 8)
def _q_res(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return CifarResNet(1, (8, 16, 32), in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("q_plain", 1, 8, flat=True)
def _q_plain(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return MLP(c * s * s, (32,) * 9, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("q_scnn", 1, 8)
def _q_scnn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return SimpleCNN(in_channels=c, input_size=s, num_classes=n, channels=(8, 16, 32), hidden=64,
                     pool=(True, True, False), norm=norm, norm_kw=nkw, **kw)


@_register("q_alex", 1, 8)
def _q_alex(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return DigitCNN(in_channels=c, input_size=s, num_classes=n, channels=(16, 32, 64), kernel=3,
                    fc=(64,), norm=norm, norm_kw=nkw, **kw)


@_register("q_fcn", 1, 8)
def _q_fcn(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return TinyFCN(in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("resnet20_fixup", 3, 32)
def _resnet20_fixup(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    # FixUp has no normalisation layer: ``norm`` and its options are ignored.
    return FixupResNet(3, (16, 32, 64), in_channels=c, num_classes=n, **kw)


@_register("q_res_fixup", 1, 8)
def _q_res_fixup(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    # FixUp has no normalisation layer: ``norm`` and its options are ignored.
    return FixupResNet(1, (8, 16, 32), in_channels=c, num_classes=n, **kw)


@_register("lenet", 3, 32)
def _lenet(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return LeNet(in_channels=c, input_size=s, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("q_lenet", 1, 8)
def _q_lenet(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return LeNet(in_channels=c, input_size=s, num_classes=n, channels=(8, 16), kernel=3, fc=(64,),
                 same=True, norm=norm, norm_kw=nkw, **kw)


@_register("deeplabv3plus", 3, 64)
def _deeplab(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return DeepLabV3Plus(num_classes=n, in_channels=c, norm=norm, norm_kw=nkw, **kw)


@_register("mobilenet_v2", 3, 32)
def _mobilenet_v2(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return MobileNetV2(in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


@_register("resnet50", 3, 32)
def _resnet50(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return ResNet50(in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)


def _vgg(config: str, c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    net = VGG(config, in_channels=c, num_classes=n, norm=norm, norm_kw=nkw, **kw)
    if s < 2**net.pools:
        raise ValueError(f"input_size={s} is too small for {config!r}: {net.pools} max-pools need at least "
                         f"{2**net.pools}")
    return net


@_register("vgg11", 3, 32)
def _vgg11(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return _vgg("vgg11", c, s, n, norm, nkw, **kw)


@_register("vgg19", 3, 32)
def _vgg19(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return _vgg("vgg19", c, s, n, norm, nkw, **kw)


@_register("tiny_vgg", 1, 8)
def _tiny_vgg(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return _vgg("tiny", c, s, n, norm, nkw, **{"head": "cifar", **kw})


@_register("tiny_mobilenet", 1, 8)
def _tiny_mobilenet(c: int, s: int, n: int, norm: str, nkw: dict, **kw: Any) -> nn.Module:
    return MobileNetV2(in_channels=c, num_classes=n, settings=TINY_SETTINGS, stem_channels=16, stem_stride=1,
                       last_channels=64, norm=norm, norm_kw=nkw, **kw)


def available() -> list[str]:
    """Names accepted by :func:`build`, sorted (registered builders and entry points of group
    ``bnfl.models``; :func:`build` also takes an import string ``"package.module:builder"``)."""
    return MODELS.available()


def build(
    name: str,
    *,
    num_classes: int = 10,
    in_channels: int | None = None,
    input_size: int | None = None,
    norm: str = "bn",
    groups: int = 2,
    eps: float = 1e-5,
    momentum: float = 0.1,
    weights: str | os.PathLike[str] | None = None,
    pretrained_norm: bool = True,
    init: str = "pytorch",
    **kw: Any,
) -> nn.Module:
    """Build a registered model.

    Parameters
    ----------
    name : str
        One of :func:`available`.
    num_classes : int, default 10
    in_channels : int, optional
        Input channels; default per model (3 for CIFAR/digits models, 1 for quick models).
    input_size : int, optional
        Input height = width (flattened for MLPs); default per model.
    norm : str, default "bn"
        Normalisation kind for every norm slot (:data:`bnfl.nn.NORM_KINDS`).
    groups, eps, momentum
        Options of :func:`bnfl.nn.make_norm` (GN groups default 2 as in FixBN/HBN).
    weights : str or path-like, optional
        A local state_dict file to load after building (:func:`load_pretrained`, which warns
        about the head and norm entries it leaves out); nothing is downloaded.
    pretrained_norm : bool, default True
        With ``weights``: load the norm layers' entries where their kind takes them; ``False``
        keeps every norm layer freshly initialised (HBN's reference code).
    init : str, default "pytorch"
        Weight initialisation, one of :data:`INITS` (:func:`bnfl.models.inits.apply_init`):
        ``"pytorch"`` leaves the model as its class builds it, ``"he_normal"`` redraws conv
        weights ``N(0, 2/fan_out)`` and linear weights ``N(0, 2/fan_in)``, ``"authors"`` is the
        scheme the paper's code states for this model (an error where none does). Applied
        before ``weights`` are loaded.
    **kw
        Model-specific options (e.g. ``hidden=(64, 64)`` for ``"mlp"``).

    Returns
    -------
    nn.Module
        In training mode, on the CPU in float32 (move it with ``.to(device)``).
    """
    entry = MODELS.lookup(name)
    if not isinstance(init, str) or init not in INITS:
        raise ValueError(f"unknown init {init!r}; choices: {', '.join(INITS)}")
    if not isinstance(norm, str) or not NORM_KINDS.knows(norm.lower()) and not is_import_string(norm):
        raise ValueError(f"unknown norm kind {norm!r}; valid kinds: {', '.join(NORM_KINDS)}")
    for label, v in (("num_classes", num_classes), ("in_channels", in_channels), ("input_size", input_size)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise ValueError(f"{label} must be a positive int, got {v!r}")
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < float("inf"):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    if momentum is not None and (isinstance(momentum, bool) or not isinstance(momentum, numbers.Real)
                                 or not 0 <= momentum <= 1):
        raise ValueError(f"momentum must be a number in [0, 1] (or None: a cumulative average), got {momentum!r}")
    fn, c0, s0, _, public = entry
    nkw = {"groups": groups, "eps": eps, "momentum": momentum}
    norm = norm if is_import_string(norm) else norm.lower()
    if public:
        shape = kw.pop("input_shape", None)
        if shape is None:
            if in_channels is None or input_size is None:
                raise ValueError(f"model {name!r} needs its input shape: use build_for(name, input_shape, ...) or "
                                 "give in_channels and input_size")
            shape = (in_channels, input_size, input_size)
        net = _build_public(name, fn, tuple(shape), num_classes, norm, nkw, kw)
    else:
        net = fn(in_channels or c0, input_size or s0, num_classes, norm, nkw, **kw)
    apply_init(net, init, model=name)
    if weights is not None:
        load_pretrained(net, weights, norm_state=bool(pretrained_norm))
    return net


def build_for(name: str, input_shape: Sequence[int], *, num_classes: int, **kw: Any) -> nn.Module:
    """Build a registered model for samples of shape ``input_shape`` (e.g. ``Split.input_shape``).

    ``in_channels`` and ``input_size`` are derived from the shape: ``(C, H, W)`` gives ``C``
    and ``H``; a flat ``(D,)`` shape (MLPs only) gives ``1`` and ``sqrt(D)``. Options
    given in ``kw`` take precedence over the derived ones.

    Parameters
    ----------
    name : str
        One of :func:`available`.
    input_shape : sequence of int
        Shape of one sample, ``(C, H, W)`` or ``(D,)``.
    num_classes : int
    **kw
        Everything else :func:`build` takes (``norm``, ``eps``, model options, ...).

    Returns
    -------
    nn.Module
        As :func:`build`.

    Raises
    ------
    ValueError
        Unknown ``name``; a flat input to a convolutional model; a flat ``D`` that is not a
        perfect square (give ``in_channels`` and ``input_size``, or ``in_features`` for ``"mlp"``);
        any other shape.
    """
    entry = MODELS.lookup(name)
    shape = tuple(int(d) for d in input_shape)
    if entry.public:
        return build(name, num_classes=num_classes, input_shape=shape, **kw)
    derived: dict[str, int] = {}
    if len(shape) == 3:
        derived = {"in_channels": shape[0], "input_size": shape[1]}
    elif len(shape) == 1:
        if not entry.flat:
            raise ValueError(f"model {name!r} takes (C, H, W) inputs, got flat shape {shape}; "
                             f"use an MLP ({', '.join(n for n in MODELS if MODELS[n].flat)}) "
                             "or unflattened data")
        given = "in_features" in kw or ("in_channels" in kw and "input_size" in kw)
        side = math.isqrt(shape[0])
        if side * side == shape[0]:
            derived = {"in_channels": 1, "input_size": side}
        elif not given:
            raise ValueError(f"flat input of {shape[0]} features is not a square image for {name!r}; "
                             "pass in_channels and input_size with in_channels * input_size**2 == "
                             f"{shape[0]}" + (", or in_features" if name == "mlp" else ""))
    else:
        raise ValueError(f"input_shape must be (C, H, W) or (D,), got {shape}")
    return build(name, num_classes=num_classes, **{**derived, **kw})
