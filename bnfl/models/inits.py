"""Weight initialisation schemes of :func:`bnfl.models.build` (its ``init`` option).

* ``"pytorch"`` (the default): the model exactly as its class builds it, nothing redrawn. For most
  models that is PyTorch's module default (weights and biases uniform in
  :math:`\\pm 1/\\sqrt{\\text{fan\\_in}}`); a few classes state their own in the constructor
  (:class:`~bnfl.models.resnet.CifarResNet`: He-normal, fan-in, on every conv and linear weight, as
  the CIFAR reference code; the torchvision layouts: torchvision's; FixUp: its own scheme).
* ``"he_normal"``: He et al. (2015, "Delving deep into rectifiers", eqs. 10 and 14) normal weights,
  :math:`\\mathcal N(0, 2/\\text{fan})`: every convolution's weight by
  ``kaiming_normal_(mode="fan_out", nonlinearity="relu")`` (fan = out channels x kernel size, the
  torchvision convention) and every linear layer's weight by ``kaiming_normal_(mode="fan_in",
  nonlinearity="relu")`` (fan = in features, as the FedTAN authors' ``nets/ResNet20.py``). Biases
  and normalisation layers keep the class's initialisation. Layers are selected by type.
* ``"authors"``: the scheme the paper's own code states for this model (:data:`AUTHORS_INIT`); a
  model without one is an error that names the choices.

The draw uses the global torch RNG after the model is built, so ``torch.manual_seed(s)`` before
:func:`bnfl.models.build` still gives the same weights every time.
"""

from __future__ import annotations

from torch import nn

from bnfl.models.fixup import FixupResNet

__all__ = ["AUTHORS_INIT", "INITS", "apply_init", "he_normal_"]

#: The accepted values of ``init``.
INITS: tuple[str, ...] = ("pytorch", "he_normal", "authors")

#: Models whose paper's code states an initialisation: model name -> (the code, what it does, the
#: scheme of :data:`INITS` that equals it on this model).
AUTHORS_INIT: dict[str, tuple[str, str, str]] = {
    # github.com/wangyanmeng/FedTAN nets/ResNet20.py `_weights_init`: kaiming_normal_(m.weight) with
    # PyTorch's defaults (fan_in, gain sqrt(2)) on every Conv2d and Linear, which is what
    # CifarResNet's constructor already does: the class's own init is the authors'.
    "resnet20": ("FedTAN's nets/ResNet20.py", "kaiming_normal_ (fan_in, gain sqrt(2)) on every conv and "
                 "linear weight; biases and BN as PyTorch's default", "pytorch"),
}


def he_normal_(net: nn.Module) -> nn.Module:
    """Redraw ``net``'s conv and linear weights He-normal in place (the ``"he_normal"`` scheme above).

    Convolutions: :math:`\\mathcal N(0, 2/(C_\\text{out} k_h k_w))` (``mode="fan_out"``); linear
    layers: :math:`\\mathcal N(0, 2/\\text{in\\_features})` (``mode="fan_in"``). He et al. (2015) eq. 14
    (fan-out, the backward pass) and eq. 10 (fan-in, the forward pass).
    """
    for m in net.modules():
        if isinstance(m, nn.modules.conv._ConvNd):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
    return net


def apply_init(net: nn.Module, init: str, *, model: str) -> nn.Module:
    """Apply scheme ``init`` (:data:`INITS`) to ``net``, built by model ``model``; returns ``net``.

    Raises
    ------
    ValueError
        ``init`` not one of :data:`INITS`; ``"authors"`` for a model without an entry in
        :data:`AUTHORS_INIT`; ``"he_normal"`` for a FixUp model (its initialisation is the method).
    """
    if not isinstance(init, str) or init not in INITS:
        raise ValueError(f"unknown init {init!r}; choices: {', '.join(INITS)}")
    if init == "authors":
        if model not in AUTHORS_INIT:
            raise ValueError(f"init='authors': no paper's code states an initialisation for model {model!r} "
                             f"(known: {', '.join(sorted(AUTHORS_INIT))}); choose 'pytorch' or 'he_normal'")
        init = AUTHORS_INIT[model][2]
    if init == "pytorch":
        return net

    if isinstance(net, FixupResNet):
        raise ValueError(f"init={init!r} would overwrite FixUp's initialisation, which is the method of "
                         f"model {model!r}; use init='pytorch' (the FixUp scheme)")
    return he_normal_(net)
