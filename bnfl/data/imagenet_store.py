"""ImageNet-1K (FixBN Table 2) in memory bounded independently of the data set's size.

The first call decodes every image once, one at a time, into two uint8 memory maps at the chosen
resolution (``<cache>/<H>x<W>[-max<n>]/{train,val}_x.npy`` with labels and ``meta.json``); every
later call opens them in microseconds. The returned :class:`~bnfl.data.Split` holds *stored
pixels*: uint8 tensors backed by those files, never read as a whole. The simulation gathers a
mini-batch's rows from the file and standardises them on the device
(:func:`bnfl.data.stored.decode`); evaluation does the same per chunk. What a process holds is
the batch, the model and the pages the operating system caches (file-backed, so it drops them
under memory pressure), not the 1.28M images (193 GB as uint8 at 224x224, four times that as float32).

Resolution: the FixBN paper states none; ResNet-18 (He et al., 2016) is ImageNet's 224x224
network, so the paper profile stores 224x224: a training image's shorter side resized to 224 and
the centre crop kept; a validation image's shorter side resized to 256, centre crop 224 (the
standard evaluation transform). ``size=64`` gives the smaller store of earlier bnfl versions.

=============================== ================================================================
layout under ``root``           where it comes from
=============================== ================================================================
``train/<wnid>/*.JPEG``         ``ILSVRC2012_img_train.tar`` (its 1000 class tars unpacked)
``val/<wnid>/*.JPEG``           class folders (e.g. after torchvision's or the usual shell script)
``val/*.JPEG`` (flat) + labels  ``ILSVRC2012_img_val.tar`` as distributed, with either
                                ``LOC_val_solution.csv`` (Kaggle "ImageNet Object Localization
                                Challenge": ``ImageId,PredictionString``, the first token the
                                wnid) or the ILSVRC2012 devkit's
                                ``ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt``
                                (one ILSVRC2012_ID per line, in file-name order) with
                                ``.../data/meta.mat`` (ILSVRC2012_ID -> WNID); either file directly
                                in ``root`` also works
=============================== ================================================================
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from bnfl.data.datasets import Split
from bnfl.data.loaders import IMAGE_SUFFIXES, _missing, _size

__all__ = ["IMAGENET_LAYOUT", "imagenet", "imagenet_layout", "prepare_imagenet", "val_labels"]

IMAGENET_LAYOUT = ("  <root>/train/<wnid>/*.JPEG\n"
                   "  <root>/val/<wnid>/*.JPEG (class folders), or <root>/val/*.JPEG (flat, as distributed) with\n"
                   "  <root>/LOC_val_solution.csv or\n"
                   "  <root>/ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt + meta.mat")
_FLUSH = 512  # images decoded at a time (a block), then flushed to the memory maps


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _load(path: Path, hw: tuple[int, int], short: int) -> np.ndarray:
    """RGB image with its shorter side resized to ``short`` (bilinear), centre crop ``hw``: (3, H, W) uint8."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        scale = short / min(w, h)
        nw, nh = max(hw[1], round(w * scale)), max(hw[0], round(h * scale))
        im = im.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - hw[1]) // 2, (nh - hw[0]) // 2
        im = im.crop((left, top, left + hw[1], top + hw[0]))
        return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)  # (H, W, 3) -> (3, H, W)


def _devkit_files(root: Path) -> tuple[Path, Path] | None:
    for base in (root / "ILSVRC2012_devkit_t12" / "data", root / "data", root):
        gt, meta = base / "ILSVRC2012_validation_ground_truth.txt", base / "meta.mat"
        if gt.is_file() and meta.is_file():
            return gt, meta
    return None


