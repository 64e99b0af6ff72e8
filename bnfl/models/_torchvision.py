"""torchvision's weight initialisation, shared by the models built in its layouts.

MobileNet-v2, VGG and ResNet-50 (:mod:`bnfl.models.mobilenet`, :mod:`bnfl.models.vgg`,
:mod:`bnfl.models.resnet`) follow torchvision's module names so that its state_dict files load;
they also draw their initial weights as torchvision's constructors do, written once here.
"""

from __future__ import annotations

from torch import nn

__all__ = ["torchvision_init_"]


def torchvision_init_(net: nn.Module, *, linear: bool = True) -> nn.Module:
    r"""Initialise ``net`` in place as torchvision's MobileNet-v2, VGG and ResNet constructors do.

    In module order: every ``nn.Conv2d`` weight He-normal with fan-out,
    :math:`\mathcal N(0, 2/(C_\text{out} k_h k_w))` (He et al. 2015, eq. 14), and its bias, if any,
    zero; every BatchNorm and GroupNorm with an affine weight gets weight 1 and bias 0; with
    ``linear``, every ``nn.Linear`` weight :math:`\mathcal N(0, 0.01^2)` and bias 0. Layers are
    selected by type; anything else (HBN's ``alpha``) keeps the value it was built with.

    Parameters
    ----------
    net : nn.Module
    linear : bool, default True
        Redraw the linear layers too (torchvision's MobileNet-v2 and VGG); ``False`` keeps
        PyTorch's default for them (torchvision's ResNet).

    Returns
    -------
    nn.Module
        ``net`` itself.
    """
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm)) and m.weight is not None:
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif linear and isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return net
