"""The paper profile of every HBN training entry runs end to end on tiny fake data sets written
in the real formats (CIFAR-10 / CIFAR-100 pickle batches, Tiny-ImageNet folders), with the
paper's models and protocol but rounds, clients and sizes overridden to tiny; plus the
pretrained-weights path of Table 5."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from bnfl import experiments as E
from bnfl import models
from bnfl.experiments.cache import RunCache
from bnfl.experiments.papers.hbn import numbers as N

torch.set_num_threads(1)

TINY = {"rounds": 1, "partition": {"num_clients": 4}, "data": {"size": 16},
        "train": {"batch_size": 4, "participation": 0.5, "eval_every": 1}}
TINY_C = {k: v for k, v in TINY.items() if k != "data"}  # CIFAR loaders take no size
ONE_LR = {"grid": {k: [0.01] for k in N.NORMS}}
#: hbn-tab1, hbn-tab5 and hbn-fig7 run with their real columns, networks and weights files, shrunk in
#: scale only (tests/test_paper_dry_run.py); the others below still narrow their grids and batches.
OVERRIDES: dict[str, dict] = {
    "hbn-tab2": {"base": TINY_C, "phis": [0.6], "B": [4, 2]},
    "hbn-fig4": {"base": TINY_C, "B": [4, 2]},
    "hbn-fig1": {"base": TINY_C, "phis": [0.1], "B": [4], "phi_B": 4},
    "hbn-tab3": {"base": TINY_C, "K": [4, 6], "per_round": 2},
    "hbn-tab4": {"base": TINY_C, "solvers": ["FedAvg", "FedProx"]},
    "hbn-tab6": {"base": TINY_C},
    "hbn-fig5": {"base": TINY_C, "lams": [1.0, 0.01], "C": [1.0, 0.5]},
    "hbn-fig6": {"base": TINY_C, "E": [1, 2]},
    "hbn-tab8": {"lr": {"base": TINY_C, **ONE_LR}},
    "hbn-tab9": {"lr": {"base": TINY_C, **ONE_LR}},
    "hbn-tab10": {"lr": {"base": TINY, **ONE_LR}},
}
CACHE = RunCache()
TRAINING = [eid for eid in E.ids("hbn") if E.get(eid).kind == "training" and eid not in ("hbn-tab1", "hbn-tab5",
                                                                                          "hbn-fig7")]


def _cifar_batch(path, n, num_classes, label_key, rng):
    with open(path, "wb") as f:
        pickle.dump({b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                     label_key: (np.arange(n) % num_classes).tolist()}, f)


def _png(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("hbn_data")
    c10 = root / "cifar-10-batches-py"
    c10.mkdir()
    for i in range(1, 6):
        _cifar_batch(c10 / f"data_batch_{i}", 12, 10, b"labels", rng)
    _cifar_batch(c10 / "test_batch", 20, 10, b"labels", rng)
    c100 = root / "cifar-100-python"
    c100.mkdir()
    _cifar_batch(c100 / "train", 200, 100, b"fine_labels", rng)
    _cifar_batch(c100 / "test", 100, 100, b"fine_labels", rng)
    base = root / "tiny-imagenet-200"
    wnids = [f"n{i:02d}" for i in range(8)]
    lines = []
    for w in wnids:
        for i in range(6):
            _png(base / "train" / w / "images" / f"{w}_{i}.JPEG", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
        _png(base / "val" / "images" / f"val_{w}.JPEG", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
        lines.append(f"val_{w}.JPEG\t{w}\t0\t0\t10\t10")
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return root


def _data_names(value):
    if isinstance(value, dict):
        if "name" in value and isinstance(value["name"], str) and "data" not in value:
            return
        for k, v in value.items():
            if k == "data" and isinstance(v, dict):
                yield v["name"]
            else:
                yield from _data_names(v)


@pytest.mark.parametrize("eid", TRAINING)
def test_paper_profile_runs_end_to_end_on_real_formats(eid, data_root, tmp_path):
    r = E.run(eid, profile="paper", data_root=data_root, seeds=1, overrides=OVERRIDES[eid], cache=CACHE,
              device="cpu", out=tmp_path)
    assert r.profile == "paper" and r.rows and r.claims
    assert (tmp_path / eid / "result.json").is_file()
    names = set(_data_names(r.config))
    assert names and names <= {"cifar10", "cifar100", "tiny_imagenet"}, names  # the paper's data, never the embedded
    E.save_figures(r, tmp_path)


def test_paper_profile_is_the_papers_setup():
    c = E.get("hbn-tab1").config("paper")
    c10, tiny = c["base_c10"], c["base_tiny"]
    assert (c10["data"]["name"], c10["model"]["name"], c10["rounds"]) == ("cifar10", "simple_cnn", 500)
    assert (c10["partition"]["num_clients"], c10["train"]["participation"], c10["train"]["batch_size"]) == (100, 0.1, 4)
    assert (c10["train"]["momentum"], c10["train"]["decay"], c10["train"]["local_unit"]) == (0.9, 0.998, "epochs")
    assert (tiny["model"]["name"], tiny["partition"]["num_clients"], tiny["train"]["participation"]) == \
        ("resnet18", 500, 0.02)
    # the paper profile trains with the rates the paper chose (the argmax of Tables 8-10)
    assert c["lr_c10"]["rates"]["HBN"] == 0.01 and c["lr_c10"]["rates"]["FixBN"] == 0.002
    assert c["lr_tiny"]["rates"]["BN"] == 0.16 and c["lr_tiny"]["batch"] == 64
    archs = E.get("hbn-tab5").config("paper")["archs"]
    assert [m for m, _ in archs.values()] == ["mobilenet_v2", "resnet18", "resnet50", "vgg11", "vgg19"]


def test_pretrained_weights_come_from_the_data_root_and_a_missing_file_is_named(data_root, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"pretrained[/\\]vgg11\.pth.*nothing is downloaded"):
        E.run("hbn-tab5", profile="paper", data_root=data_root, seeds=1,
              overrides={"base": TINY_C, "use": ["VGG-11"]}, cache=CACHE, device="cpu")
    (data_root / "pretrained").mkdir(exist_ok=True)
    torch.manual_seed(3)
    net = models.build("resnet18", num_classes=100, stem="imagenet")  # torchvision's layout (Table 5)
    torch.save(net.state_dict(), data_root / "pretrained" / "resnet18.pth")
    loaded: list[str] = []
    real = models.load_pretrained

    def spy(model, path, **kw):
        loaded.append(str(path))
        return real(model, path, **kw)

    monkeypatch.setattr(models, "load_pretrained", spy)
    r = E.run("hbn-tab5", profile="paper", data_root=data_root, seeds=1,
              overrides={"base": {**TINY_C, "rounds": 1, "train": {**TINY_C["train"], "batch_size": 32, "participation": 0.25}},
                         "use": ["ResNet-18"]},
              cache=RunCache(), device="cpu")  # few steps: the test is about the file, not the training
    assert {row["model"] for row in r.rows} == {"ResNet-18"} and r.config["pretrained"] is True
    assert loaded and set(loaded) == {str(data_root / "pretrained" / "resnet18.pth")}  # every run loaded the file
    (data_root / "pretrained" / "resnet18.pth").unlink()
