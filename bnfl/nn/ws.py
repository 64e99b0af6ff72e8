r"""Convolutions with weight standardisation, for the norm kinds that standardise the weights
instead of (or beside) the activations: :class:`WSConv2d` (``"gn_ws"``, GN + WS) and
:class:`ScaledWSConv2d` (``"ws"``, FedWon); :func:`conv_class` picks a model's convolution by kind."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["RELU_GAIN", "ScaledWSConv2d", "WSConv2d", "conv_class"]


class WSConv2d(nn.Conv2d):
    r"""``nn.Conv2d`` with weight standardisation (Qiao et al. 2019), used with GN (``"gn_ws"``):

    .. math:: \hat W_o = \frac{W_o - \operatorname{mean}(W_o)}{\sqrt{\operatorname{var}(W_o) + \epsilon}}

    per output channel ``o`` over (in_channels, kh, kw), biased variance. Same parameters and
    state_dict as ``nn.Conv2d``, so a conv can be retyped in place.
    """

    ws_eps: float = 1e-5

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        flat = w.flatten(1)  # (O, I*kh*kw)
        mean = flat.mean(dim=1).view(-1, 1, 1, 1)
        var = flat.var(dim=1, unbiased=False).view(-1, 1, 1, 1)
        return self._conv_forward(x, (w - mean) / torch.sqrt(var + self.ws_eps), self.bias)



#: ReLU's gain for scaled weight standardisation: 1 / sqrt(var(relu(z))) for z ~ N(0, 1) with
#: the second moment kept, sqrt(2 / (1 - 1/pi)) (Brock et al. 2021, NF-Nets, App. D).
RELU_GAIN = math.sqrt(2.0 / (1.0 - 1.0 / math.pi))


class ScaledWSConv2d(nn.Conv2d):
    r"""``nn.Conv2d`` with *scaled* weight standardisation (Brock et al. 2021, "Characterizing
    signal propagation to close the performance gap in unnormalized ResNets", eq. 3), the
    convolution of FedWon (Zhuang & Lyu, ICLR 2024), used with norm kind ``"ws"``:

    .. math:: \hat W_o = g_o\,\gamma\,\frac{W_o - \operatorname{mean}(W_o)}{\sqrt{N\,(\operatorname{var}(W_o) + \epsilon)}}

    per output channel ``o`` over its fan-in :math:`N` = in_channels/groups * kh * kw (biased
    variance), with a learnable gain :math:`g_o` (initialised to 1) and the fixed activation gain
    :math:`\gamma` (``gain``, ReLU's by default). Adds one parameter ``gain`` of shape (O,).
    """

    ws_eps: float = 1e-4

    def __init__(self, *args: object, gain: float = RELU_GAIN, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if not (math.isfinite(gain) and gain > 0):
            raise ValueError(f"gain must be a finite number > 0, got {gain!r}")
        self.gamma = float(gain)
        self.gain = nn.Parameter(torch.ones(self.out_channels, device=self.weight.device, dtype=self.weight.dtype))

    def standardized_weight(self) -> Tensor:
        r""":math:`\hat W` of the docstring, shape of ``weight``."""
        w = self.weight
        flat = w.flatten(1)  # (O, I/groups*kh*kw)
        fan_in = flat.shape[1]
        mean = flat.mean(dim=1).view(-1, 1, 1, 1)
        var = flat.var(dim=1, unbiased=False).view(-1, 1, 1, 1)
        scale = self.gain.view(-1, 1, 1, 1) * self.gamma / torch.sqrt(fan_in * (var + self.ws_eps))
        return (w - mean) * scale

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, self.standardized_weight(), self.bias)


def conv_class(norm: str) -> type[nn.Conv2d]:
    """The convolution a model builds for norm kind ``norm``: :class:`WSConv2d` for ``"gn_ws"``,
    :class:`ScaledWSConv2d` for ``"ws"`` (FedWon), else ``nn.Conv2d``."""
    return {"gn_ws": WSConv2d, "ws": ScaledWSConv2d}.get(norm, nn.Conv2d)
