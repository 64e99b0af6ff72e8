"""The clients' epoch-shuffled batch orders, drawn many at a time, bitwise the same streams.

Client ``c``'s order in epoch ``e`` is ``np.random.default_rng([s_c, e]).permutation(n_c)`` of its
sample ids (``s_c = seed * 1_000_003 + c``; :func:`bnfl.data.datasets.epoch_batches`). Creating
one generator per client per epoch costs most of it: NumPy hashes the two words into a
``SeedSequence`` pool, draws PCG64's 128-bit seed from it and builds the bit generator (about
40 us), while the permutation of a small client takes a few. With many small clients, each of
which starts an epoch at every local step, that was a third of a 100-client round.

:func:`permutations` computes the same streams for many ``(seed, epoch)`` pairs at once:
``SeedSequence``'s mixing (O'Neill's ``seed_seq_fe``: ``hashmix`` and ``mix`` over a pool of 4
32-bit words, then ``generate_state``) as uint32 array operations over all pairs, PCG64's
seeding (``srandom``: two steps of its 128-bit LCG) in Python integers, and one reused
``Generator`` (per thread) whose state is set to each pair's before its ``permutation``. Pairs whose words do
not fit one 32-bit word each go through ``default_rng`` itself. ``tests/test_fl_batch_orders.py``
compares every path with ``default_rng`` bitwise.

:class:`BatchOrders` is the engine's cache of them: when a client needs an epoch it does not
hold, the next epochs of every client that has drawn batches so far are computed together (a
window of about 2048 samples per client, at most 16 epochs), and epochs behind a client's cursor
are dropped. Orders depend only on ``(seed, client, epoch)``, so drawing them early changes
nothing but the time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from bnfl.fl import fast_path

__all__ = ["BatchOrders", "Batches", "permutations"]

# SeedSequence's constants (numpy/random/bit_generator.pyx) and PCG64's multiplier (pcg64.h)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R, _XSHIFT = 0xCA01F9DD, 0x4973F715, 16
_POOL = 4
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_MASK128 = (1 << 128) - 1
_U32 = 1 << 32


def _seed_words(seeds: np.ndarray, epochs: np.ndarray) -> list[np.ndarray]:
    """``SeedSequence([seed, epoch]).generate_state(8, np.uint32)`` for each pair, as 8 arrays."""
    with np.errstate(over="ignore"):
        hash_const = np.uint32(_INIT_A)
        sh = np.uint32(_XSHIFT)

        def hashmix(v: np.ndarray) -> np.ndarray:
            nonlocal hash_const
            v = v ^ hash_const
            hash_const = np.uint32(hash_const * np.uint32(_MULT_A))
            v = v * hash_const
            return v ^ (v >> sh)

        def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            r = np.uint32(_MIX_MULT_L) * x - np.uint32(_MIX_MULT_R) * y
            return r ^ (r >> sh)

        zero = np.zeros_like(seeds)
        pool = [hashmix(w) for w in (seeds, epochs, zero, zero)]  # the entropy, padded to the pool
        for src in range(_POOL):
            for dst in range(_POOL):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        out, h = [], np.uint32(_INIT_B)
        for i in range(8):
            v = pool[i % _POOL] ^ h
            h = np.uint32(h * np.uint32(_MULT_B))
            v = v * h
            out.append(v ^ (v >> sh))
    return out


def _pcg64_states(seeds: np.ndarray, epochs: np.ndarray) -> list[tuple[int, int]]:
    """PCG64's ``(state, inc)`` after seeding from ``SeedSequence([seed, epoch])``, per pair."""
    w = [x.astype(np.uint64) for x in _seed_words(seeds, epochs)]
    sh = np.uint64(32)
    u64 = [((w[2 * i + 1] << sh) | w[2 * i]).tolist() for i in range(4)]  # generate_state(4, uint64)
    out = []
    for s_hi, s_lo, q_hi, q_lo in zip(*u64, strict=True):
        init_state, init_seq = (s_hi << 64) | s_lo, (q_hi << 64) | q_lo
        inc = ((init_seq << 1) | 1) & _MASK128
        state = (((inc + init_state) & _MASK128) * _PCG_MULT + inc) & _MASK128  # srandom: step, add, step
        out.append((state, inc))
    return out


_LOCAL = threading.local()  # one reusable bit generator per thread (its state is set, then used)


def _generator() -> tuple[np.random.PCG64, np.random.Generator]:
    if not hasattr(_LOCAL, "gen"):
        _LOCAL.bitgen = np.random.PCG64(0)
        _LOCAL.gen = np.random.Generator(_LOCAL.bitgen)
    return _LOCAL.bitgen, _LOCAL.gen


