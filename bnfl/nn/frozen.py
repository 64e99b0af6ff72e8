r"""Frozen-statistics BatchNorm (FixBN, Zhong et al., Sec. 4.2 Stage II).

After the switch round :math:`T^*`, FixBN normalises with the frozen global running statistics
:math:`\bar S^{(T^*)}` both in local training and at test, and stops updating them, while
:math:`\gamma, \beta` keep training and being averaged:

.. math:: \hat h = \gamma\,\frac{h-\bar\mu}{\sqrt{\bar\sigma^2+\epsilon}} + \beta
    \quad\text{in train and eval mode;}\quad \bar\mu, \bar\sigma^2 \text{ fixed.}

:func:`freeze_bn_stats` retypes every standard BatchNorm layer in place to the matching
``FrozenStatsBatchNorm{1,2,3}d`` (a subclass with the same parameters, buffers and state_dict
keys: the object, its parameters and any optimizer holding them are unchanged), so the frozen
behaviour survives ``model.train()``, ``copy.deepcopy`` and ``load_state_dict``.
:func:`unfreeze_bn_stats` undoes it. FedTAN-II (normalise with frozen :math:`\bar S_M`) uses the
same layers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = [
    "FrozenStatsBatchNorm1d",
    "FrozenStatsBatchNorm2d",
    "FrozenStatsBatchNorm3d",
    "freeze_bn_stats",
    "unfreeze_bn_stats",
    "frozen_bn_stats",
    "is_frozen",
]


class _FrozenStats:
    """Mixin: normalise with the running statistics in every mode, never update them."""

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)  # type: ignore[attr-defined]
        if self.running_mean is None or self.running_var is None:  # type: ignore[attr-defined]
            raise ValueError("a frozen BatchNorm needs running statistics (track_running_stats=True)")
        return F.batch_norm(
            x, self.running_mean, self.running_var,  # type: ignore[attr-defined]
            self.weight, self.bias, training=False, momentum=0.0, eps=self.eps,  # type: ignore[attr-defined]
        )


class FrozenStatsBatchNorm1d(_FrozenStats, nn.BatchNorm1d):
    """``nn.BatchNorm1d`` that always normalises with its frozen running statistics (FixBN)."""


class FrozenStatsBatchNorm2d(_FrozenStats, nn.BatchNorm2d):
    """``nn.BatchNorm2d`` that always normalises with its frozen running statistics (FixBN)."""


class FrozenStatsBatchNorm3d(_FrozenStats, nn.BatchNorm3d):
    """``nn.BatchNorm3d`` that always normalises with its frozen running statistics (FixBN)."""


_FREEZE = {
    nn.BatchNorm1d: FrozenStatsBatchNorm1d,
    nn.BatchNorm2d: FrozenStatsBatchNorm2d,
    nn.BatchNorm3d: FrozenStatsBatchNorm3d,
}
_THAW = {v: k for k, v in _FREEZE.items()}


def is_frozen(module: nn.Module) -> bool:
    """Whether ``module`` is a frozen-statistics BatchNorm layer."""
    return isinstance(module, _FrozenStats)


def freeze_bn_stats(model: nn.Module) -> nn.Module:
    """Freeze the statistics of every standard BatchNorm layer of ``model`` (FixBN Stage II).

    Afterwards a training-mode forward equals the eval-mode forward: it normalises with the
    running statistics and leaves them unchanged; :math:`\\gamma, \\beta` still get gradients.
    Layers are selected by type (``nn.BatchNorm1d/2d/3d`` exactly); already frozen layers are
    left as they are.

    Parameters
    ----------
    model : nn.Module
        Changed in place.

    Returns
    -------
    nn.Module
        ``model`` itself.

    Raises
    ------
    ValueError
        If a BatchNorm layer has no running statistics, or if the model holds BN variants whose
        statistics cannot be frozen this way (e.g. :class:`~bnfl.nn.HybridBatchNorm2d`, which
        normalises with server statistics by design).
    """
    todo = []
    for name, m in model.named_modules():
        if is_frozen(m) or not isinstance(m, _BatchNorm):
            continue
        cls = _FREEZE.get(type(m))
        if cls is None:
            raise ValueError(
                f"layer {name!r} ({type(m).__name__}) is not a standard BatchNorm1d/2d/3d; "
                "FixBN freezing applies to standard BN only. Replace it first "
                "(bnfl.nn.replace_norm(model, 'bn'))."
            )
        if m.running_mean is None or m.running_var is None:
            raise ValueError(
                f"layer {name!r} has no running statistics (track_running_stats=False); "
                "there is nothing to freeze"
            )
        todo.append((m, cls))
    for m, cls in todo:  # validate everything first, then mutate: all or nothing
        m.__class__ = cls
    return model


def unfreeze_bn_stats(model: nn.Module) -> nn.Module:
    """Undo :func:`freeze_bn_stats`: frozen layers become standard BatchNorm again (in place)."""
    for m in model.modules():
        cls = _THAW.get(type(m))
        if cls is not None:
            m.__class__ = cls
    return model


@contextlib.contextmanager
def frozen_bn_stats(model: nn.Module) -> Iterator[nn.Module]:
    """Context manager: freeze BN statistics inside the block and restore on exit.

    Only the layers this call froze are thawed again.
    """
    before = {id(m) for m in model.modules() if is_frozen(m)}
    freeze_bn_stats(model)
    try:
        yield model
    finally:
        for m in model.modules():
            if is_frozen(m) and id(m) not in before:
                m.__class__ = _THAW[type(m)]
