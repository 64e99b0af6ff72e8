r"""FedTAN's convergence bound, Theorem 1 (FedTAN, eq. 12; proof in App. A, eqs. 42-51).

With :math:`T = RE` local steps per client in total, :math:`\gamma = N^{1/2}/(4LT^{1/2})`,
:math:`E \le T^{1/4}/N^{3/4}` and :math:`T \ge N^3`,

.. math::
    \frac1R\sum_{r=1}^R \|\nabla F(\bar w_{r-1})\|^2 \le
    \frac{24L}{\sqrt{TN}}\big(F(\bar w_0) - \underline F\big)
    + \underbrace{\frac{2}{\sqrt{TN}}\sum_i p_i V_i^2}_{(a)}
    + \underbrace{\frac{2}{\sqrt{TN}}\sum_i p_i B_i^2 + 6\sum_i p_i B_i^2}_{(b)} .

**Misprint handled openly.** The printed eq. (12) reads :math:`F(\bar w_0) - E`; the proof (text
after eq. 51: "substituting ... :math:`F(\bar w_R) \ge \underline F`") shows the constant is the
lower bound :math:`\underline F` of Assumption 2 (CATALOG §1.1 notes the conversion error). Here the
argument is named ``F0_minus_Flow`` :math:`= F(\bar w_0) - \underline F`.

:math:`V_i` bounds the client-vs-global gradient gap at the correct statistics (Assumption 4,
non-i.i.d.-ness); :math:`B_i` bounds the gradient deviation caused by local statistics and
stat-gradients (Assumption 1). The last term :math:`6\sum p_i B_i^2` does not shrink with
:math:`T`: BN with local statistics leaves a floor that more training cannot remove.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor, nn
from tqdm.auto import tqdm

from bnfl import fedtan, models
from bnfl._checks import check_weights
from bnfl.data.digits import digits
from bnfl.data.partition import classes_per_client
from bnfl.plots import color_for, new_figure

__all__ = [
    "Theorem1Bound",
    "check_conditions",
    "step_size",
    "theorem1_rhs",
    "proof_constants",
    "estimate_B",
    "estimate_V",
    "digits_deviation",
    "terms_vs_T",
    "plot_term_b",
]


@dataclass(frozen=True)
class Theorem1Bound:
    """The right-hand side of FedTAN eq. (12), term by term (floats)."""

    gamma: float  #: the step size N^{1/2} / (4 L T^{1/2})
    optimisation: float  #: 24 L / sqrt(TN) * (F(w_0) - F_low)
    term_a: float  #: 2 / sqrt(TN) * sum p_i V_i^2 (non-i.i.d. data)
    term_b_vanishing: float  #: 2 / sqrt(TN) * sum p_i B_i^2
    term_b_floor: float  #: 6 * sum p_i B_i^2 (does not decay with T)
    conditions_hold: bool  #: E <= T^{1/4}/N^{3/4} and T >= N^3

    @property
    def term_b(self) -> float:
        """Term (b): statistics / stat-gradient mismatch."""
        return self.term_b_vanishing + self.term_b_floor

    @property
    def total(self) -> float:
        return self.optimisation + self.term_a + self.term_b

    def as_dict(self) -> dict[str, float | bool]:
        return {**asdict(self), "term_b": self.term_b, "total": self.total}


def check_conditions(N: int, T: int, E: int) -> list[str]:
    """The violated conditions of Theorem 1 (empty when ``E <= T^{1/4}/N^{3/4}`` and ``T >= N^3``)."""
    problems = []
    if T < N**3:
        problems.append(f"T={T} < N^3={N**3} (Theorem 1 needs T >= N^3 so that E >= 1 is allowed)")
    e_max = T**0.25 / N**0.75
    if E > e_max * (1 + 1e-12):
        problems.append(f"E={E} > T^(1/4)/N^(3/4)={e_max:.4g} (Theorem 1's bound on local steps)")
    return problems


def _check_ints(N: int, T: int, E: int, L: float) -> None:
    for name, val in (("N", N), ("T", T), ("E", E)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name}={val!r} must be an integer >= 1")
    if not (math.isfinite(L) and L > 0):
        raise ValueError(f"L={L!r} (smoothness constant) must be finite and > 0")
    if T % E:
        raise ValueError(f"T={T} must be a multiple of E={E} (T = R*E local steps)")


def step_size(N: int, T: int, L: float) -> float:
    """Theorem 1's step size :math:`\\gamma = N^{1/2}/(4 L T^{1/2})`."""
    return math.sqrt(N) / (4 * L * math.sqrt(T))


