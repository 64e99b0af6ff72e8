"""The paper profile of every FixBN training entry runs end to end on tiny fake data sets written
in the real formats (CIFAR-10 pickle batches, Tiny-ImageNet, ImageNet class folders, Cityscapes
leftImg8bit/gtFine), with rounds and sizes overridden to tiny; plus the two new folder loaders
and the DeepLab-v3+ model."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from bnfl import experiments as E
from bnfl import models
from bnfl.data import cityscapes, imagenet
from bnfl.experiments.cache import RunCache
from bnfl.experiments.papers.fixbn.runs import segmentation_scores

TINY = {"rounds": 1, "train": {"local_steps": 1, "batch_size": 4, "eval_every": 1}}
SMALL_SEG = {"model": {"width": 0.25, "aspp_channels": 16, "low_channels": 8}, "data": {"size": [32, 64]}}

OVERRIDES: dict[str, dict] = {
    "fixbn-fig1": {"base": TINY, "stats_window": 2},
    "fixbn-tab1": {"base": TINY, "stats_window": 2},
    "fixbn-fig2": {"base": TINY, "stats_window": 2, "freeze": TINY, "freeze_percent": [0, 100]},
    "fixbn-fig3": {"settings": {"CIFAR-10 / ResNet-20": TINY, "Tiny-ImageNet / ResNet-18": {**TINY, "data": {"size": 16}}},
                   "tiny_shards_k": 2, "partitions": ["Shards"]},
    "fixbn-tab2": {"base": {**TINY, "partition": {"num_clients": 4}, "train": {**TINY["train"], "participation": 0.5},
                            "data": {"size": 16}}},
    "fixbn-tab3": {"base": {**TINY, **SMALL_SEG, "partition": {"num_clients": 3}}},
    "fixbn-tab4": {"base": TINY},
    "fixbn-tab5": {"base": TINY},
    "fixbn-fig4": {"base": {"train": {"batch_size": 4}}, "e_grid": [1], "steps": 1},
    "fixbn-fig5": {"e_grid": [1], "steps": 1, "rounds": 1,
                   "grids": {g: {"base": {"train": {"batch_size": 4}}, "partitions": ["Shards"], "steps": 1,
                                 "budgets": ["steps"]}
                             for g in ("CIFAR-10 / ResNet-20", "CIFAR-10 / LeNet", "Tiny-ImageNet / ResNet-18")}},
}
OVERRIDES["fixbn-fig6"] = OVERRIDES["fixbn-fig5"]
OVERRIDES["fixbn-fig5"]["grids"]["Tiny-ImageNet / ResNet-18"].update(base={"train": {"batch_size": 4},
                                                                            "data": {"size": 16}}, shards_k=2)

CACHE = RunCache()
IDS = sorted(E.ids("fixbn"))


def _cifar(root, rng):
    c10 = root / "cifar-10-batches-py"
    c10.mkdir()
    for i, name in enumerate([f"data_batch_{j}" for j in range(1, 6)] + ["test_batch"]):
        n = 40
        with open(c10 / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                         b"labels": ((np.arange(n) + i) % 10).tolist()}, f)


def _png(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def _tiny_imagenet(root, rng, classes=10, per_class=6):
    base = root / "tiny-imagenet-200"
    wnids = [f"n{i:02d}" for i in range(classes)]
    lines = []
    for w in wnids:
        for i in range(per_class):
            _png(base / "train" / w / "images" / f"{w}_{i}.JPEG", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
        _png(base / "val" / "images" / f"val_{w}.JPEG", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
        lines.append(f"val_{w}.JPEG\t{w}\t0\t0\t10\t10")
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")


def _imagenet(root, rng, classes=4, per_class=12):
    for part, n in (("train", per_class), ("val", 2)):
        for c in range(classes):
            for i in range(n):
                _png(root / "imagenet" / part / f"n{c:08d}" / f"{i}.JPEG", rng.integers(0, 256, (20, 24, 3), dtype=np.uint8))


def _cityscapes(root, rng, cities=("aachen", "bonn", "jena"), per_city=4):
    base = root / "cityscapes"
    for part, names in (("train", cities), ("val", ("lindau",))):
        for city in names:
            for i in range(per_city):
                stem = f"{city}_000000_{i:06d}"
                _png(base / "leftImg8bit" / part / city / f"{stem}_leftImg8bit.png",
                     rng.integers(0, 256, (32, 64, 3), dtype=np.uint8))
                labels = rng.choice([0, 7, 8, 11, 26], size=(32, 64)).astype(np.uint8)  # void, road, sidewalk, building, car
                _png(base / "gtFine" / part / city / f"{stem}_gtFine_labelIds.png", labels)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("fixbn_data")
    _cifar(root, rng)
    _tiny_imagenet(root, rng)
    _imagenet(root, rng)
    _cityscapes(root, rng)
    return root


def test_imagenet_folder_loader(data_root):
    s = imagenet(data_root / "imagenet", size=8, max_per_class=5)
    assert s.x_train.shape == (20, 3, 8, 8) and s.x_test.shape == (8, 3, 8, 8)
    assert s.classes[0] == "n00000000" and sorted(set(s.y_train.tolist())) == [0, 1, 2, 3]
    with pytest.raises(FileNotFoundError, match="train/<wnid>"):
        imagenet(data_root / "nothing")


def test_cityscapes_loader_maps_label_ids_and_makes_cities_domains(data_root):
    s = cityscapes(data_root / "cityscapes", size=(16, 32))
    assert s.domains == ("aachen", "bonn", "jena") and s.x_train.shape == (12, 3, 16, 32)
    assert s.y_train.shape == (12, 16, 32) and s.num_classes == 19
    assert set(s.y_train.unique().tolist()) <= {0, 1, 2, 13, 255}  # road, sidewalk, building, car, void
    assert s.domain_train.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and s.domain_test is None
    assert s.meta["ignore_index"] == 255 and s.meta["val_cities"] == ["lindau"]
    with pytest.raises(FileNotFoundError, match="leftImg8bit"):
        cityscapes(data_root / "nothing")


def test_segmentation_scores_ignore_void_and_count_void_predictions_as_errors():
    class Fixed(torch.nn.Module):
        def __init__(self, pred):
            super().__init__()
            self.pred = pred

        def forward(self, x):
            return torch.nn.functional.one_hot(self.pred, 3).permute(0, 3, 1, 2).float()

    y = torch.tensor([[[0, 0, 1, 2]]])
    pred = torch.tensor([[[0, 1, 1, 2]]])
    s = segmentation_scores(Fixed(pred), torch.zeros(1, 1, 1, 4), y, 3, ignore_index=2)
    assert s["pixel_acc"] == pytest.approx(100 * 2 / 3)
    assert s["miou"] == pytest.approx(100 * (0.5 + 0.5) / 2)  # class 0: 1/2, class 1: 1/2; void not a class


def test_deeplab_backbones_match_their_reference_sizes():
    m = models.build("deeplabv3plus", num_classes=19)
    assert sum(p.numel() for p in m.backbone.parameters()) == 1_811_712  # MobileNet-v2 features (no 1280 conv)
    r = models.build("deeplabv3plus", num_classes=19, backbone="resnet18")
    assert sum(p.numel() for p in r.backbone.parameters()) == 11_176_512  # ResNet-18 without its fc
    small = models.build("deeplabv3plus", num_classes=5, norm="gn", width=0.25, aspp_channels=16, low_channels=8)
    assert small(torch.randn(2, 3, 32, 48)).shape == (2, 5, 32, 48)
    with pytest.raises(ValueError, match="backbone"):
        models.build("deeplabv3plus", backbone="vgg")


@pytest.mark.parametrize("eid", IDS)
def test_fixbn_paper_profile_runs_end_to_end_on_real_formats(eid, data_root, tmp_path):
    r = E.run(eid, profile="paper", data_root=data_root, seeds=1, overrides=OVERRIDES[eid], cache=CACHE,
              device="cpu", out=tmp_path)
    assert r.profile == "paper" and r.rows and r.claims
    assert (tmp_path / eid / "result.json").is_file()
    E.save_figures(r, tmp_path)