def permutations(seeds: Sequence[int], epochs: Sequence[int], sizes: Sequence[int]) -> list[np.ndarray]:
    """``[np.random.default_rng([s, e]).permutation(n) for s, e, n in zip(seeds, epochs, sizes)]``,
    bitwise, with the generators' seeding computed for all pairs at once (module docstring)."""
    if not len(seeds) == len(epochs) == len(sizes):
        raise ValueError(f"seeds, epochs and sizes differ in length: {len(seeds)}, {len(epochs)}, {len(sizes)}")
    fast = [i for i, (s, e) in enumerate(zip(seeds, epochs, strict=True)) if 0 <= s < _U32 and 0 <= e < _U32]
    out: list[np.ndarray | None] = [None] * len(seeds)
    if fast:
        bitgen, gen = _generator()
        states = _pcg64_states(np.array([seeds[i] for i in fast], np.uint32), np.array([epochs[i] for i in fast], np.uint32))
        for i, (state, inc) in zip(fast, states, strict=True):
            bitgen.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc}, "has_uint32": 0,
                            "uinteger": 0}
            out[i] = gen.permutation(int(sizes[i]))
    for i, p in enumerate(out):
        if p is None:  # several 32-bit words of entropy: NumPy's own seeding
            out[i] = np.random.default_rng([int(seeds[i]), int(epochs[i])]).permutation(int(sizes[i]))
    return out  # type: ignore[return-value]


class Batches(Sequence):
    """One epoch's batches of ``b`` ids (the last partial one dropped) as views of the epoch's
    order cut on demand: ``Batches(order, b)[i]`` is ``order[i*b:(i+1)*b]``, what the list of
    all of them (the reference, :mod:`bnfl.fl.fast_path`) holds, without cutting the epochs drawn
    ahead that a run never reaches."""

    def __init__(self, order: Tensor, b: int) -> None:
        self.order, self.b, self.n = order, b, order.numel() // b

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - an int or a slice, as a list takes
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        j = i + self.n if i < 0 else i
        if not 0 <= j < self.n:
            raise IndexError(f"batch {i} out of range ({self.n} batches)")
        return self.order[j * self.b:(j + 1) * self.b]


class BatchOrders:
    """Every client's mini-batches (sample-id tensors) of each epoch, as
    :func:`bnfl.data.datasets.epoch_batches` with ``drop_last=True`` gives them, cached per
    client and drawn many at a time (module docstring).

    Parameters
    ----------
    clients : list of 1-D int64 arrays
        Each client's sample ids.
    batch_size : int
        Per-client batch size (a client smaller than it uses its size).
    seed : int
        The run's seed; client ``c``'s stream is seeded ``seed * 1_000_003 + c``.
    """

    #: samples of orders drawn ahead per client (small clients: several epochs), and at most epochs
    AHEAD_SAMPLES, AHEAD_EPOCHS = 2048, 16

    def __init__(self, clients: Sequence[np.ndarray], batch_size: int, seed: int) -> None:
        self.arrays = list(clients)
        self.seeds = [int(seed) * 1_000_003 + c for c in range(len(self.arrays))]
        self.batch = [min(batch_size, a.size) for a in self.arrays]
        self.ahead = [max(1, min(self.AHEAD_EPOCHS, -(-self.AHEAD_SAMPLES // max(a.size, 1)))) for a in self.arrays]
        self.cache: dict[int, dict[int, Sequence[Tensor]]] = {}

    def batches(self, c: int, epoch: int, cursors: dict[int, list[int]]) -> Sequence[Tensor]:
        """Client ``c``'s batches of ``epoch``; ``cursors[k][0]`` is client ``k``'s current epoch."""
        got = self.cache.get(c, {}).get(epoch)
        if got is None:
            self._draw(c, epoch, cursors)
            got = self.cache[c][epoch]
        return got

    def _draw(self, c: int, epoch: int, cursors: dict[int, list[int]]) -> None:
        want: list[tuple[int, int]] = []
        for k in sorted(set(self.cache) | {c}):
            start = epoch if k == c else cursors[k][0]
            held = self.cache.setdefault(k, {})
            for old in [e for e in held if e < start]:
                del held[old]
            want += [(k, e) for e in range(start, start + self.ahead[k]) if e not in held]
        perms = permutations([self.seeds[k] for k, _ in want], [e for _, e in want], [self.arrays[k].size for k, _ in want])
        for (k, e), p in zip(want, perms, strict=True):
            order = torch.from_numpy(self.arrays[k][p])
            b = self.batch[k]
            if fast_path.enabled():  # the same batches, each cut when it is asked for
                self.cache[k][e] = Batches(order, b)
            else:
                self.cache[k][e] = [order[i * b:(i + 1) * b] for i in range(order.numel() // b)]