def _vec(name: str, x: Sequence[float] | np.ndarray | Tensor, n: int | None = None) -> np.ndarray:
    a = np.asarray(x.detach().cpu() if isinstance(x, Tensor) else x, dtype=float).reshape(-1)
    if a.size == 0:
        raise ValueError(f"{name} is empty; give one value per client")
    if n is not None and a.size != n:
        raise ValueError(f"{name} has {a.size} entries but p has {n}; give one per client")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or Inf")
    if (a < 0).any():
        raise ValueError(f"{name} must be >= 0 (they are norms), got {a.tolist()}")
    return a


def theorem1_rhs(
    N: int, T: int, E: int, L: float,
    p: Sequence[float] | np.ndarray, V: Sequence[float] | np.ndarray, B: Sequence[float] | np.ndarray,
    F0_minus_Flow: float, *, strict: bool = True,
) -> Theorem1Bound:
    r"""Right-hand side of FedTAN Theorem 1, eq. (12), with terms (a) and (b) separated.

    Parameters
    ----------
    N, T, E : int
        Clients, total local steps per client (:math:`T = RE`), local steps per round.
    L : float
        Smoothness constant (Assumption 3).
    p : array of shape (N,)
        Client weights :math:`p_i = |D_i|/|D|`, non-negative, summing to 1.
    V, B : arrays of shape (N,)
        The bounds :math:`V_i` (Assumption 4) and :math:`B_i` (Assumption 1), **not squared**
        (:func:`estimate_V`, :func:`estimate_B` return these).
    F0_minus_Flow : float
        :math:`F(\bar w_0) - \underline F \ge 0` (the printed "-E" is a misprint for
        :math:`-\underline F`; see the module docstring).
    strict : bool, default True
        Raise ``ValueError`` when the theorem's conditions fail; with ``False`` warn and still
        return the expression (then it is no longer a proven bound: ``conditions_hold=False``).
    """
    _check_ints(N, T, E, L)
    p = _vec("p", p)
    if p.size != N:
        raise ValueError(f"p has {p.size} weights but N={N}")
    if abs(p.sum() - 1) > 1e-6:
        raise ValueError(f"weights p must sum to 1, got {p.sum():.6g}; normalise them (p_i = |D_i|/|D|)")
    V, B = _vec("V", V, N), _vec("B", B, N)
    if not (math.isfinite(F0_minus_Flow) and F0_minus_Flow >= 0):
        raise ValueError(f"F0_minus_Flow={F0_minus_Flow} must be finite and >= 0 (F_low is a lower bound)")
    problems = check_conditions(N, T, E)
    if problems:
        msg = "Theorem 1's conditions fail: " + "; ".join(problems)
        if strict:
            raise ValueError(msg + ". Pass strict=False to evaluate the expression anyway.")
        warnings.warn(msg + "; the value is not a proven bound.", stacklevel=2)
    root = math.sqrt(T * N)
    sV, sB = float(p @ V**2), float(p @ B**2)
    return Theorem1Bound(
        gamma=step_size(N, T, L),
        optimisation=24 * L / root * F0_minus_Flow,
        term_a=2 / root * sV,
        term_b_vanishing=2 / root * sB,
        term_b_floor=6 * sB,
        conditions_hold=not problems,
    )


