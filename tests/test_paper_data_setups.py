"""The papers' data set-ups: FedBN's own Office/DomainNet folders and split files, the 62 / 105
truncation and DomainNet's ten classes (FedBN App. D.3), FixBN Table 2's two momentum readings,
and Cityscapes' void as an ignore index (255) in the loss and the scores."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from bnfl import data
from bnfl import experiments as E
from bnfl.data.fedbn_folders import DOMAINNET_TOP10
from bnfl.fl._evaluate import _cross_entropy, accuracy


def _img(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((6, 6, 3), value, dtype=np.uint8)).save(path)


def test_fedbn_release_folder_and_split_files(tmp_path):
    """FedBN's data/office_caltech_10/ with <site>_train.pkl / _test.pkl (paths relative to data/):
    the release's split in file order, truncated to train_per_domain; classes filter both parts."""
    base = tmp_path / "office_caltech_10"
    for site in ("amazon", "webcam"):
        train, test = [], []
        for k in range(5):
            for c in ("bike", "mug", "monitor"):
                rel = f"office_caltech_10/{site}/{c}/{c}_{k}.jpg"
                _img(tmp_path / rel, 10 * k + 1)
                (train if k < 4 else test).append((rel, c))
        train = train[::-1]  # the file's order, not the folder's, decides which images are kept
        for part, items in (("train", train), ("test", test)):
            with open(base / f"{site}_{part}.pkl", "wb") as f:
                pickle.dump((np.array([p for p, _ in items]), np.array([c for _, c in items])), f)
    s = data.load("office_caltech10", root=tmp_path, size=6, train_per_domain=5, classes=["bike", "mug"],
                  standardize=False)
    assert s.classes == ("bike", "mug") and s.domains == ("amazon", "webcam")
    assert s.x_train.shape[0] == 10 and s.x_test.shape[0] == 4  # 5 + 5 kept; the test lists' bike, mug
    # amazon's training list reversed: the first five are k = 3, 3, 2, 2, 1 of mug, bike, mug, bike, mug
    assert s.y_train[:5].tolist() == [1, 0, 1, 0, 1]
    assert np.allclose(s.x_train[:5, 0, 0, 0].numpy() * 255, [31, 31, 21, 21, 11], atol=2)
    with pytest.raises(ValueError, match="train_per_domain"):
        data.load("office_caltech10", root=tmp_path, size=6, train_per_domain=99)


def test_random_split_truncation_and_classes(tmp_path):
    for d in ("clipart", "real"):
        for c in ("bird", "zebra", "aircraft_carrier"):
            for k in range(5):
                _img(tmp_path / "DomainNet" / d / c / f"{k}.png", k)
    full = data.load("domainnet", root=tmp_path, size=4)
    s = data.load("domainnet", root=tmp_path, size=4, classes=["zebra", "bird"], train_per_domain=3)
    assert full.num_classes == 3 and s.classes == ("bird", "zebra")
    assert s.x_train.shape[0] == 6 and s.meta["train_per_domain"] == 3
    with pytest.raises(FileNotFoundError, match="tiger"):
        data.load("domainnet", root=tmp_path, size=4, classes=["tiger"])


def test_fedbn_tab1_paper_profile_states_the_papers_setup():
    groups = E.get("fedbn-tab1").config("paper")["groups"]
    assert groups["Office"]["data"]["train_per_domain"] == 62
    assert groups["DomainNet"]["data"]["train_per_domain"] == 105
    assert groups["DomainNet"]["data"]["classes"] == list(DOMAINNET_TOP10) and len(DOMAINNET_TOP10) == 10


def test_fixbn_tab2_momentum_readings(monkeypatch):
    from bnfl.experiments.papers.fixbn import noniid

    cfg = E.get("fixbn-tab2").config("paper")
    assert cfg["momentum_reading"] == "unstated" and noniid.T2_MOMENTUM == {"unstated": 0.0, "sec6": 0.9}
    assert cfg["base"]["data"]["size"] == 224
    seen = []

    class Stop(Exception):
        pass

    def record(ctx, spec):
        seen.append(spec["train"]["momentum"])
        raise Stop

    monkeypatch.setattr(noniid, "train_runs", record)
    for reading in ("unstated", "sec6"):
        with pytest.raises(Stop):
            noniid.compute_tab2(None, {**cfg, "momentum_reading": reading})
    assert seen == [0.0, 0.9]
    with pytest.raises(ValueError, match="momentum_reading"):
        noniid.compute_tab2(None, {**cfg, "momentum_reading": "0.9"})


def test_masks_ignore_void_in_loss_and_accuracy():
    torch.manual_seed(0)
    out = torch.randn(2, 4, 3, 3)
    y = torch.randint(0, 4, (2, 3, 3))
    assert torch.equal(_cross_entropy(out, y), torch.nn.functional.cross_entropy(out, y))  # no void: unchanged
    yv = y.clone()
    yv[0, 0] = 255
    keep = yv != 255
    logits = out.permute(0, 2, 3, 1)[keep]  # (kept pixels, C)
    assert torch.allclose(_cross_entropy(out, yv), torch.nn.functional.cross_entropy(logits, yv[keep]))

    class Fixed(torch.nn.Module):
        def forward(self, x):
            return out

    acc, loss = accuracy(Fixed(), torch.zeros(2, 1, 3, 3), yv)
    assert acc == pytest.approx(float((out.argmax(1)[keep] == yv[keep]).float().mean()))
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, yv[keep])), rel=1e-6)
    labels = torch.tensor([0, 255, 3])  # class labels: 255 is a class (ImageNet), never ignored
    with pytest.raises((IndexError, RuntimeError)):
        _cross_entropy(torch.randn(3, 4), labels)
