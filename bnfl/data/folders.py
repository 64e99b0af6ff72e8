"""Local-folder loader for FixBN's Cityscapes (Table 3); ImageNet-1K (Table 2) is in
:mod:`bnfl.data.imagenet_store` (memory maps, memory bounded independently of its size).

Cityscapes is read in its standard distribution layout; bnfl never downloads data. Images are
decoded once, resized and held in memory as a :class:`~bnfl.data.Split` (2975 training images at
the default 64x128 are 0.3 GB in float32; at the native 1024x2048, 75 GB).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from bnfl.data.datasets import Split
from bnfl.data.loaders import _finish, _load_image, _missing, _size

__all__ = ["CITYSCAPES_CLASSES", "IGNORE_INDEX", "cityscapes"]

#: The label of pixels no loss or score counts (Cityscapes' trainId convention for "void": every
#: label id outside the 19 evaluation classes). Only masks (labels of shape (N, H, W)) use it; class
#: labels have no ignored value (ImageNet's class 255 is a class).
IGNORE_INDEX = 255
#: The 19 Cityscapes evaluation classes, in trainId order.
CITYSCAPES_CLASSES: tuple[str, ...] = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign", "vegetation",
    "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle",
)
#: gtFine labelIds of the 19 evaluation classes, in trainId order (Cordts et al. 2016).
_EVAL_IDS = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33)
_CITY_LAYOUT = ("  <root>/leftImg8bit/{train,val}/<city>/<city>_<seq>_<frame>_leftImg8bit.png\n"
                "  <root>/gtFine/{train,val}/<city>/<city>_<seq>_<frame>_gtFine_labelIds.png")


def _label_lut() -> np.ndarray:
    lut = np.full(256, IGNORE_INDEX, dtype=np.int64)  # void
    for train_id, label_id in enumerate(_EVAL_IDS):
        lut[label_id] = train_id
    return lut


def _load_mask(path: Path, size: tuple[int, int]) -> np.ndarray:
    with Image.open(path) as im:
        if im.size != (size[1], size[0]):
            im = im.resize((size[1], size[0]), Image.NEAREST)  # labels: nearest neighbour
        return np.asarray(im, dtype=np.uint8)


def cityscapes(root: str | Path, *, size: int | tuple[int, int] = (64, 128), cities: Sequence[str] | None = None,
               max_per_city: int | None = None, standardize: bool = True) -> Split:
    """Cityscapes fine annotations: each training city is a domain (FixBN Table 3: a client).

    Labels are the 19 evaluation classes (trainIds 0-18); every other label id is "void",
    :data:`IGNORE_INDEX` (255, Cityscapes' trainId convention), which the loss
    (``ignore_index``), pixel accuracy and mean IoU leave out (``meta["ignore_index"]``). The test
    set is the ``val`` split (other cities: no per-client test sets).

    Parameters
    ----------
    root : path
        Folder with ``leftImg8bit/`` and ``gtFine/``.
    size : int or (height, width), default (64, 128)
        Images are resized bilinearly, masks by nearest neighbour. The native resolution is
        (1024, 2048); FixBN does not state its training resolution (its appendix is missing).
    cities : sequence of str, optional
        Training cities (domains), in this order; default every city folder, sorted.
    max_per_city : int, optional
        Keep at most this many images per training city.
    standardize : bool, default True
    """
    root = Path(root)
    hw = _size(size)
    lut = _label_lut()
    for sub in ("leftImg8bit/train", "leftImg8bit/val", "gtFine/train", "gtFine/val"):
        if not (root / sub).is_dir():
            raise _missing("Cityscapes", root / sub, _CITY_LAYOUT)

    def read(part: str, names: Sequence[str], cap: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xs, ys, ds = [], [], []
        for j, city in enumerate(names):
            folder = root / "leftImg8bit" / part / city
            if not folder.is_dir():
                raise _missing("Cityscapes", folder, _CITY_LAYOUT)
            files = sorted(folder.glob("*_leftImg8bit.png"))[:cap]
            for f in files:
                mask = root / "gtFine" / part / city / f.name.replace("_leftImg8bit.png", "_gtFine_labelIds.png")
                if not mask.is_file():
                    raise _missing("Cityscapes", mask, _CITY_LAYOUT)
                xs.append(_load_image(f, hw))
                ys.append(lut[_load_mask(mask, hw)])
                ds.append(j)
        if not xs:
            raise _missing("Cityscapes", root / "leftImg8bit" / part / "<city>/*_leftImg8bit.png", _CITY_LAYOUT)
        return np.stack(xs), np.stack(ys), np.array(ds)

    train_cities = sorted(p.name for p in (root / "leftImg8bit/train").iterdir() if p.is_dir()) if cities is None \
        else list(cities)
    val_cities = sorted(p.name for p in (root / "leftImg8bit/val").iterdir() if p.is_dir())
    xtr, ytr, dtr = read("train", train_cities, max_per_city)
    xte, yte, _ = read("val", val_cities, None)
    return _finish(xtr, ytr, xte, yte, classes=CITYSCAPES_CLASSES, name="Cityscapes", standardize=standardize,
                   domain_train=dtr, domains=train_cities,
                   meta={"root": str(root), "size": hw, "ignore_index": IGNORE_INDEX, "val_cities": val_cities})