def proof_constants(N: int, T: int, E: int, L: float) -> dict[str, float]:
    r"""The constants of the proof, FedTAN eqs. (49)-(51), at Theorem 1's step size.

    .. math:: H_3 = \frac{4\gamma^2E^2L^2}{1-4\gamma^2E^2L^2},\quad H_1 = \tfrac12 - H_3,
              \quad H_2 = \frac{1}{\gamma T}.

    The proof claims :math:`H_2 = 4L/\sqrt{TN}` and, under the conditions,
    :math:`H_3 \le 1/(3\sqrt{TN})`, :math:`H_1 \ge 1/6`, and :math:`\gamma \le 1/(EL)` (eq. 47).
    Returned: ``gamma, H1, H2, H3`` and the claimed values ``H2_claim, H3_bound, H1_bound``.
    """
    _check_ints(N, T, E, L)
    gamma = step_size(N, T, L)
    q = 4 * gamma**2 * E**2 * L**2
    if q >= 1:
        raise ValueError(f"4 gamma^2 E^2 L^2 = {q:.4g} >= 1: the drift bound (46) does not apply")
    H3 = q / (1 - q)
    return {
        "gamma": gamma,
        "H1": 0.5 - H3,
        "H2": 1 / (gamma * T),
        "H3": H3,
        "H2_claim": 4 * L / math.sqrt(T * N),
        "H3_bound": 1 / (3 * math.sqrt(T * N)),
        "H1_bound": 1 / 6,
        "gamma_max": 1 / (E * L),
    }


def _flat(grads: dict[str, Tensor]) -> Tensor:
    return torch.cat([g.detach().reshape(-1) for _, g in sorted(grads.items())])


def estimate_B(
    model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]], loss_fn: Callable[[Tensor, Tensor], Tensor],
    *, aggregate: str = "none",
) -> Tensor:
    r"""Empirical :math:`\hat B_i = \|g_i^{\text{local BN}} - g_i^{\text{FedTAN}}\|` (Assumption 1).

    The square root of :func:`bnfl.fedtan.gradient_deviation` (which returns :math:`\hat B_i^2`);
    ``aggregate="none"`` is FedAvg+BN, ``"stats"`` FedAvg+Algorithm 2. Shape (N,). The model is
    left unchanged.
    """
    b2 = torch.as_tensor(fedtan.gradient_deviation(model, batches, loss_fn, aggregate=aggregate))
    return b2.clamp_min(0).sqrt()


def estimate_V(
    model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]], loss_fn: Callable[[Tensor, Tensor], Tensor],
    *, weights: Sequence[float] | None = None,
) -> Tensor:
    r"""Empirical :math:`\hat V_i = \|g_i^{\text{FedTAN}} - \sum_j p_j g_j^{\text{FedTAN}}\|` (Assumption 4).

    Uses :func:`bnfl.fedtan.client_gradients` with ``aggregate="fedtan"`` (the gradients at the
    correct, global statistics). ``weights`` default to the batch-size shares. Shape (N,).
    """
    if len(batches) == 0:
        raise ValueError("no client batches given")
    grads = fedtan.client_gradients(model, batches, loss_fn, weights=weights, aggregate="fedtan")
    g = torch.stack([_flat(gi) for gi in grads])  # (N, n_params)
    if weights is None:
        sizes = torch.tensor([float(len(y)) for _, y in batches], dtype=g.dtype)
        p = sizes / sizes.sum()
    else:
        p = check_weights(weights, len(batches)).to(g.dtype)
    g_bar = p @ g  # (n_params,)
    return (g - g_bar).norm(dim=1)


