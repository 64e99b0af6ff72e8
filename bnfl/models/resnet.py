"""ResNets (He et al. 2016): the CIFAR ResNet-20 family (option-A shortcuts), ResNet-18 and
torchvision's ResNet-50 (bottleneck blocks, v1.5: the stride on the 3x3 conv)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from bnfl.models._torchvision import torchvision_init_
from bnfl.nn import conv_class, make_norm

__all__ = ["CifarResNet", "ResNet18", "ResNet50"]


def _conv3x3(cin: int, cout: int, stride: int, norm: str) -> nn.Conv2d:
    cls = conv_class(norm)
    return cls(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _stem(stem: str, cin: int, norm: str) -> tuple[nn.Conv2d, nn.Module]:
    """A ResNet's stem conv to 64 channels (no bias) and the pooling after it: ``"imagenet"``, a
    7x7 stride-2 conv and a 3x3 stride-2 max-pool (He et al. 2016, Table 1; torchvision's);
    ``"cifar"``, a 3x3 stride-1 conv and no pooling (the common CIFAR variant)."""
    conv = conv_class(norm)
    if stem == "imagenet":
        return conv(cin, 64, 7, stride=2, padding=3, bias=False), nn.MaxPool2d(3, 2, 1)
    if stem == "cifar":
        return conv(cin, 64, 3, stride=1, padding=1, bias=False), nn.Identity()
    raise ValueError(f"stem must be 'imagenet' (7x7 conv + max-pool) or 'cifar' (3x3 conv), got {stem!r}")


class _ShortcutA(nn.Module):
    """Option-A shortcut: subsample by ``stride`` and zero-pad the new channels (no parameters)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad = cout - cin

    def forward(self, x: Tensor) -> Tensor:
        x = x[:, :, :: self.stride, :: self.stride]  # (N, Cin, H, W) -> (N, Cin, H/s, W/s)
        lo = self.pad // 2
        return F.pad(x, (0, 0, 0, 0, lo, self.pad - lo))  # -> (N, Cout, H/s, W/s)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, *, norm: str, kw: dict, shortcut: str) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, cout, stride, norm)
        self.norm1 = make_norm(norm, cout, dim=2, **kw)
        self.conv2 = _conv3x3(cout, cout, 1, norm)
        self.norm2 = make_norm(norm, cout, dim=2, **kw)
        if stride == 1 and cin == cout:
            self.shortcut: nn.Module = nn.Identity()
        elif shortcut == "A":
            self.shortcut = _ShortcutA(cin, cout, stride)
        else:  # "B": 1x1 projection + norm
            conv = conv_class(norm)(cin, cout, 1, stride=stride, bias=False)
            self.shortcut = nn.Sequential(conv, make_norm(norm, cout, dim=2, **kw))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """CIFAR ResNet with 3 stages and option-A shortcuts (He et al. 2016, Sec. 4.2).

    ``blocks_per_stage=3, widths=(16, 32, 64)`` is ResNet-20 (6n+2 with n=3): 19 conv layers each
    followed by a normalisation layer, then global average pooling and one linear layer; with BN
    it has 269,722 trainable parameters and 1,376 running statistics (FedTAN Sec. 6.1).

    Parameters
    ----------
    blocks_per_stage : int
    widths : sequence of 3 ints
        Channels of the stem / stage 1, stage 2, stage 3.
    in_channels : int, default 3
    num_classes : int, default 10
    norm : str, default "bn"
        Kind for :func:`bnfl.nn.make_norm`; ``"gn_ws"`` also standardises the conv weights.
    norm_kw : dict, optional
    """

    def __init__(
        self,
        blocks_per_stage: int = 3,
        widths: Sequence[int] = (16, 32, 64),
        *,
        in_channels: int = 3,
        num_classes: int = 10,
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if len(widths) != 3 or blocks_per_stage <= 0:
            raise ValueError(f"need 3 stage widths and >= 1 block per stage, got {widths}, {blocks_per_stage}")
        kw = dict(norm_kw or {})
        self.conv1 = _conv3x3(in_channels, widths[0], 1, norm)
        self.norm1 = make_norm(norm, widths[0], dim=2, **kw)
        stages = []
        cin = widths[0]
        for i, w in enumerate(widths):
            blocks = []
            for b in range(blocks_per_stage):
                stride = 2 if (i > 0 and b == 0) else 1
                blocks.append(_BasicBlock(cin, w, stride, norm=norm, kw=kw, shortcut="A"))
                cin = w
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():  # He et al. / the common CIFAR reference init
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.stages(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)  # (N, C, H, W) -> (N, C)
        return self.fc(out)


class ResNet18(nn.Module):
    """The standard CIFAR ResNet-18: 3x3 stem (no max-pool), stages 64/128/256/512 with 2 basic
    blocks each, 1x1-projection shortcuts (option B), global average pooling, linear head.
    Any input size (global pooling), e.g. 32x32 CIFAR or 64x64 Tiny-ImageNet.

    ``stem="imagenet"`` gives torchvision's ``resnet18`` layout instead (7x7 stride-2 stem conv
    and a 3x3 stride-2 max-pool; 11,689,512 parameters for 1000 classes), which HBN's reference
    code uses for Tiny-ImageNet.
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        num_classes: int = 10,
        stem: str = "cifar",
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        kw = dict(norm_kw or {})
        self.conv1, self.pool = _stem(stem, in_channels, norm)
        self.norm1 = make_norm(norm, 64, dim=2, **kw)
        stages = []
        cin = 64
        for i, w in enumerate((64, 128, 256, 512)):
            blocks = []
            for b in range(2):
                stride = 2 if (i > 0 and b == 0) else 1
                blocks.append(_BasicBlock(cin, w, stride, norm=norm, kw=kw, shortcut="B"))
                cin = w
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.pool(F.relu(self.norm1(self.conv1(x))))
        out = self.stages(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)  # (N, 512, H, W) -> (N, 512)
        return self.fc(out)


class _Bottleneck(nn.Module):
    """torchvision's ``Bottleneck``: 1x1 reduce -> 3x3 (carries the stride, "ResNet v1.5") ->
    1x1 expand x4, a norm after each conv, projection shortcut ``downsample`` (1x1 conv + norm)
    where the shape changes. Attribute names are torchvision's (``conv1``, ``bn1``, ...,
    ``downsample.0/1``) so its state_dict files load; ``bn*`` hold any norm kind."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, *, norm: str, kw: dict) -> None:
        super().__init__()
        conv = conv_class(norm)
        cout = width * self.expansion
        self.conv1 = conv(cin, width, 1, bias=False)
        self.bn1 = make_norm(norm, width, dim=2, **kw)
        self.conv2 = conv(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = make_norm(norm, width, dim=2, **kw)
        self.conv3 = conv(width, cout, 1, bias=False)
        self.bn3 = make_norm(norm, cout, dim=2, **kw)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(conv(cin, cout, 1, stride=stride, bias=False),
                                            make_norm(norm, cout, dim=2, **kw))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 in torchvision's layout (He et al. 2016, Table 1; bottleneck blocks 3/4/6/3 at
    widths 64/128/256/512, expansion 4, stride on the 3x3 conv as torchvision's "v1.5"): 7x7
    stride-2 stem conv, norm, ReLU, 3x3 stride-2 max-pool, four stages ``layer1..layer4``,
    global average pooling, linear head ``fc``. 25,557,032 parameters with BN and 1000 classes
    (torchvision's ``resnet50``); GN has the same affine count, ``norm="none"`` drops the
    53 norm layers' 53,120 affine parameters. Any input size (global pooling); HBN Table 5 feeds
    it 32x32 CIFAR-100 images as its reference code does (torchvision's network unchanged).

    ``stem="cifar"`` replaces the stem by a 3x3 stride-1 conv without max-pool (the common
    CIFAR variant; not HBN's). Initialisation is torchvision's: Kaiming-normal (fan-out) convs,
    norm weight 1 and bias 0, PyTorch's default for ``fc``. Module names match torchvision's
    state_dict keys (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``, ``fc``),
    so :func:`bnfl.models.load_pretrained` loads its ImageNet weights from a local file.

    Parameters
    ----------
    in_channels : int, default 3
    num_classes : int, default 1000
    stem : {"imagenet", "cifar"}, default "imagenet"
    norm : str, default "bn"
        Kind for :func:`bnfl.nn.make_norm`; ``"gn_ws"`` also standardises the conv weights.
    norm_kw : dict, optional
    """

    #: Name of the classification head (skipped when a file's class count differs).
    head = "fc"

    def __init__(
        self,
        *,
        in_channels: int = 3,
        num_classes: int = 1000,
        stem: str = "imagenet",
        norm: str = "bn",
        norm_kw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        kw = dict(norm_kw or {})
        self.conv1, self.maxpool = _stem(stem, in_channels, norm)
        self.bn1 = make_norm(norm, 64, dim=2, **kw)
        cin = 64
        for i, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True)):
            layer = []
            for b in range(blocks):
                layer.append(_Bottleneck(cin, width, 2 if (i > 0 and b == 0) else 1, norm=norm, kw=kw))
                cin = width * _Bottleneck.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(cin, num_classes)
        torchvision_init_(self, linear=False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            out = getattr(self, f"layer{i}")(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)  # (N, 2048, H, W) -> (N, 2048)
        return self.fc(out)
