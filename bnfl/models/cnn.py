"""Convolutional models of the papers and their quick-profile stand-ins.

- :class:`SimpleCNN`: HBN Table 7 (and Q-SCNN).
- :class:`DigitCNN`: FedBN Table 3 / reference ``DigitModel`` (and Q-ALEX).
- :class:`AlexNetBN`: FedBN Table 9 / reference ``AlexNet``.
- :class:`TinyFCN`: Q-FCN, a 3-layer fully convolutional segmenter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from bnfl.nn import FeatureNorm, conv_class, make_norm

__all__ = ["AlexNetBN", "DigitCNN", "SimpleCNN", "TinyFCN"]


def _conv(cin: int, cout: int, k: int, s: int, p: int, norm: str) -> nn.Conv2d:
    cls = conv_class(norm)
    return cls(cin, cout, k, s, p)


def _after_pools(size: int, pools: Sequence[tuple[int, int]]) -> int:
    for k, s in pools:
        size = (size - k) // s + 1
    if size <= 0:
        raise ValueError("input_size too small for this model's pooling layers")
    return size


class SimpleCNN(nn.Module):
    """Simple-CNN of HBN (Table 7): three blocks Conv3x3(pad 1) - Norm - ReLU - MaxPool(2, 2),
    then FC(C3*s*s, hidden) - ReLU - FC(hidden, num_classes). With 3x32x32 input the first FC is
    FC(1024, 128) as printed.

    Parameters
    ----------
    in_channels : int, default 3
    input_size : int, default 32
        Height = width of the input image.
    num_classes : int, default 10
    channels : sequence of 3 ints, default (16, 32, 64)
    hidden : int, default 128
    pool : sequence of 3 bools, default (True, True, True)
        Whether each block ends with MaxPool(2, 2) (Q-SCNN drops the third).
    norm : str, default "bn"
        Kind for :func:`bnfl.nn.make_norm`.
    fedfn_head : bool, default False
        HBN's FedFN column: no norm in the blocks, :class:`~bnfl.nn.FeatureNorm` on the
        flattened features before the first FC layer. ``norm="fedfn"`` implies it (HBN App. B.1
        places FedFN there, not after every convolution).
    norm_kw : dict, optional
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        input_size: int = 32,
        num_classes: int = 10,
        channels: Sequence[int] = (16, 32, 64),
        hidden: int = 128,
        pool: Sequence[bool] = (True, True, True),
        norm: str = "bn",
        fedfn_head: bool = False,
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        kw = dict(norm_kw or {})
        fedfn_head = fedfn_head or norm == "fedfn"
        layers: list[nn.Module] = []
        cin, size = in_channels, input_size
        for cout, p in zip(channels, pool, strict=True):
            layers += [_conv(cin, cout, 3, 1, 1, norm)]
            if not fedfn_head:
                layers += [make_norm(norm, cout, dim=2, **kw)]
            layers += [nn.ReLU()]
            if p:
                layers += [nn.MaxPool2d(2, 2)]
                size = _after_pools(size, [(2, 2)])
            cin = cout
        self.features = nn.Sequential(*layers)
        flat = cin * size * size
        self.head_norm: nn.Module = FeatureNorm(flat, dim=1) if fedfn_head else nn.Identity()
        self.classifier = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        z = self.features(x).flatten(1)  # (N, C, s, s) -> (N, C*s*s)
        return self.classifier(self.head_norm(z))