def digits_deviation(
    ks: Sequence[int] = (2, 4, 6, 8, 10), *, model: str = "q_mlp1", batch_size: int = 32,
    n_batches: int = 4, num_clients: int = 5, seed: int = 0, progress: bool = False,
) -> dict[str, np.ndarray]:
    r"""Empirical :math:`\hat B_i`, :math:`\hat V_i` on Q-DIG with ``k`` classes per client.

    For each ``k`` the digits training set is split by :func:`bnfl.data.partition.classes_per_client`
    (FedTAN Supp. D tables); a freshly initialised ``model`` (float64, seed ``seed``) is evaluated
    at ``n_batches`` random draws of one batch of ``batch_size`` per client; the squared estimates
    are averaged over the draws. Weights :math:`p_i = 1/N` (equal batches).

    Returns
    -------
    dict
        ``k`` (K,), ``B`` and ``V`` (K, N): the per-client :math:`\hat B_i`, :math:`\hat V_i`;
        ``sum_pB2`` and ``sum_pV2`` (K,): :math:`\sum_i p_i \hat B_i^2`, :math:`\sum_i p_i \hat V_i^2`.
    """
    if batch_size < 2 or n_batches < 1:
        raise ValueError("batch_size must be >= 2 (BN needs a batch) and n_batches >= 1")
    data = digits("flat", seed=0)
    loss_fn = nn.functional.cross_entropy
    torch.manual_seed(seed)
    net = models.build(model, num_classes=10).to(torch.float64)
    rng = np.random.default_rng(seed)
    B_all, V_all = [], []
    for k in tqdm(list(ks), disable=not progress, desc="classes per client"):
        parts = classes_per_client(data.y_train.numpy(), k, num_clients=num_clients, seed=seed)
        b2 = np.zeros(num_clients)
        v2 = np.zeros(num_clients)
        for _ in range(n_batches):
            batches = []
            for idx in parts:
                if len(idx) < batch_size:
                    raise ValueError(f"a client has {len(idx)} samples < batch_size={batch_size}")
                pick = torch.from_numpy(rng.choice(idx, size=batch_size, replace=False))
                batches.append((data.x_train[pick].to(torch.float64), data.y_train[pick]))
            b2 += estimate_B(net, batches, loss_fn).numpy() ** 2 / n_batches
            v2 += estimate_V(net, batches, loss_fn).numpy() ** 2 / n_batches
        B_all.append(np.sqrt(b2))
        V_all.append(np.sqrt(v2))
    B, V = np.stack(B_all), np.stack(V_all)
    return {"k": np.asarray(list(ks)), "B": B, "V": V,
            "sum_pB2": (B**2).mean(axis=1), "sum_pV2": (V**2).mean(axis=1)}


def terms_vs_T(
    Ts: Sequence[int], *, N: int, p: Sequence[float], V: Sequence[float], B: Sequence[float],
    E: int = 1, L: float = 1.0, F0_minus_Flow: float = 1.0,
) -> dict[str, np.ndarray]:
    """Theorem 1's terms for each ``T`` in ``Ts`` (conditions enforced): ``optimisation``,
    ``term_a``, ``term_b``, ``term_b_floor``, ``total`` as arrays; term (b) tends to its floor."""
    rows = [theorem1_rhs(N, int(T), E, L, p, V, B, F0_minus_Flow).as_dict() for T in Ts]
    keys = ("optimisation", "term_a", "term_b", "term_b_floor", "total")
    return {"T": np.asarray(list(Ts)), **{k: np.array([r[k] for r in rows]) for k in keys}}


def plot_term_b(
    x: Sequence[float], series: dict[str, Sequence[float]], *, xlabel: str, log_x: bool = False,
    ylabel: str = "term (b) of eq. (12)",
) -> Figure:
    """Lines of Theorem-1 terms against ``x`` (classes per client, or T), one per series."""
    fig, ax = new_figure(1, 1, width=4.6, height=3.2)
    for i, (name, ys) in enumerate(series.items()):
        ax.plot(list(x), list(ys), marker="o", color=color_for(name, i), label=name)
    if log_x:
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    return fig
