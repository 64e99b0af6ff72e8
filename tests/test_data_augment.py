"""Training-time augmentation (:mod:`bnfl.data.augment`, :mod:`bnfl.fl.augment`): crop and flip equal a
hand computation; draws are seeded by the batch's place in its client's stream; the sequential and
batched engines augment the same samples the same way; a run stays bitwise reproducible on CPU."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from bnfl import fl
from bnfl.data.augment import AUGMENTATIONS, CropFlip, black_value, crop_flip, draw_crop_flip
from bnfl.fl.augment import BatchAugmenter, augment_rows

SPEC = {"data": {"name": "digits", "form": "image"}, "model": {"name": "q_scnn"}, "method": "fedavg+bn",
        "rounds": 2, "seed": 3, "partition": {"kind": "dirichlet", "phi": 0.3, "num_clients": 4},
        "train": {"local_steps": 3, "lr": 0.05, "batch_size": 16, "momentum": 0.9, "dtype": "float64",
                  "progress": False, "augment": "cifar"}}


def test_crop_flip_equals_hand_computation():
    # one 1x2x3 image, padding 1 (fill -9), and a second image with its own offsets and flag
    a = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])  # (1, 2, 3)
    b = a + 10
    x = torch.stack([a, b])  # (2, 1, 2, 3)
    # padded a (fill -9):       image b's crop window (dy=0, dx=0), then flipped:
    #  -9 -9 -9 -9 -9             -9 -9 -9  -> flipped: -9 -9 -9
    #  -9  1  2  3 -9             -9 11 12  ->          12 11 -9
    #  -9  4  5  6 -9
    #  -9 -9 -9 -9 -9
    # image a: dy=2, dx=1, no flip -> rows 2..3, cols 1..3 of padded a: [4 5 6], [-9 -9 -9]
    out = crop_flip(x, torch.tensor([2, 0]), torch.tensor([1, 0]), torch.tensor([False, True]), padding=1,
                    fill=-9.0)
    expect = torch.tensor([[[[4.0, 5.0, 6.0], [-9.0, -9.0, -9.0]]],
                           [[[-9.0, -9.0, -9.0], [12.0, 11.0, -9.0]]]])
    assert torch.equal(out, expect)
    assert torch.equal(x[0], a)  # the input is left as it was


def test_crop_flip_equals_per_image_pad_crop_flip_on_a_seeded_batch():
    """The batch operation equals torchvision's per-image recipe written out (pad with the
    per-channel fill, slice the window, flip), for every image of a seeded batch."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, 5, 7, generator=g)
    fill = torch.tensor([-1.5, 0.25, 2.0])
    aug = AUGMENTATIONS["cifar"]
    dy, dx, flip = draw_crop_flip(6, aug, (11, 2, 0, 4))
    out = crop_flip(x, torch.from_numpy(dy), torch.from_numpy(dx), torch.from_numpy(flip), padding=4, fill=fill)
    for i in range(6):
        padded = fill.reshape(3, 1, 1).expand(3, 5 + 8, 7 + 8).clone()
        padded[:, 4:9, 4:11] = x[i]
        win = padded[:, dy[i]:dy[i] + 5, dx[i]:dx[i] + 7]
        assert torch.equal(out[i], win.flip(-1) if flip[i] else win)


def test_draws_are_seeded_and_cover_the_offsets():
    aug = CropFlip(4, True)
    one, again = draw_crop_flip(4000, aug, (0, 1, 2, 3)), draw_crop_flip(4000, aug, (0, 1, 2, 3))
    other = draw_crop_flip(4000, aug, (0, 1, 2, 4))
    for u, v in zip(one, again, strict=True):
        assert np.array_equal(u, v)
    assert not np.array_equal(one[0], other[0])
    assert set(one[0].tolist()) == set(range(9)) and set(one[1].tolist()) == set(range(9))
    assert 0.45 < one[2].mean() < 0.55
    assert not draw_crop_flip(50, CropFlip(0, False), (0,))[2].any()


def test_black_value_is_minus_mean_over_std():
    meta = {"mean": torch.tensor([0.5, 0.25]), "std": torch.tensor([0.25, 0.5])}
    assert torch.allclose(black_value(meta, 2), torch.tensor([-2.0, -0.5]))
    assert torch.equal(black_value({}, 3), torch.zeros(3))