class DigitCNN(nn.Module):
    """FedBN's digits CNN (Table 3; reference ``DigitModel``), BN after every conv/FC but the last.

    Conv(5x5, pad 2) blocks 64 - 64 - 128 with MaxPool(2) after the first two, then FC(128*s*s,
    2048) - FC(2048, 512) - FC(512, num_classes); s = input_size // 4 (6272 = 128*7*7 for 28x28).
    Table 3 prints layer 3 twice; the reference code (and this class) has one conv3.

    ``channels``/``fc`` shrink it for the quick profile (Q-ALEX: 3 conv + 2 FC).
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        input_size: int = 28,
        num_classes: int = 10,
        channels: Sequence[int] = (64, 64, 128),
        kernel: int = 5,
        fc: Sequence[int] = (2048, 512),
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        kw = dict(norm_kw or {})
        pad = kernel // 2
        layers: list[nn.Module] = []
        cin, size = in_channels, input_size
        for i, cout in enumerate(channels):
            layers += [_conv(cin, cout, kernel, 1, pad, norm), make_norm(norm, cout, dim=2, **kw), nn.ReLU()]
            if i < 2:
                layers += [nn.MaxPool2d(2)]
                size = _after_pools(size, [(2, 2)])
            cin = cout
        self.features = nn.Sequential(*layers)
        width = cin * size * size
        head: list[nn.Module] = []
        for h in fc:
            head += [nn.Linear(width, h), make_norm(norm, h, dim=1, **kw), nn.ReLU()]
            width = h
        head += [nn.Linear(width, num_classes)]
        self.classifier = nn.Sequential(*head)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x).flatten(1))  # (N, C, s, s) -> (N, C*s*s)


class AlexNetBN(nn.Module):
    """FedBN's AlexNet with BN (Table 9; reference ``AlexNet``), BN after every conv/FC but the
    last: Conv(11, s4, p2) 64 - MaxPool(3, 2) - Conv(5, p2) 192 - MaxPool(3, 2) - Conv3x3 384 -
    256 - 256 - MaxPool(3, 2) - AdaptiveAvgPool(6, 6) - FC(9216, 4096) - FC(4096, 4096) -
    FC(4096, num_classes). Table 9's spurious "Conv2D(64, 128, 5, 1, 2)" row is left out, as in
    the reference code. Inputs 256x256 in FedBN; any size >= 63 works.

    Parameters
    ----------
    in_channels : int, default 3
    num_classes : int, default 10
    norm : str, default "bn"
    norm_kw : dict, optional
    hidden : int, default 4096
        Width of the two hidden FC layers (Table 9: 4096, 54.5M of the 57.1M parameters);
        smaller only to run the same layers cheaply (tests).
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        num_classes: int = 10,
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
        hidden: int = 4096,
    ) -> None:
        super().__init__()
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden must be a positive integer (Table 9: 4096), got {hidden!r}")
        kw = dict(norm_kw or {})

        def block(cin: int, cout: int, k: int, s: int, p: int) -> list[nn.Module]:
            return [_conv(cin, cout, k, s, p, norm), make_norm(norm, cout, dim=2, **kw), nn.ReLU()]

        self.features = nn.Sequential(
            *block(in_channels, 64, 11, 4, 2), nn.MaxPool2d(3, 2),
            *block(64, 192, 5, 1, 2), nn.MaxPool2d(3, 2),
            *block(192, 384, 3, 1, 1),
            *block(384, 256, 3, 1, 1),
            *block(256, 256, 3, 1, 1), nn.MaxPool2d(3, 2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Linear(256 * 6 * 6, hidden), make_norm(norm, hidden, dim=1, **kw), nn.ReLU(),
            nn.Linear(hidden, hidden), make_norm(norm, hidden, dim=1, **kw), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        z = self.avgpool(self.features(x)).flatten(1)  # (N, 256, 6, 6) -> (N, 9216)
        return self.classifier(z)


class TinyFCN(nn.Module):
    """Q-FCN: three Conv3x3(pad 1) - Norm - ReLU layers and a 1x1 classifier; output
    (N, num_classes, H, W) for per-pixel labels (stand-in for DeepLab-v3+ in FixBN Table 3).
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        num_classes: int = 11,
        channels: Sequence[int] = (16, 32, 32),
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        kw = dict(norm_kw or {})
        layers: list[nn.Module] = []
        cin = in_channels
        for cout in channels:
            layers += [_conv(cin, cout, 3, 1, 1, norm), make_norm(norm, cout, dim=2, **kw), nn.ReLU()]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Conv2d(cin, num_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
