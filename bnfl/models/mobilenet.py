"""MobileNet-v2 (Sandler et al. 2018) in torchvision's layout, and the quick stand-in tiny-MobileNet.

- **Inverted residual block** (Sandler et al. 2018, Sec. 3.3 and Table 1): 1x1 expansion conv to
  ``t * c_in`` channels (left out when ``t == 1``), norm, ReLU6; 3x3 depthwise conv (``groups``
  = channels) carrying the stride, norm, ReLU6; 1x1 projection conv, norm, no activation (the
  "linear bottleneck"); identity shortcut when the stride is 1 and the channels are unchanged.
- **Network** (Table 2): a 3x3 stride-2 stem conv to 32 channels, 17 blocks in 7 stages
  ``(t, c, n, s)`` = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2)
  (6,320,1,1), a 1x1 conv to 1280, global average pooling, dropout 0.2 and a linear head.
  3,504,872 parameters with BN at 1000 classes (torchvision's ``mobilenet_v2``).

Module names match torchvision's state_dict keys (``features.0.0.weight`` the stem conv,
``features.0.1`` its norm, ``features.N.conv.M`` the blocks, ``classifier.1`` the head), so
:func:`bnfl.models.load_pretrained` reads its ImageNet weights from a local file. Every norm
slot is :func:`bnfl.nn.make_norm` of the chosen kind. HBN Table 5 uses the network unchanged on
32x32 CIFAR-100 with the dropout removed (``dropout=0.0``, the default here: an ``nn.Identity``
keeps the head's key ``classifier.1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from bnfl.models._torchvision import torchvision_init_
from bnfl.nn import conv_class, make_norm

__all__ = ["MobileNetV2", "MBV2_SETTINGS", "TINY_SETTINGS"]

#: Sandler et al. 2018, Table 2: (expansion t, channels c, repeats n, first stride s) per stage.
MBV2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)
#: tiny-MobileNet (the CATALOG's quick stand-in at 8x8): 5 blocks, 8x8 -> 4x4 -> 2x2.
TINY_SETTINGS: tuple[tuple[int, int, int, int], ...] = ((1, 8, 1, 1), (4, 16, 2, 2), (4, 32, 2, 2))


def _conv_norm_act(cin: int, cout: int, k: int, *, stride: int = 1, groups: int = 1, norm: str, kw: dict,
                   act: bool = True) -> nn.Sequential:
    """torchvision's ``Conv2dNormActivation``: conv (no bias) -> norm -> ReLU6 (keys ``0``, ``1``)."""
    conv = conv_class(norm)(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False)
    layers: list[nn.Module] = [conv, make_norm(norm, cout, dim=2, **kw)]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """One inverted residual block with a linear bottleneck (Sandler et al. 2018, Table 1).

    ``conv`` holds, in torchvision's order: [expansion conv-norm-ReLU6 if ``t != 1``],
    depthwise conv-norm-ReLU6, projection conv, projection norm.
    """

    def __init__(self, cin: int, cout: int, stride: int, t: int, *, norm: str, kw: dict) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {stride!r}")
        hidden = cin * t
        layers: list[nn.Module] = []
        if t != 1:
            layers.append(_conv_norm_act(cin, hidden, 1, norm=norm, kw=kw))
        layers += [
            _conv_norm_act(hidden, hidden, 3, stride=stride, groups=hidden, norm=norm, kw=kw),  # depthwise
            conv_class(norm)(hidden, cout, 1, bias=False),  # linear bottleneck
            make_norm(norm, cout, dim=2, **kw),
        ]
        self.conv = nn.Sequential(*layers)
        self.use_res_connect = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv(x)
        return x + out if self.use_res_connect else out


class MobileNetV2(nn.Module):
    """MobileNet-v2 (Sandler et al. 2018) with a pluggable norm; see the module docstring.

    Parameters
    ----------
    in_channels : int, default 3
    num_classes : int, default 1000
    settings : sequence of (t, c, n, s), default :data:`MBV2_SETTINGS`
        Stages of inverted residual blocks; :data:`TINY_SETTINGS` for tiny-MobileNet.
    stem_channels : int, default 32
    stem_stride : int, default 2
    last_channels : int, default 1280
        Width of the final 1x1 conv before pooling.
    dropout : float, default 0.0
        Dropout before the head; torchvision uses 0.2, HBN removes it (Sec. 4.3, Table 5).
    norm : str, default "bn"
        Kind for :func:`bnfl.nn.make_norm`; ``"gn_ws"`` also standardises the conv weights.
    norm_kw : dict, optional

    Initialisation is torchvision's: Kaiming-normal (fan-out) convs, norm weight 1 and bias 0,
    linear weights N(0, 0.01) and bias 0.
    """

    #: Name of the classification head (skipped when a file's class count differs).
    head = "classifier.1"

    def __init__(
        self,
        *,
        in_channels: int = 3,
        num_classes: int = 1000,
        settings: Sequence[Sequence[int]] = MBV2_SETTINGS,
        stem_channels: int = 32,
        stem_stride: int = 2,
        last_channels: int = 1280,
        dropout: float = 0.0,
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if any(len(s) != 4 or min(s) <= 0 for s in settings) or not settings:
            raise ValueError(f"settings must be a non-empty sequence of positive (t, c, n, s), got {settings!r}")
        kw = dict(norm_kw or {})
        layers: list[nn.Module] = [_conv_norm_act(in_channels, stem_channels, 3, stride=stem_stride, norm=norm, kw=kw)]
        cin = stem_channels
        for t, c, n, s in settings:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t, norm=norm, kw=kw))
                cin = c
        layers.append(_conv_norm_act(cin, last_channels, 1, norm=norm, kw=kw))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout) if dropout > 0 else nn.Identity(),
                                        nn.Linear(last_channels, num_classes))
        torchvision_init_(self)

    def forward(self, x: Tensor) -> Tensor:
        out = self.features(x)
        out = out.mean(dim=(2, 3))  # global average pooling: (N, C, H, W) -> (N, C)
        return self.classifier(out)
