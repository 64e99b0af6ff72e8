r"""FedBN's neural-tangent-kernel analysis (FedBN, Sec. 4 and App. B; synthetic data of App. F).

Most formulas of this part were stripped from the text; they follow the reconstruction in
``papers/CATALOG.md`` §4.1 (every formula there is **[reconstructed]**).

Model, eq. (1): for an input :math:`x` of client :math:`i`

.. math:: f(x; V, \gamma, c) = \frac{1}{\sqrt m}\sum_{k=1}^m c_k\,
          \sigma\!\Big(\gamma_{k,i}\,\frac{v_k^\top x}{\|v_k\|_{S_i}}\Big),
          \qquad \|v\|_S = \sqrt{v^\top S v},\ \sigma = \mathrm{ReLU},

with client-specific BN scales :math:`\gamma_{k,i}` (FedBN) or shared ones :math:`\gamma_k` (FedAvg).
BN statistics (:math:`S_i`) are client-specific in both. Init, eq. (2): :math:`v_k(0) \sim
N(0, \alpha^2 I)`, :math:`c_k \sim \mathrm{Unif}\{\pm 1\}`, :math:`\gamma_k(0) = \|v_k(0)\|_2/\alpha`.

Gram matrices (App. B.1, eqs. 6-9): with :math:`u_{pk} = v_k^\top x_p/\|v_k\|_{S_{i_p}}`,

.. math:: G_{pq} = \frac1m\sum_k c_k^2\,\sigma(u_{pk})\sigma(u_{qk})\;[\,1\{i_p = i_q\}\text{ for FedBN}],

.. math:: V_{pq} = \frac1m\sum_k \frac{\alpha^2 c_k^2 \gamma_{k,i_p}\gamma_{k,i_q}}
          {\|v_k\|_{S_{i_p}}\|v_k\|_{S_{i_q}}}\langle x_p^{v_k\perp S_{i_p}},
          x_q^{v_k\perp S_{i_q}}\rangle 1\{u_{pk}\ge0\}1\{u_{qk}\ge0\},

:math:`x^{v\perp S} = x - (v^\top x/\|v\|_S^2)\,S v`. They are the two parts of the tangent kernel:
:math:`J_\gamma J_\gamma^\top = G`, :math:`J_v J_v^\top = V/\alpha^2`, so
:math:`\Lambda = V/\alpha^2 + G` (tested against ``torch.autograd`` Jacobians).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor
from tqdm.auto import tqdm

from bnfl.data.synthetic import fedbn_synthetic
from bnfl.plots import color_for, new_figure

__all__ = [
    "NTKParams",
    "init_params",
    "forward",
    "gram_G",
    "gram_V",
    "jacobians",
    "gram_G_inf_mc",
    "gram_G_inf_isotropic",
    "block_diagonal",
    "lambda_min",
    "SyntheticClients",
    "make_synthetic_clients",
    "bayes_accuracy",
    "fit_target",
    "random_covariance",
    "train_gd",
    "plot_training_loss",
    "plot_spectra",
]


@dataclass(frozen=True)
class NTKParams:
    """Parameters of model (1): ``v`` (m, d), ``gamma`` (m, n_gamma), ``c`` (m,), ``alpha``.

    ``n_gamma`` is the number of clients for FedBN and 1 for FedAvg (shared scale).
    """

    v: Tensor
    gamma: Tensor
    c: Tensor
    alpha: float

    @property
    def fedbn(self) -> bool:
        return self.gamma.shape[1] > 1


def init_params(
    d: int, m: int, n_clients: int, *, fedbn: bool, alpha: float = 1.0, seed: int = 0,
    dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu",
) -> NTKParams:
    r"""Initialise model (1) by eq. (2) (FedBN Sec. 4, [reconstructed]).

    FedBN and FedAvg models built with the same ``seed`` share ``v(0)`` and ``c``; FedBN starts every
    client's :math:`\gamma_{k,i}(0)` at the shared value :math:`\|v_k(0)\|/\alpha`.
    """
    if d < 1 or m < 1 or n_clients < 1:
        raise ValueError(f"d, m, n_clients must be >= 1, got {d}, {m}, {n_clients}")
    if alpha <= 0:
        raise ValueError(f"alpha={alpha} must be > 0")
    gen = torch.Generator().manual_seed(seed)
    v = alpha * torch.randn(m, d, generator=gen, dtype=dtype)  # (m, d)
    c = torch.randint(0, 2, (m,), generator=gen).to(dtype) * 2 - 1  # (m,) in {-1, +1}
    g0 = v.norm(dim=1) / alpha  # (m,)
    gamma = g0[:, None].repeat(1, n_clients if fedbn else 1)  # (m, n_gamma)
    return NTKParams(v=v.to(device), gamma=gamma.to(device), c=c.to(device), alpha=float(alpha))


def _check_inputs(x: Tensor, client: Tensor, covs: Tensor) -> None:
    if x.ndim != 2:
        raise ValueError(f"x must have shape (P, d), got {tuple(x.shape)}")
    if client.shape != (x.shape[0],):
        raise ValueError(f"client must have shape ({x.shape[0]},), got {tuple(client.shape)}")
    if covs.ndim != 3 or covs.shape[1:] != (x.shape[1], x.shape[1]):
        raise ValueError(f"covs must have shape (N, {x.shape[1]}, {x.shape[1]}), got {tuple(covs.shape)}")
    if client.numel() and (int(client.min()) < 0 or int(client.max()) >= covs.shape[0]):
        raise ValueError(f"client indices must lie in [0, {covs.shape[0]}); got {client.unique().tolist()}")
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or Inf")


def _s_norms(v: Tensor, covs: Tensor) -> Tensor:
    """:math:`\\|v_k\\|_{S_i}` for every neuron and client: shape (N, m)."""
    return torch.einsum("kd,nde,ke->nk", v, covs, v).sqrt()  # (N, m)


def _gamma_per_sample(params: NTKParams, client: Tensor) -> Tensor:
    idx = client if params.fedbn else torch.zeros_like(client)
    return params.gamma[:, idx].T  # (m, P) -> (P, m)


def forward(params: NTKParams, x: Tensor, client: Tensor, covs: Tensor) -> Tensor:
    """Model (1): ``x`` (P, d), ``client`` (P,) integer ids, ``covs`` (N, d, d) -> ``f`` (P,)."""
    _check_inputs(x, client, covs)
    norms = _s_norms(params.v, covs)[client]  # (P, m)
    u = x @ params.v.T / norms  # (P, m)
    pre = _gamma_per_sample(params, client) * u  # (P, m)
    return torch.relu(pre) @ params.c / math.sqrt(params.v.shape[0])  # (P,)


def gram_G(params: NTKParams, x: Tensor, client: Tensor, covs: Tensor) -> Tensor:
    r"""Finite-width :math:`G` (FedBN App. B.1, eq. 8 [reconstructed]); FedBN masks it by
    :math:`1\{i_p=i_q\}` (:math:`G^*`). Equals :math:`J_\gamma J_\gamma^\top` for :math:`\gamma>0`."""
    _check_inputs(x, client, covs)
    m = params.v.shape[0]
    u = x @ params.v.T / _s_norms(params.v, covs)[client]  # (P, m)
    a = torch.relu(u) * params.c.abs()  # (P, m)
    G = a @ a.T / m  # (P, P)
    if params.fedbn:
        G = G * (client[:, None] == client[None, :])
    return G


def gram_V(params: NTKParams, x: Tensor, client: Tensor, covs: Tensor) -> Tensor:
    r"""Finite-width :math:`V` (FedBN App. B.1, eqs. 6-7 [reconstructed]); :math:`V = \alpha^2 J_v J_v^\top`."""
    _check_inputs(x, client, covs)
    v, m = params.v, params.v.shape[0]
    norms = _s_norms(v, covs)[client]  # (P, m)
    proj = x @ v.T  # (P, m): v_k^T x_p
    Sv = torch.einsum("nde,ke->nkd", covs, v)[client]  # (P, m, d): S_{i_p} v_k
    x_perp = x[:, None, :] - (proj / norms**2)[..., None] * Sv  # (P, m, d)
    gam = _gamma_per_sample(params, client)  # (P, m)
    ind = (proj >= 0).to(x.dtype)  # (P, m)
    coef = params.c * gam * ind / norms  # (P, m)
    b = coef[..., None] * x_perp  # (P, m, d)
    return params.alpha**2 * torch.einsum("pkd,qkd->pq", b, b) / m  # (P, P)


def jacobians(params: NTKParams, x: Tensor, client: Tensor, covs: Tensor) -> tuple[Tensor, Tensor]:
    """Autograd Jacobians of ``forward`` w.r.t. ``v`` and ``gamma``: shapes (P, m*d), (P, m*n_gamma).

    The reference answer for :func:`gram_G` and :func:`gram_V`.
    """
    def f(v: Tensor, gamma: Tensor) -> Tensor:
        return forward(NTKParams(v=v, gamma=gamma, c=params.c, alpha=params.alpha), x, client, covs)

    jv, jg = torch.autograd.functional.jacobian(f, (params.v, params.gamma))
    P = x.shape[0]
    return jv.reshape(P, -1), jg.reshape(P, -1)  # (P, m, d) -> (P, m*d); (P, m, n) -> (P, m*n)


def block_diagonal(G: Tensor, client: Tensor) -> Tensor:
    r""":math:`G^* = G \odot 1\{i_p = i_q\}` (FedBN Def. 4.2, eq. 5 [reconstructed])."""
    return G * (client[:, None] == client[None, :])


def gram_G_inf_mc(
    x: Tensor, client: Tensor, covs: Tensor, *, fedbn: bool = False, n_samples: int = 200_000,
    alpha: float = 1.0, seed: int = 0, chunk: int = 50_000, progress: bool = False,
) -> Tensor:
    r"""Infinite-width :math:`G^\infty` by Monte Carlo (FedBN Def. 4.2, eq. 4 [reconstructed]).

    .. math:: G^\infty_{pq} = E_{v\sim N(0,\alpha^2 I)}\big[\sigma(v^\top x_p/\|v\|_{S_{i_p}})
              \sigma(v^\top x_q/\|v\|_{S_{i_q}})\big],

    and :math:`G^{*\infty} = G^\infty \odot 1\{i_p=i_q\}` with ``fedbn=True``. The integrand is
    invariant to the scale of :math:`v`, so :math:`\alpha` does not change the value.
    """
    _check_inputs(x, client, covs)
    if n_samples < 1:
        raise ValueError(f"n_samples={n_samples} must be >= 1")
    gen = torch.Generator().manual_seed(seed)
    P, d = x.shape
    acc = torch.zeros(P, P, dtype=x.dtype)
    done = 0
    with tqdm(total=n_samples, disable=not progress, desc="G_inf MC") as bar:
        while done < n_samples:
            k = min(chunk, n_samples - done)
            v = alpha * torch.randn(k, d, generator=gen, dtype=x.dtype).to(x.device)  # (k, d)
            a = torch.relu(x @ v.T / _s_norms(v, covs)[client])  # (P, k)
            acc += (a @ a.T).cpu()
            done += k
            bar.update(k)
    G = (acc / n_samples).to(x.device)
    return block_diagonal(G, client) if fedbn else G


def gram_G_inf_isotropic(x: Tensor, client: Tensor, scales: Tensor, *, fedbn: bool = False) -> Tensor:
    r"""Closed form of :math:`G^\infty` when every :math:`S_i = s_i I` (isotropic covariances).

    With :math:`v = r\theta` (:math:`r=\|v\|` independent of the direction :math:`\theta`) the
    integrand is :math:`\sigma(\theta^\top x_p)\sigma(\theta^\top x_q)/\sqrt{s_{i_p}s_{i_q}}`, and
    :math:`E_g[\sigma(g^\top x)\sigma(g^\top y)] = d\,E_\theta[\cdot]` for :math:`g\sim N(0,I_d)`; the
    first-order arc-cosine kernel (Cho & Saul, 2009) then gives

    .. math:: G^\infty_{pq} = \frac{\|x_p\|\|x_q\|}{2\pi d\sqrt{s_{i_p}s_{i_q}}}
              \big(\sin\theta_{pq} + (\pi-\theta_{pq})\cos\theta_{pq}\big).

    This is derived here (not in the paper) to check :func:`gram_G_inf_mc`.
    """
    if x.ndim != 2:
        raise ValueError(f"x must have shape (P, d), got {tuple(x.shape)}")
    if (scales <= 0).any():
        raise ValueError("isotropic scales s_i must be > 0")
    d = x.shape[1]
    nrm = x.norm(dim=1)  # (P,)
    cos = (x @ x.T / (nrm[:, None] * nrm[None, :])).clamp(-1.0, 1.0)  # (P, P)
    theta = torch.arccos(cos)
    k1 = (torch.sin(theta) + (math.pi - theta) * cos) / (2 * math.pi)
    s = scales[client]  # (P,)
    G = nrm[:, None] * nrm[None, :] * k1 / (d * torch.sqrt(s[:, None] * s[None, :]))
    return block_diagonal(G, client) if fedbn else G


def lambda_min(G: Tensor) -> float:
    """Smallest eigenvalue of a symmetric matrix (``torch.linalg.eigvalsh``)."""
    return float(torch.linalg.eigvalsh((G + G.T) / 2)[0])


def random_covariance(d: int, *, gen: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """A random SPD matrix ``A A^T / d + 0.1 I`` (d, d), distinct across draws."""
    a = torch.randn(d, d, generator=gen, dtype=dtype)
    return a @ a.T / d + 0.1 * torch.eye(d, dtype=dtype)


@dataclass(frozen=True)
class SyntheticClients:
    """All clients' data stacked: ``x`` (P, d), ``y`` (P,) in {0, 1}, ``client`` (P,), ``covs`` (N, d, d).

    ``covs`` holds each client's empirical second moment :math:`S_i = E[x x^\\top]` (Assumption 4.1),
    which the model's BN uses.
    """

    x: Tensor
    y: Tensor
    client: Tensor
    covs: Tensor


def make_synthetic_clients(
    *, d: int = 10, n_per_class: int = 100, mean: float = 1.0, rho: float = 0.8, seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> SyntheticClients:
    r"""FedBN App. F synthetic data (two clients, two Gaussian classes each) for model (1).

    The data come from :func:`bnfl.data.synthetic.fedbn_synthetic` (training split): client 1
    :math:`x \sim N(\pm\mu, I)`, client 2 :math:`x \sim N(\pm\mu, \Sigma_2)` with
    :math:`\mu = \text{mean}\cdot\mathbf 1` and the AR(1) covariance
    :math:`(\Sigma_2)_{jk} = \rho^{|j-k|}` (the catalog's tridiagonal 0.8 band is not positive
    definite; see that function). Defaults ``mean=1.0`` and 100 samples per class per client: the
    catalog's 0.5 and 500 leave the classes overlapping (about 80% Bayes accuracy on client 2).
    Each client's BN matrix :math:`S_i` is its empirical second moment :math:`E[x x^\top]`
    (Assumption 4.1: the inputs are centred, the two classes being symmetric around 0).
    """
    if n_per_class < 1 or d < 1:
        raise ValueError("n_per_class and d must be >= 1")
    split = fedbn_synthetic(seed, dim=d, n_per_class=n_per_class, n_test_per_class=1,
                            shift=mean, correlation=rho)
    x = split.x_train.to(dtype)  # (2 clients * 2 classes * n, d)
    client = split.domain_train.long()
    covs = torch.stack([x[client == i].T @ x[client == i] / int((client == i).sum())
                        for i in range(2)])  # (2, d, d)
    return SyntheticClients(x=x, y=split.y_train.to(dtype), client=client, covs=covs)


def bayes_accuracy(d: int, mean: float, rho: float) -> list[float]:
    r"""Each client's Bayes accuracy on FedBN Fig. 9's data: two equally likely classes
    :math:`N(\pm\mu, \Sigma)` with :math:`\mu = \text{mean}\cdot\mathbf 1_d` are best told apart by
    the sign of :math:`\mu^\top\Sigma^{-1}x`, right with probability
    :math:`\Phi(\sqrt{\mu^\top\Sigma^{-1}\mu})` (half the Mahalanobis distance between the class
    means). Client 1: :math:`\Sigma = I`; client 2: :math:`\Sigma_{jk} = \rho^{|j-k|}` (FedBN App. F,
    as :func:`bnfl.data.synthetic.fedbn_synthetic` and :func:`make_synthetic_clients` draw it)."""
    # function-level: scipy.stats takes seconds to import, and only this function needs it
    from scipy.stats import norm

    mu = np.full(int(d), float(mean))
    lag = np.abs(np.subtract.outer(np.arange(int(d)), np.arange(int(d))))
    out = []
    for cov in (np.eye(int(d)), float(rho) ** lag):
        out.append(float(norm.cdf(np.sqrt(mu @ np.linalg.solve(cov, mu)))))
    return out


def fit_target(d: int, mean: float, rho: float, n_per_class: int) -> tuple[float, float]:
    """The training accuracy (%) a model that fits the data should reach on FedBN Fig. 9's two clients:
    the mean of the clients' Bayes accuracies (:func:`bayes_accuracy`) less two binomial standard
    errors of a training set of that size (a finite sample can fall short of the Bayes rate by
    chance); and that Bayes accuracy (%)."""
    bayes = float(np.mean(bayes_accuracy(d, mean, rho)))
    n = 2 * 2 * int(n_per_class)  # 2 clients x 2 classes
    return 100.0 * (bayes - 2.0 * np.sqrt(bayes * (1.0 - bayes) / n)), 100.0 * bayes


def train_gd(
    data: SyntheticClients, *, fedbn: bool, m: int = 100, alpha: float = 1.0, lr: float = 2.0,
    steps: int = 600, loss: str = "logistic", seed: int = 0, progress: bool = False,
) -> dict[str, np.ndarray]:
    r"""Full-batch gradient descent on model (1) (FedBN Sec. 4 / App. F).

    Minimises the mean loss over all clients' samples w.r.t. :math:`v` and :math:`\gamma`
    (:math:`c` stays fixed, as in the NTK analysis). With one local step per round (E=1) and full
    batches this is exactly FedAvg (shared :math:`\gamma`) or FedBN (client :math:`\gamma_{k,i}`).
    The mean rather than eq. (3)'s sum keeps ``lr`` independent of the sample count.

    Returns ``{"loss": (steps+1,), "accuracy": (steps+1,)}`` recorded before each step and at the end.
    """
    if loss not in ("logistic", "mse"):
        raise ValueError(f"loss must be 'logistic' or 'mse', got {loss!r}")
    n_clients = data.covs.shape[0]
    p = init_params(data.x.shape[1], m, n_clients, fedbn=fedbn, alpha=alpha, seed=seed,
                    dtype=data.x.dtype)
    v = p.v.clone().requires_grad_(True)
    gamma = p.gamma.clone().requires_grad_(True)
    target = data.y if loss == "logistic" else 2 * data.y - 1
    losses, accs = [], []
    for step in tqdm(range(steps + 1), disable=not progress, desc="fedbn" if fedbn else "fedavg"):
        f = forward(NTKParams(v=v, gamma=gamma, c=p.c, alpha=alpha), data.x, data.client, data.covs)
        if loss == "logistic":
            value = torch.nn.functional.binary_cross_entropy_with_logits(f, target)
        else:
            value = 0.5 * ((f - target) ** 2).mean()
        losses.append(float(value.detach()))
        accs.append(float(((f > 0).to(data.y.dtype) == data.y).to(torch.float64).mean()))
        if step == steps:
            break
        gv, gg = torch.autograd.grad(value, (v, gamma))
        with torch.no_grad():
            v -= lr * gv
            gamma -= lr * gg
    return {"loss": np.array(losses), "accuracy": np.array(accs)}


def plot_training_loss(curves: dict[str, np.ndarray], *, log: bool = True) -> Figure:
    """Training loss against steps, one line per method (FedBN Fig. 9 / App. F)."""
    fig, ax = new_figure(1, 1, width=4.6, height=3.2)
    for i, (name, loss) in enumerate(curves.items()):
        ax.plot(np.arange(len(loss)), loss, color=color_for(name, i), label=name)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("gradient-descent step")
    ax.set_ylabel("training loss")
    ax.legend()
    return fig


def plot_spectra(spectra: dict[str, Sequence[float]]) -> Figure:
    """Sorted eigenvalues of Gram matrices (e.g. ``{"fedavg": eig(G), "fedbn": eig(G*)}``), log scale."""
    fig, ax = new_figure(1, 1, width=4.6, height=3.2)
    for i, (name, eig) in enumerate(spectra.items()):
        e = np.sort(np.asarray(eig, dtype=float))
        ax.plot(np.arange(1, len(e) + 1), e, marker="o", ms=3, color=color_for(name, i), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("eigenvalue index (ascending)")
    ax.set_ylabel("eigenvalue")
    ax.legend()
    return fig
