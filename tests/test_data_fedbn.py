"""FedBN's paper-scale loaders on tiny fake files written in the real formats: the FedBN release's
digits partitions (pickled (images, labels) pairs), ABIDE per-site ``.npz``, Morpho-MNIST IDX (gz)."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest
import torch

from bnfl.data import DATASETS, abide, digit5, load, morpho_mnist

#: folder -> (image shape of one sample) in the FedBN release (grey or RGB, native size).
DIGIT5_SHAPES = {"MNIST": (28, 28), "SVHN": (32, 32, 3), "USPS": (16, 16), "SynthDigits": (32, 32, 3),
                 "MNIST_M": (28, 28, 3)}


def write_digit5(root, per_part=6, n_test=8, seed=0):
    rng = np.random.default_rng(seed)
    for folder, shape in DIGIT5_SHAPES.items():
        (root / folder / "partitions").mkdir(parents=True)
        for i in range(10):
            pair = (rng.integers(0, 256, size=(per_part, *shape), dtype=np.uint8),
                    ((np.arange(per_part) + i) % 10).astype(np.int64))
            with open(root / folder / "partitions" / f"train_part{i}.pkl", "wb") as f:
                pickle.dump(pair, f)
        with open(root / folder / "test.pkl", "wb") as f:
            pickle.dump((rng.integers(0, 256, size=(n_test, *shape), dtype=np.uint8), np.arange(n_test) % 10), f)


def write_abide(root, sizes=(12, 10, 8, 10), dim=16, seed=0):
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for site, n in zip(("NYU", "USM", "UM", "UCLA"), sizes, strict=True):
        np.savez(root / f"{site}.npz", x=rng.standard_normal((n, dim)).astype(np.float32), y=np.arange(n) % 2)


def _idx_gz(path, array):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, array.ndim))
        f.write(struct.pack(f">{array.ndim}I", *array.shape))
        f.write(array.astype(np.uint8).tobytes())


def write_morpho(root, n=10, seed=0):
    rng = np.random.default_rng(seed)
    for style in ("global", "local"):
        (root / style).mkdir(parents=True)
        _idx_gz(root / style / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, size=(n, 28, 28)))
        _idx_gz(root / style / "t10k-labels-idx1-ubyte.gz", np.arange(n) % 10)


def test_digit5_reads_the_release_partitions_in_the_papers_order(tmp_path):
    write_digit5(tmp_path)
    s = digit5(tmp_path)  # 10%: partition 0 of each data set
    assert s.domains == ("SVHN", "USPS", "SynthDigits", "MNIST-M", "MNIST")
    assert s.x_train.shape == (5 * 6, 3, 28, 28) and s.x_test.shape == (5 * 8, 3, 28, 28)
    assert float(s.x_train.min()) >= -1 and float(s.x_train.max()) <= 1
    assert np.bincount(s.domain_train.numpy()).tolist() == [6] * 5
    grey = s.x_train[s.domain_train == 4]  # MNIST: grey copied to three channels
    assert torch.equal(grey[:, 0], grey[:, 1]) and torch.equal(grey[:, 0], grey[:, 2])
    assert digit5(tmp_path, fraction=0.3).x_train.shape[0] == 5 * 18  # three partitions
    assert digit5(tmp_path, fraction=0.05).x_train.shape[0] == 5 * 3  # the head of partition 0
    assert digit5(tmp_path, domains=["USPS"], size=16).x_train.shape == (6, 3, 16, 16)
    sized = digit5(tmp_path, train_sizes=[2, 3, 4, 5, 6])
    assert np.bincount(sized.domain_train.numpy()).tolist() == [2, 3, 4, 5, 6]
    assert load("digit5", root=tmp_path).x_train.shape == s.x_train.shape
    assert DATASETS["digit5"].local


def test_digit5_errors_name_the_layout_and_the_option(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_part0.pkl"):
        digit5(tmp_path)
    with pytest.raises(ValueError, match="fraction"):
        digit5(tmp_path, fraction=0)
    with pytest.raises(ValueError, match="unknown digits"):
        digit5(tmp_path, domains=["KMNIST"])


def test_abide_reads_one_npz_per_site_and_splits_each_site(tmp_path):
    write_abide(tmp_path)
    s = abide(tmp_path, seed=1)
    assert s.domains == ("NYU", "USM", "UM", "UCLA")
    assert s.x_train.shape[1] == 16 and s.x_train.shape[0] + s.x_test.shape[0] == 40
    assert np.bincount(s.domain_test.numpy()).tolist() == [2, 2, 2, 2]
    assert torch.equal(abide(tmp_path, seed=1).x_train, s.x_train)
    np.savez(tmp_path / "UM.npz", x=np.ones((3, 15), dtype=np.float32), y=np.array([0, 1, 0]))
    with pytest.raises(ValueError, match="15 features"):
        abide(tmp_path)
    with pytest.raises(FileNotFoundError, match="NYU.npz"):
        abide(tmp_path / "missing")


def test_morpho_mnist_reads_both_perturbation_sets(tmp_path):
    write_morpho(tmp_path)
    for style in ("global", "local"):
        x, y = morpho_mnist(tmp_path, style)
        assert x.shape == (10, 3, 28, 28) and y.tolist() == [i % 10 for i in range(10)]
    with pytest.raises(ValueError, match="style"):
        morpho_mnist(tmp_path, "swirl")
    with pytest.raises(FileNotFoundError, match="Morpho-MNIST"):
        morpho_mnist(tmp_path / "none", "global")


def write_digit5_raw(root, n=40, seed=0):
    """Each data set's own raw files (what the FedBN release was built from), n samples per split."""
    import bz2

    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 10
    (root / "MNIST").mkdir(parents=True)
    for split in ("train", "t10k"):
        _idx_gz(root / "MNIST" / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, size=(n, 28, 28)))
        _idx_gz(root / "MNIST" / f"{split}-labels-idx1-ubyte.gz", labels)
    for folder, pre in (("SVHN", ""), ("SynthDigits", "synth_")):
        (root / folder).mkdir()
        for split in ("train", "test"):
            y = np.where(labels == 0, 10, labels) if folder == "SVHN" else labels  # SVHN writes 0 as 10
            savemat(root / folder / f"{pre}{split}_32x32.mat",
                    {"X": rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8), "y": y.reshape(-1, 1)})
    (root / "USPS").mkdir()
    for name in ("usps.bz2", "usps.t.bz2"):
        with bz2.open(root / "USPS" / name, "wt") as f:
            for lab in labels:
                vals = rng.uniform(-1, 1, size=256)
                f.write(f"{lab + 1} " + " ".join(f"{i + 1}:{v:.4f}" for i, v in enumerate(vals)) + "\n")
    (root / "MNIST_M").mkdir()
    data = {k: rng.integers(0, 256, size=(n, 28, 28, 3), dtype=np.uint8) for k in ("train", "valid", "test")}
    data.update({f"{k}_label": labels for k in ("train", "valid", "test")})
    with open(root / "MNIST_M" / "mnistm_data.pkl", "wb") as f:
        pickle.dump(data, f)


def test_digit5_rebuilds_the_release_partitions_from_raw_files(tmp_path):
    write_digit5_raw(tmp_path)
    s = digit5(tmp_path)
    pooled = {"SVHN": 80, "USPS": 80, "SynthDigits": 80, "MNIST-M": 120, "MNIST": 80}
    for j, name in enumerate(s.domains):  # pooled train+test, 80/20 stratified; part 0 holds them all here
        assert int((s.domain_test == j).sum()) == pooled[name] // 5
        assert int((s.domain_train == j).sum()) == pooled[name] - pooled[name] // 5
    svhn = s.y_train[s.domain_train == 0]
    assert int(svhn.max()) == 9 and int((svhn == 0).sum()) > 0  # SVHN's label 10 is the digit 0
    assert torch.equal(digit5(tmp_path).x_train, s.x_train)  # the split is seeded (random_state 0)
    assert float(s.x_train.min()) >= -1 and float(s.x_train.max()) <= 1
