"""ImageNet on uint8 memory maps (:mod:`bnfl.data.imagenet_store`, :mod:`bnfl.data.stored`): the flat
validation folder with either standard labels file, memory that does not grow with the number of
images, and a simulation on stored pixels equal to one on the same pixels standardised in memory."""

from __future__ import annotations

import copy
import tracemalloc

import numpy as np
import pytest
import torch
from PIL import Image

from bnfl import fl
from bnfl.data import Split, imagenet, load, prepare_imagenet
from bnfl.data.imagenet_store import imagenet_layout, val_labels
from bnfl.data.stored import decode

WNIDS = ["n01440764", "n01443537", "n01484850"]


def _write(path, rgb, hw=(20, 28)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*hw, 3), rgb, dtype=np.uint8)).save(path)


def _train(root, per_class=3, hw=(20, 28)):
    for c, w in enumerate(WNIDS):
        for i in range(per_class):
            _write(root / "train" / w / f"{w}_{i}.JPEG", (40 * c, 10 * i, 200), hw)


def _flat_val(root):
    """Six flat validation images; image k has class k % 3 and red value 50 + 30 (k % 3)."""
    names = [f"ILSVRC2012_val_{k:08d}" for k in range(1, 7)]
    for k, n in enumerate(names):
        _write(root / "val" / f"{n}.JPEG", (50 + 30 * (k % 3), 0, 0))
    return names


def test_flat_val_with_loc_val_solution_csv(tmp_path):
    _train(tmp_path)
    names = _flat_val(tmp_path)
    rows = ["ImageId,PredictionString"] + [f"{n},{WNIDS[k % 3]} 1 2 3 4" for k, n in reversed(list(enumerate(names)))]
    (tmp_path / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    assert imagenet_layout(tmp_path, size=8) == {"classes": 3, "val": "flat + LOC_val_solution.csv", "store": None}
    s = imagenet(tmp_path, size=8)
    assert imagenet_layout(tmp_path, size=8)["store"] == tmp_path / "bnfl-store" / "8x8"
    assert s.x_train.dtype == torch.uint8 and s.x_train.shape == (9, 3, 8, 8) and s.x_test.shape == (6, 3, 8, 8)
    assert s.meta["stored"] == "uint8" and s.classes == tuple(WNIDS)
    assert s.y_test.tolist() == [0, 1, 2, 0, 1, 2]
    # JPEG is lossy: the red channel of a flat image stays near its value
    assert np.allclose(s.x_test[:, 0].float().mean((1, 2)).numpy(), [50, 80, 110, 50, 80, 110], atol=3)
    assert sorted(set(s.y_train.tolist())) == [0, 1, 2]
    store = tmp_path / "bnfl-store" / "8x8"
    stamp = (store / "train_x.npy").stat().st_mtime_ns
    again = load("imagenet", root=tmp_path, size=8)  # the registry's name; the store is reused
    assert (store / "train_x.npy").stat().st_mtime_ns == stamp and torch.equal(again.x_train, s.x_train)


def test_flat_val_with_the_devkit_ground_truth(tmp_path):
    from scipy.io import savemat

    _train(tmp_path, per_class=1)
    _flat_val(tmp_path)
    data = tmp_path / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    # the devkit numbers classes 1..1000 in its own order (not sorted wnids) and lists non-leaf synsets after them
    ids = {WNIDS[2]: 1, WNIDS[0]: 2, WNIDS[1]: 3}
    synsets = np.array([(i, w) for w, i in sorted(ids.items(), key=lambda t: t[1])] + [(1001, "n00001740")],
                       dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O")])
    savemat(data / "meta.mat", {"synsets": synsets})
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text(
        "\n".join(str(ids[WNIDS[k % 3]]) for k in range(6)) + "\n")
    assert imagenet_layout(tmp_path)["val"] == "flat + devkit"
    labels = val_labels(tmp_path)
    assert labels["ILSVRC2012_val_00000002.JPEG"] == WNIDS[1]
    s = imagenet(tmp_path, size=(6, 10), cache=tmp_path / "elsewhere", workers=2)  # decoded in 2 processes
    assert s.y_test.tolist() == [0, 1, 2, 0, 1, 2] and s.x_test.shape == (6, 3, 6, 10)
    assert (tmp_path / "elsewhere" / "6x10" / "meta.json").is_file()


def test_missing_labels_and_layouts_are_named(tmp_path):
    _train(tmp_path, per_class=1)
    _flat_val(tmp_path)
    with pytest.raises(FileNotFoundError, match="LOC_val_solution.csv"):
        imagenet(tmp_path, size=8)
    with pytest.raises(FileNotFoundError, match="LOC_val_solution.csv"):
        imagenet_layout(tmp_path)
    with pytest.raises(FileNotFoundError, match="train/<wnid>"):
        imagenet(tmp_path / "nothing")


def _peak_bytes(root, per_class, monkeypatch):
    from bnfl.data import imagenet_store

    monkeypatch.setattr(imagenet_store, "_FLUSH", 8)  # blocks of 8 decoded images (512 on real data)
    _train(root, per_class=per_class, hw=(64, 64))
    for w in WNIDS:
        _write(root / "val" / w / "v.JPEG", (1, 2, 3), (64, 64))
    tracemalloc.start()
    try:
        prepare_imagenet(root, size=48)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def test_preparing_the_store_takes_memory_independent_of_the_number_of_images(tmp_path, monkeypatch):
    """One 48x48 image is 6.9 kB; 4x the images (36 -> 144) would add 750 kB if they were held.
    What grows is one path while a class folder is listed and one label per image (< 100 bytes each)."""
    small = _peak_bytes(tmp_path / "small", 12, monkeypatch)
    large = _peak_bytes(tmp_path / "large", 48, monkeypatch)
    assert large - small < 60_000, (small, large)
    assert small < 2_000_000


SPEC = {"method": "fedavg+bn", "model": {"name": "q_scnn"}, "rounds": 2, "seed": 1,
        "partition": {"kind": "iid", "num_clients": 3},
        "train": {"local_steps": 2, "batch_size": 4, "lr": 0.05, "progress": False, "augment": "flip"}}


def test_training_on_stored_pixels_equals_training_on_them_standardised_in_memory(tmp_path):
    _train(tmp_path, per_class=4)
    for w in WNIDS:
        _write(tmp_path / "val" / w / "v.JPEG", (9, 9, 9))
    stored = imagenet(tmp_path, size=8)
    mean, std = stored.meta["mean"], stored.meta["std"]
    dense = Split(x_train=decode(stored.x_train, (mean, std), "cpu", torch.float32),
                  y_train=stored.y_train, x_test=decode(stored.x_test, (mean, std), "cpu", torch.float32),
                  y_test=stored.y_test, classes=stored.classes, name="dense", meta={"mean": mean, "std": std})
    spec = {**copy.deepcopy(SPEC), "data": {"name": "imagenet"}}
    a, b = fl.build(spec, split=stored), fl.build(spec, split=dense)
    assert a.x_train.dtype == torch.uint8 and b.x_train.dtype == torch.float32
    assert torch.equal(a.next_batch(0)[0], b.next_batch(0)[0])
    a, b = fl.build(spec, split=stored), fl.build(spec, split=dense)
    ha, hb = a.run(), b.run()
    assert ha.without_time()[-1]["test_acc"] == hb.without_time()[-1]["test_acc"]
    assert [r["train_loss"] for r in ha.rows] == [r["train_loss"] for r in hb.rows]
    assert all(torch.equal(v, b.global_state[k]) for k, v in a.global_state.items())