def test_sequential_batches_are_the_drawn_samples_cropped_and_flipped():
    sim = fl.build(SPEC)
    c = 1
    ids = copy.deepcopy(sim).next_batch_ids(c)  # the ids the first draw will take
    x, _ = sim.next_batch(c)
    raw = sim.x_train[ids]
    dy, dx, flip = draw_crop_flip(len(ids), AUGMENTATIONS["cifar"], (SPEC["seed"], c, 0, 0))
    expect = crop_flip(raw, torch.from_numpy(dy), torch.from_numpy(dx), torch.from_numpy(flip), padding=4,
                       fill=sim.data.pad_value.to(raw.dtype))
    assert torch.equal(x, expect)
    assert not torch.equal(x, raw)


def _run(spec):
    sim = fl.build(spec)
    sim.run()
    return sim


def test_sequential_and_batched_engines_agree_with_augmentation():
    seq_spec = copy.deepcopy(SPEC)
    seq_spec["train"]["batched"] = "off"
    seq = _run(seq_spec)
    spec = copy.deepcopy(SPEC)
    spec["train"]["batched"] = "on"
    bat = _run(spec)
    assert bat.history.meta["batched"]["used"] and not seq.history.meta["batched"]["used"]
    for k, v in seq.global_state.items():
        assert torch.allclose(v.double(), bat.global_state[k].double(), atol=1e-10, rtol=0), k
    for a, b in zip(seq.history.column("train_loss"), bat.history.column("train_loss"), strict=True):
        assert abs(a - b) < 1e-10
    off = copy.deepcopy(SPEC)
    off["train"]["augment"] = "none"
    plain = _run(off)  # augmentation changes the run: the comparison above can fail
    assert any(not torch.allclose(v, plain.global_state[k]) for k, v in seq.global_state.items()
               if v.is_floating_point())


def test_augmented_run_is_bitwise_reproducible():
    spec = copy.deepcopy(SPEC)
    spec["train"]["dtype"] = "float32"
    a, b = _run(spec), _run(spec)
    assert a.history.without_time() == b.history.without_time()
    assert all(torch.equal(v, b.global_state[k]) for k, v in a.global_state.items())


def test_augment_rows_pads_and_leaves_unaugmented_blocks():
    aug = BatchAugmenter(CropFlip(4, True), seed=0, fill=torch.zeros(1))
    x = torch.randn(6, 1, 4, 4)
    out = augment_rows(x, [aug, None], [(0, 0, 0, 2), (1, 0, 0, 3)], 3)
    assert torch.equal(out[3:], x[3:])  # the block without augmentation
    assert torch.equal(out[:2], aug.augment(x[:2], (0, 0, 0, 2)))  # the real rows as the sequential engine


def test_bad_augmentation_settings_are_clear_errors():
    with pytest.raises(ValueError, match="augment must be one of"):
        fl.TrainConfig(augment="autoaugment")
    flat = copy.deepcopy(SPEC)
    flat["data"] = {"name": "digits", "form": "flat"}
    flat["model"] = {"name": "q_mlp_bn"}
    with pytest.raises(ValueError, match="needs image inputs"):
        fl.build(flat)
    seg = copy.deepcopy(SPEC)
    seg.update(data={"name": "digit_segmentation"}, model={"name": "q_fcn"}, partition={"kind": "by_domain"})
    with pytest.raises(ValueError, match="segmentation masks"):
        fl.build(seg)


def test_resumed_augmented_run_equals_the_uninterrupted_one(tmp_path):
    """The crops and flips follow the checkpointed batch cursors, so a resumed run continues exactly."""
    spec = copy.deepcopy(SPEC)
    spec["train"]["dtype"] = "float32"
    spec["rounds"] = 3
    whole = _run(spec)
    first = fl.build({**spec, "out": str(tmp_path)})
    first.run(stop_after=1)
    resumed = fl.build({**spec, "out": str(tmp_path)})
    resumed.run(resume=True)
    assert resumed.history.without_time() == whole.history.without_time()
    assert all(torch.equal(v, whole.global_state[k]) for k, v in resumed.global_state.items())
