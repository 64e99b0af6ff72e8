"""Batch orders drawn many at a time (bnfl.fl.batch_orders) are bitwise NumPy's
``default_rng([seed, epoch]).permutation(n)``: the committed numbers depend on these streams."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnfl import fl
from bnfl.data.datasets import as_index_array, epoch_batches
from bnfl.fl.batch_orders import BatchOrders, permutations


def _reference(seeds, epochs, sizes):
    return [np.random.default_rng([int(s), int(e)]).permutation(int(n)) for s, e, n in zip(seeds, epochs, sizes, strict=True)]


def test_permutations_equal_default_rng_bitwise():
    rng = np.random.default_rng(0)
    k = 400
    seeds = rng.integers(0, 2**32, k).tolist()
    epochs = rng.integers(0, 2**32, k).tolist()
    sizes = rng.integers(0, 300, k).tolist()
    # the engine's seeds (seed * 1_000_003 + client) and small epochs, and the word boundaries
    seeds += [0, 1, 1_000_003, 4_000_012, 2**32 - 1, 0, 2**32 - 1, 7]
    epochs += [0, 0, 3, 17, 0, 2**32 - 1, 2**32 - 1, 1]
    sizes += [14, 1, 14, 33, 5, 5, 8, 1000]
    for got, want in zip(permutations(seeds, epochs, sizes), _reference(seeds, epochs, sizes), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_permutations_beyond_one_word_use_numpys_seeding():
    seeds, epochs, sizes = [2**32, 2**40 + 3, 5], [1, 2**33, 2**32], [10, 10, 10]
    for got, want in zip(permutations(seeds, epochs, sizes), _reference(seeds, epochs, sizes), strict=True):
        assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="differ in length"):
        permutations([1, 2], [0], [3, 3])


def test_batch_orders_equal_epoch_batches_in_any_order():
    """Whatever order clients and epochs are asked in (the window drawn ahead, epochs dropped
    behind the cursors), every client's batches are epoch_batches' (drop_last)."""
    rng = np.random.default_rng(1)
    sizes = [14, 3, 40, 2100, 9]
    clients = [as_index_array(rng.permutation(5000)[:n]) for n in sizes]
    orders = BatchOrders(clients, 8, seed=3)
    cursors = {c: [0, 0] for c in range(len(sizes))}
    for _ in range(300):
        c = int(rng.integers(len(sizes)))
        cursors[c][0] += int(rng.integers(0, 3))  # clients advance at their own pace
        got = orders.batches(c, cursors[c][0], cursors)
        want = epoch_batches(clients[c], min(8, sizes[c]), seed=3 * 1_000_003 + c, epoch=cursors[c][0], drop_last=True)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert all(len(held) <= orders.ahead[k] for k, held in orders.cache.items())  # older epochs were dropped
    assert orders.ahead == [16, 16, 16, 1, 16]  # about 2048 samples ahead, at most 16 epochs


def test_simulation_streams_are_the_per_client_generators():
    """A simulation's batch ids, round after round with partial participation and uneven clients,
    are each client's epoch_batches stream (the engine's contract: order depends only on
    (seed, client, epoch))."""
    g = torch.Generator().manual_seed(0)
    sizes = (14, 5, 30, 9)
    x = torch.randn(sum(sizes), 6, generator=g)
    y = torch.randint(0, 3, (sum(sizes),), generator=g)
    parts = np.split(np.arange(sum(sizes)), np.cumsum(sizes)[:-1])
    data = fl.FederatedData(x, y, x[:8], y[:8], parts)
    sim = fl.Simulation(torch.nn.Linear(6, 3), data, fl.FedAvg(),
                        fl.TrainConfig(rounds=2, batch_size=8, seed=5, progress=False, batched="off"))
    drawn = {c: [] for c in range(len(sizes))}
    rng = np.random.default_rng(2)
    for _ in range(200):
        c = int(rng.integers(len(sizes)))
        drawn[c].append(sim.next_batch_ids(c))
    for c, ids in drawn.items():
        b = min(8, sizes[c])
        stream = [t for e in range(60)
                  for t in epoch_batches(parts[c], b, seed=5 * 1_000_003 + c, epoch=e, drop_last=True)]
        assert all(torch.equal(a, b) for a, b in zip(ids, stream[:len(ids)], strict=False)) and len(ids) <= len(stream)


def test_permutations_in_threads_stay_each_pairs_own():
    """Each thread sets and uses its own generator: concurrent calls do not mix their streams."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [([s] * 50, list(range(50)), [20] * 50) for s in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda j: permutations(*j), jobs))
    for j, g in zip(jobs, got, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(g, _reference(*j), strict=True))
