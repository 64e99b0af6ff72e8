"""Small input-validation helpers shared by :mod:`bnfl.stats`, :mod:`bnfl.grads` and
:mod:`bnfl.fedtan` (and free for any other bnfl module to import).

Every helper raises :class:`ValueError` or :class:`TypeError` with a message that names the
offending client (by index) and says what to do, and returns nothing unless documented.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: Absolute tolerance for "weights sum to 1".
WEIGHT_SUM_TOL = 1e-6


def check_tensor(x: object, name: str) -> Tensor:
    """Return ``x`` if it is a floating-point tensor, else raise ``TypeError``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor (float32/float64), got {x.dtype}")
    return x


class NonFiniteError(ValueError):
    """A tensor that must be finite holds a NaN or an infinity (a ``ValueError``: bad input to a
    statistics function; raised mid-training it means the run diverged)."""


def check_finite(x: Tensor, name: str) -> None:
    """Raise :class:`NonFiniteError` if ``x`` holds a NaN or an infinity."""
    if not bool(torch.isfinite(x).all()):
        bad = "NaN" if bool(torch.isnan(x).any()) else "Inf"
        raise NonFiniteError(f"{name} contains {bad} values; remove or impute them before computing statistics")


def check_nonempty(parts: Sequence[object], what: str = "parts") -> None:
    """Raise ``ValueError`` if there are no clients at all."""
    if len(parts) == 0:
        raise ValueError(f"{what} is empty; pass at least one client")


def check_count(count: int, index: int | None = None) -> None:
    """Raise if a client's element count is not a positive integer."""
    who = "a Moments" if index is None else f"client {index}"
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"{who} has count of type {type(count).__name__}; count must be a Python int")
    if count <= 0:
        raise ValueError(f"{who} has count {count}; counts must be positive (drop empty clients or give them data)")


def check_same_channels(channels: Sequence[int], what: str = "client") -> None:
    """Raise ``ValueError`` if clients disagree on the number of channels."""
    if not channels:
        return
    ref = channels[0]
    for i, c in enumerate(channels):
        if c != ref:
            raise ValueError(
                f"{what} {i} has {c} channels but {what} 0 has {ref}; every client must come from the same layer"
            )


def check_weights(weights: Sequence[float] | Tensor, k: int, *, tol: float = WEIGHT_SUM_TOL) -> Tensor:
    """Validate client weights and return them as a float64 tensor of shape (K,).

    Weights must be one per client, finite, strictly positive and sum to 1 within ``tol``.
    """
    w = torch.as_tensor(weights, dtype=torch.float64).detach().cpu().reshape(-1)
    if w.numel() != k:
        raise ValueError(f"got {w.numel()} weights for {k} clients; pass one weight per client")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("weights contain NaN or Inf; pass finite positive weights summing to 1")
    for i, wi in enumerate(w.tolist()):
        if wi <= 0:
            raise ValueError(f"client {i} has weight {wi}; weights must be positive (drop the client instead)")
    total = float(w.sum())
    if abs(total - 1.0) > tol:
        raise ValueError(f"weights sum to {total!r}, not 1; normalise them (w / w.sum())")
    return w
