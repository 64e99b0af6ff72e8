"""A fake ``--data-root`` holding every paper-profile data set in its standard layout (tiny files),
written with the fake-file writers the loader and paper-profile tests already have, plus fake
pretrained weights files with the real architectures' state-dict keys and shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bnfl import models

#: HBN Table 5's weights files: file stem -> model options (torchvision's layouts, 1000 classes).
PRETRAINED = {"mobilenet_v2": {}, "resnet18": {"stem": "imagenet"}, "resnet50": {}, "vgg11": {}, "vgg19": {}}


def write_paper_root(root: Path) -> Path:
    """Every local data set of the paper profiles under ``root`` (see :mod:`bnfl.experiments.sources`)."""
    from tests.test_data_fedbn import write_abide, write_digit5, write_morpho
    from tests.test_data_loaders import _mnist_files
    from tests.test_fixbn_paper_profile import _cityscapes, _imagenet, _tiny_imagenet
    from tests.test_hbn_paper_profile import _cifar_batch

    rng = np.random.default_rng(0)
    c10 = root / "cifar-10-batches-py"
    c10.mkdir(parents=True)
    for i in range(1, 6):
        _cifar_batch(c10 / f"data_batch_{i}", 12, 10, b"labels", rng)
    _cifar_batch(c10 / "test_batch", 20, 10, b"labels", rng)
    c100 = root / "cifar-100-python"
    c100.mkdir()
    _cifar_batch(c100 / "train", 200, 100, b"fine_labels", rng)
    _cifar_batch(c100 / "test", 100, 100, b"fine_labels", rng)
    _mnist_files(root, gz=False)
    _tiny_imagenet(root, rng)
    _imagenet(root, rng)
    _cityscapes(root, rng)
    write_digit5(root / "digit5", per_part=8, n_test=8)
    write_abide(root / "abide")
    write_morpho(root / "morpho_mnist")
    from PIL import Image

    from bnfl.data.fedbn_folders import DOMAINNET_TOP10

    # enough images for the paper's truncation (FedBN App. D.3: 62 training images per Office
    # domain, 105 per DomainNet domain, after the 80/20 split) in DomainNet's ten classes
    for name, domains, classes, per_class in (
            ("office_caltech10", ["amazon", "caltech", "dslr", "webcam"], ("bike", "cup"), 40),
            ("domainnet", ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"], DOMAINNET_TOP10, 14)):
        for d in domains:
            for c in classes:
                folder = root / name / d / c
                folder.mkdir(parents=True)
                for i in range(per_class):
                    Image.fromarray(rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def torchvision_keys(name: str, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """bnfl's ResNet-18 names -> torchvision's (``norm1`` -> ``bn1``, ``stages.I`` -> ``layerI+1``,
    ``shortcut`` -> ``downsample``); the other four networks already use torchvision's names."""
    if name != "resnet18":
        return sd
    import re

    out = {}
    for k, v in sd.items():
        k = re.sub(r"^norm1\.", "bn1.", k)
        k = re.sub(r"^stages\.(\d)\.", lambda m: f"layer{int(m.group(1)) + 1}.", k)
        k = re.sub(r"\.norm(\d)\.", r".bn\1.", k)
        out[k.replace(".shortcut.", ".downsample.")] = v
    return out


def write_pretrained(root: Path, names=tuple(PRETRAINED), *, options: dict[str, dict] | None = None) -> None:
    """``root/pretrained/<name>.pth``: the real architecture's keys, shapes and dtypes at 1000
    classes (as torchvision's ImageNet files), in half precision, each tensor one constant
    broadcast to its shape (a stride-0 view of a one-element storage: ``torch.save`` writes the
    storage and the view, so the five files take kilobytes instead of 600 MB, and loading them
    reads the same keys, shapes and values; ``load_state_dict`` copies the broadcast values in).
    ``options``: extra model options per name (e.g. ``{"vgg11": {"hidden": 32}}``, a file for
    VGG-11 with a narrower head, as the model built with the same options takes)."""
    folder = root / "pretrained"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        opts = {**PRETRAINED[name], **(options or {}).get(name, {})}
        with torch.device("meta"):  # keys and shapes only: no initialisation cost
            shapes = {k: (v.shape, v.dtype) for k, v in models.build(name, num_classes=1000, **opts)
                      .state_dict().items()}
        sd = {}
        for k, (s, dt) in shapes.items():
            value = (1.0 if k.endswith("running_var") else 0.01) if dt.is_floating_point else 0
            sd[k] = torch.tensor([value], dtype=torch.half if dt.is_floating_point else dt).reshape(
                [1] * len(s)).expand(s)
        torch.save(torchvision_keys(name, sd), folder / f"{name}.pth")
