"""Embedded data: Q-DIG, Q-DOM, Q-SEG, Q-GAUSS, Q-ABIDE, FedBN App. F; Split and batching."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bnfl.data import (
    DOMAINS,
    Split,
    abide_sites,
    apply_domain,
    digit_domains,
    digit_segmentation,
    digits,
    fedbn_synthetic,
    gaussian_mixture,
    iterate_batches,
    raw_digits,
)
from bnfl.data.domains import _domain_subsets
from bnfl.data.synthetic import ABIDE_SITES


@pytest.fixture(scope="module")
def qdig() -> Split:
    return digits("flat")


# ------------------------------------------------------------------------------ Q-DIG


def test_digits_split_sizes_and_stratification(qdig):
    assert qdig.x_train.shape == (1437, 64) and qdig.x_test.shape == (360, 64)
    assert qdig.x_train.dtype == torch.float32 and qdig.y_train.dtype == torch.int64
    _, labels = raw_digits()
    total = np.bincount(labels)
    test = np.bincount(qdig.y_test.numpy(), minlength=10)
    assert np.all(np.abs(test - 0.2 * total) <= 1)


def test_digits_standardised_with_train_statistics(qdig):
    mean, std = qdig.x_train.mean(0), qdig.x_train.std(0, unbiased=False)
    assert mean.abs().max() < 1e-5
    constant = qdig.meta["std"] == 1.0
    assert constant.any(), "load_digits has always-blank pixels"
    torch.testing.assert_close(std[~constant], torch.ones(int((~constant).sum())))
    assert torch.all(qdig.x_train[:, constant] == 0)
    assert torch.isfinite(qdig.x_test).all()
    # raw / 16 recovered from the stored constants
    images, _ = raw_digits()
    raw = torch.from_numpy(images[qdig.meta["index_train"]] / 16).float().reshape(-1, 64)
    torch.testing.assert_close(qdig.x_train * qdig.meta["std"] + qdig.meta["mean"], raw)


def test_raw_digits_are_copies():
    images, labels = raw_digits()
    images[:] = -1
    labels[:] = -1
    again, lab = raw_digits()
    assert again.min() == 0 and again.max() == 16 and lab.min() == 0


def test_digits_forms_and_determinism(qdig):
    image = digits("image")
    torch.testing.assert_close(image.x_train.reshape(-1, 64), qdig.x_train)
    assert torch.equal(digits("flat").x_train, qdig.x_train)
    assert not torch.equal(digits("flat", seed=1).y_train, qdig.y_train)
    cifar = digits("cifar")
    assert cifar.x_train.shape == (1437, 3, 32, 32)
    assert torch.equal(cifar.x_train[:, 0], cifar.x_train[:, 2])
    m = cifar.x_train.mean(dim=(0, 2, 3))
    assert m.abs().max() < 1e-4
    with pytest.raises(ValueError, match="form"):
        digits("vector")


# ------------------------------------------------------------------------------ Q-DOM


def test_domain_transforms_follow_the_recipe():
    images, _ = raw_digits()
    x = images[:50].copy()
    before = x.copy()
    out = {name: apply_domain(x, name, seed=0) for name in DOMAINS}
    np.testing.assert_array_equal(x, before)
    for name, y in out.items():
        assert y.shape == x.shape and y.min() >= 0 and y.max() <= 16, name
        np.testing.assert_array_equal(y, apply_domain(x, name, seed=0))
    np.testing.assert_array_equal(out["clean"], x)
    np.testing.assert_allclose(out["contrast"], 0.4 * x + 8)
    np.testing.assert_allclose(out["gain"], np.clip(x * (0.5 + np.arange(8) / 7), 0, 16))
    np.testing.assert_allclose(out["blur"][:, 3, 4], x[:, 2:5, 3:6].mean(axis=(1, 2)))
    assert np.all(out["thick"] >= x) and np.all(out["thin"] <= x)
    np.testing.assert_allclose(out["thick"][:, 2, 2], x[:, 2:4, 2:4].max(axis=(1, 2)))
    np.testing.assert_allclose(out["thin"][:, 2, 2], x[:, 2:4, 2:4].min(axis=(1, 2)))
    frac = out["fracture"]
    assert np.all((frac == x) | (frac == 0))
    zero_rows = (frac == 0).all(axis=2) & ~(x == 0).all(axis=2)
    zero_cols = (frac == 0).all(axis=1) & ~(x == 0).all(axis=1)
    assert np.all(zero_rows.any(1) | zero_cols.any(1) | (frac == x).all(axis=(1, 2)))
    noise = out["noise"] - x
    assert 2.0 < noise[(x > 3) & (x < 13)].std() < 4.0
    assert not np.array_equal(out["noise"], apply_domain(x, "noise", seed=1))
    for a, b in itertools.combinations(DOMAINS, 2):
        assert not np.allclose(out[a], out[b]), (a, b)
    for name in DOMAINS:  # no sign inversion: every domain stays positively correlated
        assert np.corrcoef(out[name].ravel(), x.ravel())[0, 1] > 0.5, name
    with pytest.raises(ValueError, match="unknown domain"):
        apply_domain(x, "invert")


def test_digit_domains_equal_disjoint_and_labelled():
    d = digit_domains()
    assert d.domains == DOMAINS[:6]
    assert np.all(np.bincount(d.domain_train.numpy()) == 239)
    assert np.all(np.bincount(d.domain_test.numpy()) == 60)
    assert d.x_train.shape == (1434, 1, 8, 8) and d.x_train.min() >= -1 and d.x_train.max() <= 1
    again = digit_domains()
    assert torch.equal(d.x_train, again.x_train) and torch.equal(d.y_test, again.y_test)
    # the domains' digits are disjoint equal subsets; the clean domain's images are raw digits
    subsets, _, _ = _domain_subsets(DOMAINS[:6], 0, 0.2)
    used = np.concatenate([np.concatenate(pair) for pair in subsets])
    assert used.size == 6 * 299 and np.unique(used).size == used.size
    images, _ = raw_digits()
    raw = torch.from_numpy((images / 16 - 0.5) / 0.5).float().reshape(1797, -1)
    clean = torch.cat([d.x_train[d.domain_train == 0], d.x_test[d.domain_test == 0]]).reshape(-1, 64)
    hits = (clean[:, None, :] == raw[None]).all(-1).sum(1)
    assert torch.all(hits >= 1)
    five = digit_domains(("clean", "contrast", "blur", "noise", "thick"), form="flat")
    assert five.x_train.shape == (5 * 287, 64) and five.x_test.shape == (5 * 72, 64)
    small = digit_domains(DOMAINS[:4], train_per_domain=62)
    assert np.all(np.bincount(small.domain_train.numpy()) == 62)
    unseen = digit_domains(("thin", "fracture"))
    assert unseen.domains == ("thin", "fracture")
    with pytest.raises(ValueError, match="distinct"):
        digit_domains(("clean", "clean"))
    with pytest.raises(ValueError, match="train_per_domain"):
        digit_domains(train_per_domain=10_000)


def test_digit_segmentation_masks():
    seg = digit_segmentation()
    assert seg.y_train.shape == (seg.x_train.shape[0], 8, 8) and seg.num_classes == 11
    assert len(seg.domains) == 5
    assert seg.y_train.min() == 0 and seg.y_train.max() == 10
    for mask in seg.y_train[:50]:  # one digit class per image
        assert torch.unique(mask[mask > 0]).numel() <= 1
    clean = seg.domain_train == 0
    x = seg.x_train[clean, 0] * 0.5 + 0.5  # back to raw / 16
    assert torch.equal(seg.y_train[clean] > 0, x * 16 > 6)
    binary = digit_segmentation(binary=True)
    assert binary.classes == ("background", "stroke")
    assert torch.equal(binary.y_train, (seg.y_train > 0).long())


# ------------------------------------------------------------------------------ synthetic


def test_gaussian_mixture_recipe():
    g = gaussian_mixture(10)
    assert g.x_train.shape == (5000, 64) and g.x_test.shape == (1000, 64)
    assert g.x_train.mean(0).abs().max() < 1e-5
    torch.testing.assert_close(g.x_train.std(0, unbiased=False), torch.ones(64))
    assert np.all(np.bincount(g.y_train.numpy()) == 500)
    assert torch.equal(g.x_train, gaussian_mixture(10).x_train)
    assert not torch.equal(g.x_train, gaussian_mixture(10, seed=1).x_train)
    big = gaussian_mixture(100, n_train=10_000)
    assert big.num_classes == 100 and np.all(np.bincount(big.y_train.numpy()) == 100)
    # classes are separable: nearest class mean on train beats chance by far
    means = torch.stack([g.x_train[g.y_train == c].mean(0) for c in range(10)])
    pred = torch.cdist(g.x_test, means).argmin(1)
    assert (pred == g.y_test).float().mean() > 0.5


def test_abide_sites_ratios_and_shift():
    a = abide_sites()
    assert a.domains == ("NYU", "UM", "USM", "UCLA")
    for j, (_, ratio, size) in enumerate(ABIDE_SITES):
        y = torch.cat([a.y_train[a.domain_train == j], a.y_test[a.domain_test == j]])
        assert y.numel() == size
        assert y.sum().item() == round(ratio * size)
    means = torch.stack([a.x_train[a.domain_train == j].mean(0) for j in range(4)])
    assert torch.cdist(means, means).max() > 3, "sites are shifted"
    assert torch.equal(a.x_train, abide_sites().x_train)
    with pytest.raises(ValueError, match="positive ratio"):
        abide_sites(positive_ratios=[0.5, 1.0, 0.5, 0.5])


def test_fedbn_synthetic_covariances():
    f = fedbn_synthetic(n_per_class=2000)
    assert f.x_train.shape == (2 * 2 * 2000, 10)
    for client, band in ((0, 0.0), (1, 0.8)):
        sel = f.domain_train == client
        for cls, sign in ((0, 1.0), (1, -1.0)):
            x = f.x_train[sel & (f.y_train == cls)].double()
            torch.testing.assert_close(x.mean(0), torch.full((10,), 0.5 * sign, dtype=torch.double),
                                       atol=0.08, rtol=0)
            cov = torch.cov(x.T)
            off = torch.diagonal(cov, 1)
            assert torch.all((off - band).abs() < 0.08)
            assert torch.all((torch.diagonal(cov) - 1).abs() < 0.12)


# ------------------------------------------------------------------------------ Split, batches


def test_split_validates_and_moves():
    x, y = torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)
    s = Split(x, y, x, y, classes=("a",), name="t")
    moved = s.to("cpu")
    assert moved is not s and torch.equal(moved.x_train, x) and moved.input_shape == (2,)
    xs, ys = s.train_subset(np.array([0, 2]))
    assert xs.shape == (2, 2) and ys.shape == (2,)
    with pytest.raises(ValueError, match="must match"):
        Split(x, y[:3], x, y, classes=("a",), name="t")
    with pytest.raises(TypeError, match="float32"):
        Split(x.double(), y, x, y, classes=("a",), name="t")
    with pytest.raises(TypeError, match="int64"):
        Split(x, y.int(), x, y, classes=("a",), name="t")
    with pytest.raises(ValueError, match="indices must lie"):
        s.train_subset([5])


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=5), st.booleans())
def test_split_from_domains_concatenates_in_order_and_labels_each_sample(sizes, as_numpy):
    # Domain j's (x_train, y_train, x_test, y_test): its samples carry values 100 j + i, so the
    # concatenation order and the domain label of every sample can be read back.
    def piece(j: int, n: int) -> tuple:
        x = (100.0 * j + np.arange(n, dtype=np.float32)).reshape(n, 1).repeat(3, 1)
        y = np.full(n, j, dtype=np.int64)
        return (x, y) if as_numpy else (torch.from_numpy(x), torch.from_numpy(y))

    pieces = [(*piece(j, a), *piece(j, b)) for j, (a, b) in enumerate(sizes)]
    names = [f"d{j}" for j in range(len(sizes))]
    s = Split.from_domains(pieces, domains=names, classes=("a", "b"), name="t", meta={"k": 1})
    for part, col in (("train", 0), ("test", 1)):
        want = [j for j, n in enumerate(sizes) for _ in range(n[col])]
        x, d = getattr(s, f"x_{part}"), getattr(s, f"domain_{part}")
        assert d.dtype == torch.int64 and d.tolist() == want == getattr(s, f"y_{part}").tolist()
        assert x.shape == (len(want), 3) and x.dtype == torch.float32
        assert x[:, 0].tolist() == [100.0 * j + i for j, n in enumerate(sizes) for i in range(n[col])]
    assert s.domains == tuple(names) and s.classes == ("a", "b") and s.meta == {"k": 1}
    with pytest.raises(ValueError, match=r"pieces for .* domains; give one \(x_train, y_train, x_test, y_test\)"):
        Split.from_domains(pieces, domains=[*names, "extra"], classes=("a",), name="t")


@given(st.lists(st.integers(0, 10_000), min_size=0, max_size=100, unique=True),
       st.integers(1, 17), st.integers(0, 2**32 - 1), st.integers(0, 50), st.booleans())
def test_iterate_batches_deterministic_and_complete(idx, batch, seed, epoch, drop_last):
    batches = list(iterate_batches(idx, batch, seed=seed, epoch=epoch, drop_last=drop_last))
    again = list(iterate_batches(idx, batch, seed=seed, epoch=epoch, drop_last=drop_last))
    assert len(batches) == len(again) and all(torch.equal(a, b) for a, b in zip(batches, again, strict=True))
    flat = torch.cat(batches).tolist() if batches else []
    assert all(b.dtype == torch.int64 and len(b) <= batch for b in batches)
    if drop_last:
        assert all(len(b) == batch for b in batches) and len(flat) == len(idx) - len(idx) % batch
    else:
        assert sorted(flat) == sorted(idx)
    assert len(set(flat)) == len(flat)


def test_iterate_batches_epochs_differ_and_order_kept_without_shuffle():
    idx = np.arange(100)
    e0 = torch.cat(list(iterate_batches(idx, 10, seed=0, epoch=0)))
    e1 = torch.cat(list(iterate_batches(idx, 10, seed=0, epoch=1)))
    assert not torch.equal(e0, e1)
    plain = torch.cat(list(iterate_batches(idx, 10, shuffle=False)))
    assert torch.equal(plain, torch.arange(100))
    with pytest.raises(ValueError, match="batch_size"):
        next(iterate_batches(idx, 0))


@pytest.mark.parametrize("drop_last", [True, False])
def test_epoch_batches_equal_iterate_batches(drop_last):
    """The engine's per-epoch call returns exactly ``list(iterate_batches(...))``."""
    from bnfl.data.datasets import as_index_array, epoch_batches

    rng = np.random.default_rng(1)
    for n, b in [(1, 1), (5, 3), (14, 14), (33, 8), (100, 32), (419, 500)]:
        idx = rng.choice(2000, n, replace=False)
        for epoch in range(3):
            want = list(iterate_batches(idx, min(b, n), seed=7, epoch=epoch, drop_last=drop_last))
            got = epoch_batches(as_index_array(idx), min(b, n), seed=7, epoch=epoch, drop_last=drop_last)
            assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
