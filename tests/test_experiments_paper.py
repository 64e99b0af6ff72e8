"""The paper profile of every FedTAN training entry runs end to end on tiny fake data sets
written in the real formats (CIFAR-10/100 pickle batches, MNIST IDX, domain image folders),
with rounds and sizes overridden to tiny. On a GPU machine the same path runs with
``--device cuda``; here it runs on the CPU."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest

from bnfl import experiments as E
from bnfl.experiments.cache import RunCache

TINY = {"rounds": 1, "train": {"local_steps": 1, "batch_size": 2, "eval_every": 1}}

#: Per-entry overrides on top of TINY (short lists of k / B / M; small images for AlexNet-BN).
OVERRIDES: dict[str, dict] = {
    "fedtan-fig3": {"base_a": TINY, "base_b": TINY},
    "fedtan-fig5": {"k": [2, 10]},
    "fedtan-fig7": {"methods": ["centralized", "fedtan", "fedavg+bn"]},
    # AlexNet-BN's layers on 64x64 images (the smallest size it accepts), its two hidden FC layers
    # at width 64 instead of 4096 (54.5M of its 57.1M parameters; 45 s of this test for the same
    # wiring); the full-size network: test_fig8_alexnet_bn_at_full_size_is_table_9s.
    "fedtan-fig8": {"base": {"data": {"size": 64}, "model": {"hidden": 64}}},
    "fedtan-fig11": {"base": {"rounds": 2}, "M": [1, 2]},
    "fedtan-fig12": {"batch_sizes": [2]},
    # Same code path as fig8 (image folders, per-domain evaluation); a small CNN keeps it fast.
    "fedtan-fig13": {"base": {"data": {"size": 32}, "model": {"name": "simple_cnn"}}},
    "fedtan-fig14": {"base": {"rounds": 2}, "M": [1, 2], "M_compare": 1},
}

#: Shared by all paper-profile tests: Fig. 9 / Table 2 / Fig. 10 (and the B=2 cells) reuse runs.
CACHE = RunCache()

TRAINING = [eid for eid in E.ids("fedtan") if E.get(eid).kind == "training"]


def _cifar_batch(path, n, num_classes, label_key, rng, offset=0):
    labels = ((np.arange(n) + offset) % num_classes).tolist()
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    with open(path, "wb") as f:
        pickle.dump({b"data": data, label_key: labels}, f)


def _idx(path, array):
    dims = array.shape
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, len(dims)))
        f.write(struct.pack(f">{len(dims)}I", *dims))
        f.write(array.astype(np.uint8).tobytes())


def _image_folders(root, domains, classes, per_class, rng):
    from PIL import Image

    for d in domains:
        for c in classes:
            folder = root / d / c
            folder.mkdir(parents=True)
            for i in range(per_class):
                img = rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)
                Image.fromarray(img).save(folder / f"{i}.png")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("bnfl_data")
    c10 = root / "cifar-10-batches-py"
    c10.mkdir()
    for i in range(1, 6):
        _cifar_batch(c10 / f"data_batch_{i}", 8, 10, b"labels", rng, offset=8 * i)  # 40 images, 4 per class
    _cifar_batch(c10 / "test_batch", 20, 10, b"labels", rng)
    c100 = root / "cifar-100-python"
    c100.mkdir()
    _cifar_batch(c100 / "train", 200, 100, b"fine_labels", rng)
    _cifar_batch(c100 / "test", 100, 100, b"fine_labels", rng)
    for split, n in (("train", 40), ("t10k", 20)):
        _idx(root / f"{split}-images-idx3-ubyte", rng.integers(0, 256, size=(n, 28, 28)))
        _idx(root / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    _image_folders(root / "office_caltech10", ["amazon", "caltech", "dslr", "webcam"], ["bike", "cup", "mug"], 4, rng)
    _image_folders(root / "domainnet", ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"],
                   ["bird", "feather", "headphones", "ice_cream", "teapot", "tiger", "whale", "windmill", "wine_glass",
                    "zebra", "apple"], 1, rng)  # FedBN's ten classes (FedTAN Supp. F) and one the profile leaves out
    return root


def _tiny(eid):
    ov = dict(OVERRIDES.get(eid, {}))
    base = dict(TINY)
    base.update(ov.pop("base", {}))
    if "base_a" not in ov:
        ov["base"] = base
    return ov


@pytest.mark.parametrize("eid", TRAINING)
def test_paper_profile_runs_end_to_end_on_real_formats(eid, data_root, tmp_path):
    r = E.run(eid, profile="paper", data_root=data_root, seeds=1, overrides=_tiny(eid), cache=CACHE,
              device="cpu", out=tmp_path)
    assert r.profile == "paper" and r.rows and r.claims
    assert (tmp_path / eid / "result.json").is_file()
    # every run really used the paper data set, not the embedded one
    names = {spec_data for spec_data in _data_names(r.config)}
    assert names & {"cifar10", "cifar100", "mnist", "office_caltech10", "domainnet"}
    E.save_figures(r, tmp_path)


def test_fig8_alexnet_bn_at_full_size_is_table_9s():
    """The network fig8's paper profile builds (the override above narrows it), at full size on the
    ``meta`` device (no memory, no initialisation): FedBN Table 9's layers with torchvision's
    AlexNet counts (61,100,840 parameters without norm at 1000 classes), BN's affine parameters on
    top, and a 256x256 Office-Caltech10 batch in, 10 logits out."""
    import torch

    from bnfl import models

    spec = E.get("fedtan-fig8").config("paper")["base"]
    assert spec["model"] == {"name": "alexnet_bn"} and spec["data"]["size"] == 256  # hidden: the default 4096
    with torch.device("meta"):
        plain = models.build("alexnet_bn", num_classes=1000, norm="none")
        net = models.build("alexnet_bn", num_classes=10)
        out = net.train()(torch.empty(2, 3, 256, 256))
    assert sum(p.numel() for p in plain.parameters()) == 61_100_840
    bn = 2 * (64 + 192 + 384 + 256 + 256 + 4096 + 4096)  # weight and bias of each BN layer
    assert sum(p.numel() for p in net.parameters()) == 61_100_840 - 4097 * 990 + bn
    assert out.shape == (2, 10)
    with pytest.raises(ValueError, match="hidden"):
        models.build("alexnet_bn", hidden=0)


def _data_names(config):
    for key, val in config.items():
        if key.startswith("base") and isinstance(val, dict):
            yield val["data"]["name"]


def test_paper_profile_without_data_root_says_what_to_do(monkeypatch):
    monkeypatch.delenv("BNFL_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match="--data-root"):
        E.run("fedtan-fig6", profile="paper", seeds=1, overrides=_tiny("fedtan-fig6"))


def test_paper_profile_data_root_from_environment(monkeypatch, data_root):
    monkeypatch.setenv("BNFL_DATA", str(data_root))
    r = E.run("fedtan-fig6", profile="paper", seeds=1, overrides=_tiny("fedtan-fig6"))
    assert {row["method"] for row in r.rows} >= {"FedTAN", "FedAvg+BN", "Centralized+BN"}


def test_paper_profile_is_the_papers_setup():
    cfg = E.get("fedtan-tab1").config("paper")["base"]
    assert cfg["model"]["name"] == "resnet20" and cfg["data"]["name"] == "cifar10"
    t = cfg["train"]
    assert (t["batch_size"], t["local_steps"], t["lr"], cfg["rounds"]) == (128, 5, 0.5, 10_000)
    assert (t["momentum"], t["weight_decay"], t["milestones"]) == (0.9, 1e-4, [6000, 8000])
    assert E.get("fedtan-tab1").default_seeds["paper"] == 5
    mnist = E.get("fedtan-fig6").config("paper")["base"]
    assert mnist["model"]["name"] == "fedtan_mlp" and mnist["rounds"] == 500 and mnist["train"]["lr"] == 0.5
