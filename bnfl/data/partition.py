"""Client partitions: pure functions of ``(labels, seed, ...)``.

Every function returns a ``list`` of 1-D ``np.int64`` arrays, one per client, each sorted
ascending. Together they are a true partition: disjoint, and covering every index
``0..len(labels)-1`` (the one documented exception is :func:`classes_per_client` with
``balance=True``, which first truncates every class to the smallest class size so that the
FedTAN table fractions hold exactly; it then covers exactly that balanced subset).
The input is never modified, and the same arguments give the same result on every call.

Index arrays convert to tensors with ``torch.as_tensor(part)``; index a
:class:`~bnfl.data.Split` with them directly (``split.train_subset(part)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from torch import Tensor

__all__ = [
    "by_domain",
    "classes_per_client",
    "class_table",
    "dirichlet",
    "fedtan_class_table",
    "iid",
    "participation",
    "shards",
    "unequal",
]

Labels = Sequence[int] | np.ndarray | Tensor


def _labels(labels: Labels) -> np.ndarray:
    """A 1-D int64 copy of ``labels`` (the caller's array is never touched)."""
    if isinstance(labels, Tensor):
        arr = labels.detach().cpu().numpy()
    else:
        arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be 1-D (one label per sample), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("labels is empty; a partition needs at least one sample")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"labels must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=True)


def _check_clients(num_clients: int, n: int) -> None:
    if int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
    if num_clients > n:
        raise ValueError(
            f"num_clients={num_clients} exceeds the number of samples ({n}); "
            "every client needs at least one sample"
        )


def _number(value: object) -> float:
    """``float(value)`` for Python/NumPy/0-d torch numbers; NaN for anything else."""
    if isinstance(value, bool | str | bytes):
        return float("nan")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def _finish(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def iid(labels: Labels, num_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Shuffle all samples and split them into ``num_clients`` near-equal parts.

    Client sizes differ by at most 1 (``np.array_split`` of a seeded permutation).

    Parameters
    ----------
    labels : 1-D integer array of shape (N,)
        Only its length is used.
    num_clients : int
        1 <= num_clients <= N.
    seed : int, default 0
    """
    y = _labels(labels)
    _check_clients(num_clients, y.size)
    perm = np.random.default_rng(seed).permutation(y.size)
    return _finish(np.array_split(perm, num_clients))


def class_table(k: int, num_classes: int = 10, num_clients: int = 5) -> np.ndarray:
    """Fraction of each client's data per class for the cyclic k-classes-per-client design.

    Client ``i`` (0-based) owns the ``k`` classes starting at ``i * s`` (cyclic), with
    ``s = num_classes / num_clients``, each at fraction ``1/k``. Each class is then shared by
    ``k / s`` clients, so client sizes are equal on balanced data. With 10 classes and 5 clients
    this is exactly FedTAN Supplement D (see :func:`fedtan_class_table`); with 100 classes,
    5 clients and k=20 it is FedTAN's disjoint CIFAR-100 split.

    Returns
    -------
    ndarray of shape (num_clients, num_classes), float64; rows sum to 1.
    """
    if int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
    if int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes}")
    if int(k) != k or k < 1:
        raise ValueError(f"k (classes per client) must be a positive integer, got {k}")
    if k > num_classes:
        raise ValueError(f"k={k} classes per client is impossible with only {num_classes} classes")
    if num_classes % num_clients:
        raise ValueError(
            f"the cyclic class table needs num_classes ({num_classes}) divisible by "
            f"num_clients ({num_clients}); use shards() or dirichlet() otherwise"
        )
    s = num_classes // num_clients
    if k % s:
        raise ValueError(
            f"k={k} must be a multiple of num_classes/num_clients = {s} so that every class is "
            f"shared by the same number of clients (e.g. k even for 10 classes and 5 clients)"
        )
    table = np.zeros((num_clients, num_classes))
    for i in range(num_clients):
        for j in range(k):
            table[i, (i * s + j) % num_classes] = 1.0 / k
    return table


def fedtan_class_table(k: int) -> np.ndarray:
    """FedTAN Supplement D class table for ``k`` in {2, 4, 6, 8, 10} classes per client, N=5.

    Row ``i`` is client ``i+1``, column ``c`` is the paper's label ``c+1`` (= digit / CIFAR class
    ``c``). Verbatim rule: client ``i`` holds labels ``2i-1 .. 2i+k-2`` (cyclic), each at ``1/k``;
    e.g. k=4: client 5 holds {9, 10, 1, 2}.

    Returns
    -------
    ndarray of shape (5, 10), float64
    """
    if k not in (2, 4, 6, 8, 10):
        raise ValueError(f"FedTAN Supplement D defines k in {{2, 4, 6, 8, 10}}, got k={k}")
    return class_table(k, num_classes=10, num_clients=5)


def classes_per_client(
    labels: Labels,
    k: int,
    num_clients: int = 5,
    seed: int = 0,
    *,
    balance: bool = True,
) -> list[np.ndarray]:
    """k classes per client following :func:`class_table` (FedTAN Supplement D for 10 classes, N=5).

    Each class is shuffled with ``seed`` and split among the ``r = k / s`` clients that own it.
    Rounding, when a class's count ``m`` is not divisible by ``r``: every owner gets ``m // r``
    and ``e = m % r`` owners get one more, namely the owners ``j`` (0..r-1, the j-th owner holds
    the class's block as its j-th block) with ``(j - c mod s) mod r < e``. Every client then
    receives exactly ``s * e`` extra samples, so on balanced data all clients have exactly
    ``s * m`` samples and every (client, class) cell is ``m // r`` or ``m // r + 1``: e.g.
    CIFAR-10, k=6: cells of 1666/1667, clients of 10,000 each.

    Parameters
    ----------
    labels : 1-D integer array of shape (N,)
        The sorted distinct label values are the classes, in order (label value c <-> FedTAN
        label c+1 for 0-based digits).
    k : int
        Classes per client; a multiple of ``num_classes / num_clients``, at most ``num_classes``.
    num_clients : int, default 5
    seed : int, default 0
    balance : bool, default True
        Truncate every class (a seeded random subset) to the smallest class's size first, so the
        table fractions hold up to the rounding above even on unbalanced data (Q-DIG: 1437 train
        -> 10 x 139 = 1390 used). The dropped indices belong to no client. With False every index
        is assigned; cells within a class still differ by at most 1.
    """
    y = _labels(labels)
    _check_clients(num_clients, y.size)
    classes = np.unique(y)
    class_table(k, num_classes=classes.size, num_clients=num_clients)  # validates k and N
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    if balance:
        m = min(p.size for p in per_class)
        per_class = [p[:m] for p in per_class]
    s = classes.size // num_clients  # classes per block; client i owns blocks i .. i+r-1
    r = k // s  # owners per class
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, idx in enumerate(per_class):
        base, extra = divmod(idx.size, r)
        for j in range(r):  # j-th owner of class c holds c's block as its j-th block
            owner = (c // s - j) % num_clients
            n_c = base + int((j - c % s) % r < extra)
            parts[owner].append(idx[:n_c])
            idx = idx[n_c:]
    out = _finish([np.concatenate(p) for p in parts])
    empty = [i for i, p in enumerate(out) if p.size == 0]
    if empty:
        raise ValueError(
            f"clients {empty} received no samples (too few samples per class for k={k}); "
            "use more data or fewer clients"
        )
    return out


def shards(
    labels: Labels, num_clients: int, shards_per_client: int, seed: int = 0
) -> list[np.ndarray]:
    """McMahan et al. (2017) shards: sort by label, cut into equal shards, deal them at random.

    The samples are sorted by label (ties in a seeded random order), cut into
    ``num_clients * shards_per_client`` contiguous shards of near-equal size, and each client
    receives ``shards_per_client`` shards chosen at random.

    Parameters
    ----------
    labels : 1-D integer array of shape (N,)
    num_clients : int
    shards_per_client : int
        At least 1; ``num_clients * shards_per_client`` must not exceed N.
    seed : int, default 0
    """
    y = _labels(labels)
    _check_clients(num_clients, y.size)
    if int(shards_per_client) != shards_per_client or shards_per_client < 1:
        raise ValueError(f"shards_per_client must be a positive integer, got {shards_per_client}")
    total = num_clients * shards_per_client
    if total > y.size:
        raise ValueError(
            f"{num_clients} clients x {shards_per_client} shards = {total} shards exceed the "
            f"{y.size} samples; use fewer shards"
        )
    rng = np.random.default_rng(seed)
    tie = rng.permutation(y.size)
    order = tie[np.argsort(y[tie], kind="stable")]
    pieces = np.array_split(order, total)
    deal = rng.permutation(total).reshape(num_clients, shards_per_client)
    return _finish([np.concatenate([pieces[j] for j in row]) for row in deal])


def dirichlet(
    labels: Labels,
    num_clients: int,
    phi: float,
    seed: int = 0,
    *,
    min_size: int = 1,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    r"""Per-class Dirichlet label split (Hsu, Qi, Brown 2019; HBN Sec. 4.1, "Dir(phi)").

    For every class c, proportions :math:`q_c \sim \mathrm{Dir}(\phi \mathbf{1}_K)` are drawn and
    the shuffled samples of class c are cut at ``round(cumsum(q_c) * n_c)``. Small ``phi`` gives
    clients dominated by few classes; ``phi -> inf`` approaches iid. The whole draw is repeated
    (same generator, so still deterministic) until every client holds at least ``min_size``
    samples, as in the common reference implementations.

    Parameters
    ----------
    labels : 1-D integer array of shape (N,)
    num_clients : int
        K, 1 <= K <= N.
    phi : float
        Concentration, > 0.
    seed : int, default 0
    min_size : int, default 1
        Minimum samples per client; 0 allows empty clients.
    max_tries : int, default 1000
        Draws before giving up with a ValueError.
    """
    y = _labels(labels)
    _check_clients(num_clients, y.size)
    phi = _number(phi)
    if not (math.isfinite(phi) and phi > 0):
        raise ValueError(f"phi (Dirichlet concentration) must be a finite number > 0, got {phi}")
    if min_size < 0 or min_size * num_clients > y.size:
        raise ValueError(
            f"min_size={min_size} is impossible for {num_clients} clients and {y.size} samples"
        )
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            q = rng.dirichlet(np.full(num_clients, float(phi)))
            cuts = np.round(np.cumsum(q)[:-1] * idx.size).astype(np.int64)
            for i, chunk in enumerate(np.split(idx, cuts)):
                parts[i].append(chunk)
        out = [np.concatenate(p) for p in parts]
        if min(p.size for p in out) >= min_size:
            return _finish(out)
    raise ValueError(
        f"no Dirichlet(phi={phi}) draw gave every one of {num_clients} clients >= {min_size} "
        f"samples in {max_tries} tries; lower min_size, raise phi or use fewer clients"
    )


def by_domain(domain_labels: Labels, *, shards: int = 1, clients_per_domain: int | None = None,
              seed: int = 0) -> list[np.ndarray]:
    """Clients by domain (FedBN): by default one client per domain, client j holding the samples of
    the j-th smallest domain value.

    ``shards > 1`` splits every domain into that many near-equal random shards (seeded) and keeps
    the first ``clients_per_domain`` of them (default: all) as clients, domain by domain (FedBN
    Fig. 4(c) / Table 7: 1 to 10 clients per data set). Client ``c`` then belongs to domain
    ``c // clients_per_domain``.
    """
    d = _labels(domain_labels)
    domains = [np.flatnonzero(d == v) for v in np.unique(d)]
    if shards == 1 and clients_per_domain in (None, 1):
        return _finish(domains)
    use = shards if clients_per_domain is None else clients_per_domain
    if not (isinstance(shards, int) and shards >= 1) or not 1 <= use <= shards:
        raise ValueError(f"by_domain: need shards >= 1 and 1 <= clients_per_domain <= shards, got shards={shards}, "
                         f"clients_per_domain={clients_per_domain}")
    rng = np.random.default_rng(seed)
    parts = []
    for idx in domains:
        if idx.size < shards:
            raise ValueError(f"by_domain: a domain of {idx.size} samples cannot be split into {shards} shards")
        parts += np.array_split(rng.permutation(idx), shards)[:use]
    return _finish(parts)


def unequal(
    labels: Labels,
    num_clients: int,
    seed: int = 0,
    *,
    sizes: Sequence[int] | None = None,
    ratio: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """Random (label-iid) split into clients of prescribed unequal sizes.

    Give exactly one of ``sizes`` (integers summing to N) or ``ratio`` (positive weights, e.g.
    FedBN Table 15's 7943/743/39116/5600/5600); ratios are turned into sizes summing to N by
    largest remainders (ties to the lower client index), each at least 1.

    Parameters
    ----------
    labels : 1-D integer array of shape (N,)
    num_clients : int
    seed : int, default 0
    sizes : sequence of int, optional
    ratio : sequence of float, optional
    """
    y = _labels(labels)
    _check_clients(num_clients, y.size)
    if (sizes is None) == (ratio is None):
        raise ValueError("give exactly one of sizes= or ratio=")
    if sizes is not None:
        s = np.asarray(sizes)
        if s.shape != (num_clients,) or not np.issubdtype(s.dtype, np.integer):
            raise ValueError(f"sizes must be {num_clients} integers, got {list(sizes)}")
        if np.any(s < 1) or s.sum() != y.size:
            raise ValueError(
                f"sizes must be >= 1 and sum to the {y.size} samples, got {list(sizes)} "
                f"(sum {int(s.sum())})"
            )
        s = s.astype(np.int64)
    else:
        r = np.asarray(ratio, dtype=np.float64)
        if r.shape != (num_clients,) or not np.all(np.isfinite(r)) or np.any(r <= 0):
            raise ValueError(f"ratio must be {num_clients} finite positive numbers, got {list(ratio)}")
        spare = y.size - num_clients  # every client gets 1, the rest by ratio
        raw = r / r.sum() * spare
        s = np.floor(raw).astype(np.int64)
        rest = spare - int(s.sum())
        s[np.lexsort((np.arange(num_clients), -(raw - s)))[:rest]] += 1
        s += 1
    perm = np.random.default_rng(seed).permutation(y.size)
    return _finish(np.split(perm, np.cumsum(s)[:-1]))


def participation(num_clients: int, rate: float, rounds: int, seed: int = 0) -> list[np.ndarray]:
    """Clients taking part in each round: ``max(1, floor(rate * K))`` drawn without replacement.

    HBN's C (0.1 of 100 clients = 10 per round; 0.1 of 20 = 2). Round ``t`` depends only on
    ``(seed, t)``, so a run resumed at round t sees the same clients.

    Returns
    -------
    list of length ``rounds`` of sorted int64 arrays of client ids.
    """
    return list(Participation(num_clients, rate, rounds, seed))


class Participation(Sequence):
    """:func:`participation` drawn on demand: ``p[t]`` is round ``t + 1``'s sorted client ids, the
    same array :func:`participation` lists, and nothing is allocated for rounds never asked for
    (a run of 10**9 rounds costs no memory up front)."""

    def __init__(self, num_clients: int, rate: float, rounds: int, seed: int = 0) -> None:
        if int(num_clients) != num_clients or num_clients < 1:
            raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
        rate = _number(rate)
        if not (math.isfinite(rate) and 0 < rate <= 1):
            raise ValueError(f"participation rate must be in (0, 1], got {rate}")
        if int(rounds) != rounds or rounds < 0:
            raise ValueError(f"rounds must be a non-negative integer, got {rounds}")
        self.num_clients, self.rounds, self.seed = int(num_clients), int(rounds), int(seed)
        self.per_round = max(1, math.floor(rate * num_clients + 1e-9))

    def __len__(self) -> int:
        return self.rounds

    def __getitem__(self, t):  # noqa: ANN001, ANN204 - an int or a slice, as a list takes
        if isinstance(t, slice):
            return [self[i] for i in range(*t.indices(self.rounds))]
        t = int(t) + (self.rounds if t < 0 else 0)
        if not 0 <= t < self.rounds:
            raise IndexError(f"round index {t} out of range (0..{self.rounds - 1})")
        return np.sort(np.random.default_rng([self.seed, t]).choice(self.num_clients, size=self.per_round,
                                                                    replace=False))