def _devkit_wnids(meta: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> WNID from the devkit's ``meta.mat`` (its ``synsets`` struct array)."""
    from scipy.io import loadmat  # costly to import; only the devkit's meta.mat needs it

    synsets = loadmat(meta, squeeze_me=True)["synsets"]
    return {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in np.atleast_1d(synsets)}


def val_labels(root: str | Path) -> dict[str, str] | None:
    """File name -> wnid of the flat validation folder, from ``LOC_val_solution.csv`` or the devkit
    (None when neither is there). The devkit's ground truth lists one ILSVRC2012_ID per image, in
    the order of the file names (``ILSVRC2012_val_00000001.JPEG`` first)."""
    root = Path(root)
    solution = next((p for p in (root / "LOC_val_solution.csv", root / "val" / "LOC_val_solution.csv") if p.is_file()),
                    None)
    if solution is not None:
        out = {}
        with open(solution, newline="") as f:
            for row in csv.DictReader(f):
                out[row["ImageId"]] = row["PredictionString"].split()[0]
        return out
    devkit = _devkit_files(root)
    if devkit is None:
        return None
    gt, meta = devkit
    ids = [int(t) for t in gt.read_text().split()]
    wnid = _devkit_wnids(meta)
    names = [p.name for p in _files(root / "val")]
    if len(names) != len(ids):
        raise ValueError(f"{gt} lists {len(ids)} labels but {root / 'val'} holds {len(names)} images")
    return {n: wnid[i] for n, i in zip(names, ids, strict=True)}


def _val_items(root: Path, index: dict[str, int]) -> list[tuple[Path, int]]:
    val = root / "val"
    folders = sorted(p.name for p in val.iterdir() if p.is_dir())
    if folders:
        extra = [c for c in folders if c not in index]
        if extra:
            raise ValueError(f"ImageNet: val classes {extra[:5]} have no train folder under {root / 'train'}")
        return [(p, index[c]) for c in folders for p in _files(val / c)]
    labels = val_labels(root)
    if labels is None:
        raise _missing("ImageNet (labels of the flat val folder)", root / "LOC_val_solution.csv", IMAGENET_LAYOUT)
    items = []
    for p in _files(val):
        stem = p.stem
        w = labels.get(stem, labels.get(p.name))
        if w is None:
            raise ValueError(f"ImageNet: {p.name} has no label in the validation labels file")
        if w not in index:
            raise ValueError(f"ImageNet: {p.name} has class {w!r}, which has no train folder")
        items.append((p, index[w]))
    return items


def imagenet_layout(root: str | Path, *, size: int | tuple[int, int] = 224, max_per_class: int | None = None,
                    cache: str | Path | None = None) -> dict[str, object]:
    """What :func:`imagenet` would read under ``root``, without decoding anything (for a dry run).

    Returns ``{"classes": n, "val": "class folders" | "flat + LOC_val_solution.csv" | "flat + devkit",
    "store": path or None}`` (``store``: the finished memory maps, when a previous call made them).

    Raises
    ------
    FileNotFoundError
        A missing ``train/`` or ``val/`` folder or labels file, naming the expected layout.
    """
    root = Path(root)
    for part in ("train", "val"):
        if not (root / part).is_dir():
            raise _missing("ImageNet", root / part, IMAGENET_LAYOUT)
    classes = [p for p in (root / "train").iterdir() if p.is_dir()]
    if not classes:
        raise _missing("ImageNet", root / "train" / "<wnid>", IMAGENET_LAYOUT)
    if any(p.is_dir() for p in (root / "val").iterdir()):
        val = "class folders"
    elif any((d / "LOC_val_solution.csv").is_file() for d in (root, root / "val")):
        val = "flat + LOC_val_solution.csv"
    elif _devkit_files(root) is not None:
        val = "flat + devkit"
    else:
        raise _missing("ImageNet (labels of the flat val folder)", root / "LOC_val_solution.csv", IMAGENET_LAYOUT)
    hw = _size(size)
    tag = f"{hw[0]}x{hw[1]}" + (f"-max{max_per_class}" if max_per_class is not None else "")
    store = (Path(cache) if cache is not None else root / "bnfl-store") / tag
    done = (store / "meta.json").is_file() and json.loads((store / "meta.json").read_text()).get("complete")
    return {"classes": len(classes), "val": val, "store": store if done else None}


def _train_items(root: Path, classes: list[str], cap: int | None) -> Iterator[tuple[Path, int]]:
    for i, c in enumerate(classes):  # one class folder listed at a time
        for p in _files(root / "train" / c)[:cap]:
            yield p, i


def prepare_imagenet(root: str | Path, *, size: int | tuple[int, int] = 224, max_per_class: int | None = None,
                     cache: str | Path | None = None, workers: int = 0) -> Path:
    """Decode ImageNet once into uint8 memory maps; return their folder (reused when complete).

    Parameters
    ----------
    root : path
        The ImageNet folder (layouts in the module docstring).
    size : int or (height, width), default 224
    max_per_class : int, optional
        At most this many training images per class (sorted file order); validation is kept whole.
    cache : path, optional
        Where the store goes; default ``<root>/bnfl-store``. It takes ``N * 3 * H * W`` bytes.
    workers : int, default 0
        Processes that decode in parallel (0: this process). The whole of ImageNet at 224 px takes
        a few hours in one process.

    Memory: a block of 512 decoded images, the per-class file list and one label per image,
    whatever ``N``.
    """
    root = Path(root)
    for part in ("train", "val"):
        if not (root / part).is_dir():
            raise _missing("ImageNet", root / part, IMAGENET_LAYOUT)
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if not classes:
        raise _missing("ImageNet", root / "train" / "<wnid>", IMAGENET_LAYOUT)
    hw = _size(size)
    tag = f"{hw[0]}x{hw[1]}" + (f"-max{max_per_class}" if max_per_class is not None else "")
    out = Path(cache) if cache is not None else root / "bnfl-store"
    out = out / tag
    meta_path = out / "meta.json"
    if meta_path.is_file() and json.loads(meta_path.read_text()).get("complete"):
        return out
    out.mkdir(parents=True, exist_ok=True)
    index = {c: i for i, c in enumerate(classes)}
    counts = [len(_files(root / "train" / c)[:max_per_class]) for c in classes]
    val_items = _val_items(root, index)
    n_train = int(sum(counts))
    if n_train == 0 or not val_items:
        raise _missing("ImageNet", root / "train/<wnid>/*.JPEG", IMAGENET_LAYOUT)
    pool = None
    if workers > 0:
        import multiprocessing

        pool = multiprocessing.get_context("spawn").Pool(workers)
    try:
        _write_parts(root, out, classes, max_per_class, val_items, n_train, hw, tag, pool)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return out


def _write_parts(root: Path, out: Path, classes: list[str], max_per_class: int | None, val_items: list,
                 n_train: int, hw: tuple[int, int], tag: str, pool: Any) -> None:
    sums, sq = np.zeros(3), np.zeros(3)  # per channel, pixels in [0, 1] (float64)
    val_short = round(max(hw) * 256 / 224)  # the evaluation resize before the centre crop
    for part, n, items, short in (("train", n_train, _train_items(root, classes, max_per_class), max(hw)),
                                  ("val", len(val_items), iter(val_items), val_short)):
        x = np.lib.format.open_memmap(out / f"{part}_x.npy", mode="w+", dtype=np.uint8, shape=(n, 3, *hw))
        y = np.empty(n, dtype=np.int64)
        bar = tqdm(total=n, desc=f"ImageNet {part} -> {tag}", leave=False)
        j = 0
        for block in _blocks(items, _FLUSH):  # at most _FLUSH decoded images at a time
            args = [(path, hw, short) for path, _ in block]
            imgs = pool.map(_load_args, args) if pool is not None else [_load_args(a) for a in args]
            for img, (_, label) in zip(imgs, block, strict=True):
                x[j] = img
                y[j] = label
                if part == "train":
                    px = img.reshape(3, -1).astype(np.float64) / 255.0  # (3, H*W)
                    sums += px.sum(1)
                    sq += (px * px).sum(1)
                j += 1
            x.flush()
            bar.update(len(block))
        bar.close()
        x.flush()
        del x
        np.save(out / f"{part}_y.npy", y)
    count = n_train * hw[0] * hw[1]
    mean = sums / count
    std = np.sqrt(np.maximum(sq / count - mean**2, 0.0))
    meta = {"classes": classes, "size": list(hw), "n_train": n_train, "n_val": len(val_items), "mean": mean.tolist(),
            "std": std.tolist(), "root": str(root), "complete": True}
    (out / "meta.json").write_text(json.dumps(meta))  # last: a store without it is rebuilt


def _blocks(items: Iterator[tuple[Path, int]], size: int) -> Iterator[list[tuple[Path, int]]]:
    block: list[tuple[Path, int]] = []
    for item in items:
        block.append(item)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def _load_args(args: tuple[Path, tuple[int, int], int]) -> np.ndarray:
    return _load(*args)


def imagenet(root: str | Path, *, size: int | tuple[int, int] = 224, max_per_class: int | None = None,
             standardize: bool = True, cache: str | Path | None = None, workers: int = 0) -> Split:
    """ImageNet-1K as stored uint8 pixels backed by memory maps (:func:`prepare_imagenet` on first use).

    Parameters
    ----------
    root : path
        Folder with ``train/`` and ``val/`` (module docstring: class folders, or the flat validation
        folder with its labels file).
    size : int or (height, width), default 224
        Stored resolution (module docstring).
    max_per_class : int, optional
        Keep at most this many training images per class (sorted file order).
    standardize : bool, default True
        ``meta["mean"]``/``meta["std"]`` are the training set's per-channel statistics (the
        engine standardises each batch with them); False: 0 and 1 (pixels scaled to [0, 1]).
    cache : path, optional
        Folder of the store (default ``<root>/bnfl-store``).
    workers : int, default 0
        Decoding processes of the first call (:func:`prepare_imagenet`).

    Returns
    -------
    Split
        ``x_train`` (N, 3, H, W) and ``x_test`` (M, 3, H, W) uint8 tensors on memory maps
        (``meta["stored"] = "uint8"``); the labels in memory.
    """
    store = prepare_imagenet(root, size=size, max_per_class=max_per_class, cache=cache, workers=workers)
    meta = json.loads((store / "meta.json").read_text())
    arrays = {}
    for part in ("train", "val"):
        x = np.load(store / f"{part}_x.npy", mmap_mode="c")  # copy-on-write: read pages stay file-backed
        arrays[part] = (torch.from_numpy(x), torch.from_numpy(np.load(store / f"{part}_y.npy")))
    mean = torch.tensor(meta["mean"], dtype=torch.float32) if standardize else torch.zeros(3)
    std = torch.tensor(meta["std"], dtype=torch.float32) if standardize else torch.ones(3)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return Split(x_train=arrays["train"][0], y_train=arrays["train"][1], x_test=arrays["val"][0],
                 y_test=arrays["val"][1], classes=tuple(meta["classes"]), name="ImageNet",
                 meta={"root": str(root), "size": tuple(meta["size"]), "store": str(store), "stored": "uint8",
                       "mean": mean, "std": std})
