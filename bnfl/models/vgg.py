"""VGG-11 and VGG-19 (Simonyan & Zisserman 2015) in torchvision's layout, and the quick stand-in tiny-VGG.

- **Features** (Simonyan & Zisserman 2015, Table 1, configurations A and E): 3x3 convs (stride
  1, padding 1, with bias), each followed by a norm slot and ReLU ("vgg11_bn" layout: conv, norm,
  ReLU take three indices of ``features``), and a 2x2 max-pool after each of the 5 blocks.
- **Head** ``head="imagenet"`` (torchvision's, the default): adaptive average pooling to 7x7,
  then FC 25088-4096, ReLU, [dropout], FC 4096-4096, ReLU, [dropout], FC 4096-classes
  (``classifier.0/3/6``). At 32x32 the features are 1x1 and the pooling copies them to 7x7;
  HBN Table 5 runs exactly this on CIFAR-100 (its reference code takes torchvision's
  ``vgg11_bn`` / ``vgg19_bn`` unchanged) with the dropout removed (``dropout=0.0``, the default
  here; ``nn.Identity`` keeps the key indices). ``head="cifar"``: global average pooling and one
  FC from the last conv width (``classifier.0``), the common CIFAR variant; not HBN's.

Parameters with 1000 classes (torchvision): VGG-11 132,863,336 without norm (``norm="none"``),
132,868,840 with BN; VGG-19 143,667,240 / 143,678,248. GN has the same affine count as BN.

Initialisation is torchvision's: Kaiming-normal (fan-out) conv weights, zero conv bias, norm
weight 1 and bias 0, linear weights N(0, 0.01) and bias 0. Module names match torchvision's
``vgg11_bn`` / ``vgg19_bn`` state_dict keys; :func:`bnfl.models.load_pretrained` also reads the
plain ``vgg11`` / ``vgg19`` files (no BN) by matching the convs in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from bnfl.models._torchvision import torchvision_init_
from bnfl.nn import conv_class, make_norm

__all__ = ["VGG", "VGG_CONFIGS"]

#: Simonyan & Zisserman 2015, Table 1: conv widths, ``"M"`` a 2x2 max-pool. "tiny" is the
#: CATALOG's tiny-VGG (6 convs) for 8x8 digits: 8x8 -> 4x4 -> 2x2 -> 1x1.
VGG_CONFIGS: dict[str, tuple[int | str, ...]] = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"),
    "tiny": (16, 16, "M", 32, 32, "M", 64, 64, "M"),
}


class VGG(nn.Module):
    """VGG with a norm slot after every conv; see the module docstring.

    Parameters
    ----------
    config : str or sequence, default "vgg11"
        A key of :data:`VGG_CONFIGS` or a sequence of conv widths and ``"M"``.
    in_channels : int, default 3
    num_classes : int, default 1000
    head : {"imagenet", "cifar"}, default "imagenet"
        torchvision's 7x7-pool + 4096-4096 head, or global pooling + one FC.
    hidden : int, default 4096
        Width of the two hidden FC layers of the ``"imagenet"`` head.
    dropout : float, default 0.0
        Dropout in the ``"imagenet"`` head; torchvision uses 0.5, HBN removes it.
    norm : str, default "bn"
        Kind for :func:`bnfl.nn.make_norm`; ``"gn_ws"`` also standardises the conv weights.
    norm_kw : dict, optional
    """

    def __init__(
        self,
        config: str | Sequence[int | str] = "vgg11",
        *,
        in_channels: int = 3,
        num_classes: int = 1000,
        head: str = "imagenet",
        hidden: int = 4096,
        dropout: float = 0.0,
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(config, str):
            if config not in VGG_CONFIGS:
                raise ValueError(f"unknown VGG config {config!r}; known: {', '.join(VGG_CONFIGS)}")
            config = VGG_CONFIGS[config]
        if not any(isinstance(v, int) for v in config) or any(v != "M" and not isinstance(v, int) for v in config):
            raise ValueError(f"config must list conv widths (int) and 'M' (max-pool), got {config!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        kw = dict(norm_kw or {})
        conv = conv_class(norm)
        layers: list[nn.Module] = []
        cin = in_channels
        for v in config:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [conv(cin, int(v), 3, padding=1), make_norm(norm, int(v), dim=2, **kw), nn.ReLU()]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        #: Number of 2x2 max-pools: the input side must be at least 2**pools.
        self.pools = sum(v == "M" for v in config)

        def drop() -> nn.Module:
            return nn.Dropout(dropout) if dropout > 0 else nn.Identity()

        if head == "imagenet":
            self.avgpool: nn.Module = nn.AdaptiveAvgPool2d((7, 7))
            self.classifier = nn.Sequential(
                nn.Linear(cin * 7 * 7, hidden), nn.ReLU(), drop(),
                nn.Linear(hidden, hidden), nn.ReLU(), drop(),
                nn.Linear(hidden, num_classes),
            )
            self.head = "classifier.6"
        elif head == "cifar":
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.classifier = nn.Sequential(nn.Linear(cin, num_classes))
            self.head = "classifier.0"
        else:
            raise ValueError(f"head must be 'imagenet' (7x7 pool, 4096-4096 FC) or 'cifar' (global pool, one FC), "
                             f"got {head!r}")
        torchvision_init_(self)

    def forward(self, x: Tensor) -> Tensor:
        if min(x.shape[-2:]) < 2**self.pools:
            raise ValueError(f"VGG with {self.pools} max-pools needs inputs of at least {2**self.pools}x"
                             f"{2**self.pools}, got {tuple(x.shape)}")
        out = self.avgpool(self.features(x)).flatten(1)  # (N, C, 7, 7) -> (N, C*49) or (N, C, 1, 1) -> (N, C)
        return self.classifier(out)
