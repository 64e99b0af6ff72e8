"""Loaders for the papers' data sets from a local folder, in their standard formats (no downloads).

=================== ====================================================================
loader              expected layout under ``root``
=================== ====================================================================
``cifar10``         ``cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch``
``cifar100``        ``cifar-100-python/train, test`` (fine labels; ``meta`` optional)
``mnist``           ``train-images-idx3-ubyte, train-labels-idx1-ubyte,
                    t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte`` (each may be ``.gz``),
                    directly in ``root`` or in ``root/MNIST/raw``
``tiny_imagenet``   ``tiny-imagenet-200/train/<wnid>/images/*.JPEG``,
                    ``tiny-imagenet-200/val/images/*.JPEG`` + ``val/val_annotations.txt``
``image_domains``   ``root/<domain>/<class>/*.jpg|jpeg|png|bmp`` (Office-Caltech10,
                    DomainNet, the FedBN digits folders, ...); with FedBN's split files
                    ``root/<domain>_train.pkl``, ``_test.pkl`` their split
                    (:mod:`bnfl.data.fedbn_folders`: ``office_caltech_10/``, ``DomainNet/``)
=================== ====================================================================

ImageNet-1K (uint8 memory maps, class-folder or flat validation) is
:mod:`bnfl.data.imagenet_store`; Cityscapes (``leftImg8bit/`` + ``gtFine/``, void = 255) is
:mod:`bnfl.data.folders`.

Every loader returns a :class:`~bnfl.data.Split` of float32 images ``(N, C, H, W)`` scaled to
[0, 1] and, with ``standardize=True`` (the default), standardised per channel with the
training set's mean and std (recorded in ``meta``). Missing files raise ``FileNotFoundError``
naming the expected layout. Images are decoded with Pillow (a matplotlib dependency).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bnfl.data import _safe_pickle as safe_pickle
from bnfl.data.datasets import Split, standardise
from bnfl.data.fedbn_folders import fedbn_split

__all__ = ["cifar10", "cifar100", "image_domains", "mnist", "read_idx", "tiny_imagenet"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


def _missing(what: str, path: Path, layout: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what}: {path} not found. Expected layout under the root folder:\n{layout}\n"
        "bnfl never downloads data; place the files there (standard distribution format)."
    )


def _finish(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    classes: Sequence[str],
    name: str,
    standardize: bool,
    domain_train: np.ndarray | None = None,
    domain_test: np.ndarray | None = None,
    domains: Sequence[str] = (),
    meta: dict | None = None,
) -> Split:
    """uint8 (N, C, H, W) arrays -> standardised float32 Split."""
    xtr = torch.from_numpy(np.ascontiguousarray(x_train)).to(torch.float32) / 255.0
    xte = torch.from_numpy(np.ascontiguousarray(x_test)).to(torch.float32) / 255.0
    meta = dict(meta or {})
    if standardize:
        xtr, xte, mean, std = standardise(xtr, xte, (0, 2, 3))
        meta.update(mean=mean.flatten(), std=std.flatten())
    return Split(
        x_train=xtr,
        y_train=torch.from_numpy(np.asarray(y_train, dtype=np.int64)),
        x_test=xte,
        y_test=torch.from_numpy(np.asarray(y_test, dtype=np.int64)),
        classes=tuple(classes),
        name=name,
        domain_train=None if domain_train is None else torch.from_numpy(domain_train.astype(np.int64)),
        domain_test=None if domain_test is None else torch.from_numpy(domain_test.astype(np.int64)),
        domains=tuple(domains),
        meta=meta,
    )


# ---------------------------------------------------------------------------------------- CIFAR


def _unpickle(path: Path) -> dict:
    # CIFAR's python batches are Python 2 pickles of numpy arrays and lists: read without running code
    d = safe_pickle.load(path, encoding="bytes")
    if not isinstance(d, dict):
        raise ValueError(f"{path} is not a CIFAR python batch (a pickled dict; got {type(d).__name__})")
    return d


def _cifar_batches(paths: Sequence[Path], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for p in paths:
        d = _unpickle(p)
        if b"data" not in d or label_key not in d:
            raise ValueError(f"{p} is not a CIFAR python batch (needs keys b'data' and {label_key!r})")
        data = np.asarray(d[b"data"], dtype=np.uint8)
        xs.append(data.reshape(-1, 3, 32, 32))  # (N, 3072) -> (N, 3, 32, 32), channel-major
        ys.append(np.asarray(d[label_key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


_CIFAR10_LAYOUT = "  cifar-10-batches-py/data_batch_1 ... data_batch_5, cifar-10-batches-py/test_batch"
_CIFAR100_LAYOUT = "  cifar-100-python/train, cifar-100-python/test (optional: cifar-100-python/meta)"


def cifar10(root: str | Path, *, standardize: bool = True) -> Split:
    """CIFAR-10 from the python pickle batches (50,000 train / 10,000 test, 3x32x32).

    Parameters
    ----------
    root : path
        Folder containing ``cifar-10-batches-py`` (or that folder itself).
    standardize : bool, default True
        Per-channel standardisation with training statistics.
    """
    root = Path(root)
    base = root if (root / "test_batch").exists() else root / "cifar-10-batches-py"
    files = [base / f"data_batch_{i}" for i in range(1, 6)] + [base / "test_batch"]
    for f in files:
        if not f.exists():
            raise _missing("CIFAR-10", f, _CIFAR10_LAYOUT)
    x_tr, y_tr = _cifar_batches(files[:5], b"labels")
    x_te, y_te = _cifar_batches(files[5:], b"labels")
    classes: Sequence[str] = [str(c) for c in range(10)]
    if (base / "batches.meta").exists():
        classes = [n.decode() for n in _unpickle(base / "batches.meta")[b"label_names"]]
    return _finish(x_tr, y_tr, x_te, y_te, classes=classes, name="CIFAR-10",
                   standardize=standardize, meta={"root": str(root)})


def cifar100(root: str | Path, *, standardize: bool = True) -> Split:
    """CIFAR-100 (fine labels) from ``cifar-100-python/train`` and ``test``."""
    root = Path(root)
    base = root if (root / "train").is_file() else root / "cifar-100-python"
    for f in (base / "train", base / "test"):
        if not f.exists():
            raise _missing("CIFAR-100", f, _CIFAR100_LAYOUT)
    x_tr, y_tr = _cifar_batches([base / "train"], b"fine_labels")
    x_te, y_te = _cifar_batches([base / "test"], b"fine_labels")
    classes: Sequence[str] = [str(c) for c in range(100)]
    if (base / "meta").exists():
        classes = [n.decode() for n in _unpickle(base / "meta")[b"fine_label_names"]]
    return _finish(x_tr, y_tr, x_te, y_te, classes=classes, name="CIFAR-100",
                   standardize=standardize, meta={"root": str(root)})


# ---------------------------------------------------------------------------------------- MNIST


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (``.gz`` allowed): magic ``0x0000 0x08 ndim`` (unsigned bytes), big-endian dims."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise ValueError(f"{path} is too short to be an IDX file")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(
            f"{path} is not an unsigned-byte IDX file (magic {raw[:4].hex()}, expected 0000 08 nn)"
        )
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims} but holds {data.size} values")
    return data.reshape(dims).copy()  # frombuffer is read-only


_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def mnist(root: str | Path, *, standardize: bool = True, flatten: bool = False) -> Split:
    """MNIST from the four IDX files (60,000 / 10,000, 1x28x28).

    Parameters
    ----------
    root : path
        Folder with the IDX files (plain or ``.gz``), or with ``MNIST/raw`` holding them.
    standardize : bool, default True
    flatten : bool, default False
        Return (N, 784) features (FedTAN's 784x30x10 DNN) instead of (N, 1, 28, 28).
    """
    root = Path(root)
    found = []
    for name in _MNIST_FILES:
        for base in (root, root / "MNIST" / "raw"):
            hit = next((base / (name + s) for s in ("", ".gz") if (base / (name + s)).exists()), None)
            if hit is not None:
                found.append(hit)
                break
        else:
            raise _missing("MNIST", root / name, "  " + ", ".join(_MNIST_FILES) + " (each may end in .gz)")
    x_tr, y_tr, x_te, y_te = (read_idx(p) for p in found)
    if x_tr.ndim != 3 or y_tr.ndim != 1 or x_tr.shape[0] != y_tr.shape[0]:
        raise ValueError(f"MNIST train images {x_tr.shape} and labels {y_tr.shape} do not match")
    if x_te.ndim != 3 or y_te.ndim != 1 or x_te.shape[0] != y_te.shape[0]:
        raise ValueError(f"MNIST test images {x_te.shape} and labels {y_te.shape} do not match")
    split = _finish(x_tr[:, None], y_tr, x_te[:, None], y_te, classes=[str(d) for d in range(10)],
                    name="MNIST", standardize=standardize, meta={"root": str(root)})
    if flatten:
        split.x_train = split.x_train.flatten(1)  # (N, 1, 28, 28) -> (N, 784)
        split.x_test = split.x_test.flatten(1)
    return split


# ---------------------------------------------------------------------------------------- images


def _load_image(path: Path, size: tuple[int, int]) -> np.ndarray:
    with Image.open(path) as im:
        im = im.convert("RGB")
        if im.size != (size[1], size[0]):
            im = im.resize((size[1], size[0]), Image.BILINEAR)
        return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)  # (H, W, 3) -> (3, H, W)


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _size(size: int | tuple[int, int]) -> tuple[int, int]:
    hw = (size, size) if isinstance(size, int) else tuple(size)
    if len(hw) != 2 or min(hw) < 1:
        raise ValueError(f"size must be a positive int or (height, width), got {size}")
    return int(hw[0]), int(hw[1])


_TINY_LAYOUT = ("  tiny-imagenet-200/train/<wnid>/images/*.JPEG\n"
                "  tiny-imagenet-200/val/images/*.JPEG and tiny-imagenet-200/val/val_annotations.txt")


def tiny_imagenet(
    root: str | Path,
    *,
    size: int | tuple[int, int] = 64,
    max_per_class: int | None = None,
    standardize: bool = True,
) -> Split:
    """Tiny-ImageNet-200 (100,000 train / 10,000 val used as test, 3x64x64).

    Classes are the sorted ``wnids.txt`` entries (or the sorted train folders). Full size in
    float32 is ~4.9 GB; ``max_per_class`` keeps the first n files (sorted by name) per class
    in train and in val.
    """
    root = Path(root)
    base = root if (root / "train").is_dir() else root / "tiny-imagenet-200"
    ann = base / "val" / "val_annotations.txt"
    if not (base / "train").is_dir():
        raise _missing("Tiny-ImageNet", base / "train", _TINY_LAYOUT)
    if not ann.exists():
        raise _missing("Tiny-ImageNet", ann, _TINY_LAYOUT)
    if (base / "wnids.txt").exists():
        wnids = sorted(w.strip() for w in (base / "wnids.txt").read_text().split() if w.strip())
    else:
        wnids = sorted(p.name for p in (base / "train").iterdir() if p.is_dir())
    index = {w: i for i, w in enumerate(wnids)}
    hw = _size(size)
    xs, ys = [], []
    for w in wnids:
        folder = base / "train" / w / "images"
        if not folder.is_dir():
            raise _missing("Tiny-ImageNet", folder, _TINY_LAYOUT)
        files = _image_files(folder)[:max_per_class]
        xs += [_load_image(p, hw) for p in files]
        ys += [index[w]] * len(files)
    vx, vy, per = [], [], dict.fromkeys(wnids, 0)
    for line in ann.read_text().splitlines():
        cols = line.split("\t")
        if len(cols) < 2:
            continue
        fname, w = cols[0], cols[1]
        if w not in index:
            raise ValueError(f"{ann}: {fname} has class {w!r}, which is not in the train classes")
        if max_per_class is not None and per[w] >= max_per_class:
            continue
        vx.append(_load_image(base / "val" / "images" / fname, hw))
        vy.append(index[w])
        per[w] += 1
    if not xs or not vx:
        raise _missing("Tiny-ImageNet", base, _TINY_LAYOUT)
    return _finish(np.stack(xs), np.array(ys), np.stack(vx), np.array(vy), classes=wnids,
                   name="Tiny-ImageNet", standardize=standardize, meta={"root": str(root), "size": hw})


def image_domains(
    root: str | Path,
    *,
    domains: Sequence[str] | None = None,
    size: int | tuple[int, int] = 32,
    test_fraction: float = 0.2,
    seed: int = 0,
    standardize: bool = True,
    name: str = "image-domains",
    classes: Sequence[str] | None = None,
    train_per_domain: int | None = None,
) -> Split:
    """Domain image folders ``root/<domain>/<class>/*.jpg|png`` (Office-Caltech10, DomainNet, ...).

    Classes are the sorted union of class folder names over the chosen domains. Each domain is
    split at random (``seed``) into train / test with ``test_fraction`` (at least one test
    image per domain); where FedBN's split files ``<root>/<domain>_train.pkl``, ``_test.pkl`` are
    there, they give the split instead (:mod:`bnfl.data.fedbn_folders`). Domain labels index into
    ``domains``. Only the images kept are decoded.

    Parameters
    ----------
    root : path
    domains : sequence of str, optional
        Sub-folders to use, in this order; default every sub-folder, sorted.
    size : int or (height, width), default 32
        Every image is converted to RGB and resized (bilinear) to this size.
    test_fraction : float, default 0.2
    seed : int, default 0
    standardize : bool, default True
    name : str, default "image-domains"
    classes : sequence of str, optional
        Class folders to use (e.g. FedBN's DomainNet top 10,
        :data:`bnfl.data.fedbn_folders.DOMAINNET_TOP10`); default every class folder. Sorted.
    train_per_domain : int, optional
        Keep the first this many training images of each domain (FedBN: 62 for Office-Caltech10,
        105 for DomainNet): in the split file's order, or of the seeded random split.
    """
    root = Path(root)
    layout = "  <root>/<domain>/<class>/*.jpg|jpeg|png|bmp"
    if not root.is_dir():
        raise _missing(name, root, layout)
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    names = sorted(p.name for p in root.iterdir() if p.is_dir()) if domains is None else list(domains)
    if not names:
        raise _missing(name, root / "<domain>", layout)
    for d in names:
        if not (root / d).is_dir():
            raise _missing(name, root / d, layout)
    found = sorted({c.name for d in names for c in (root / d).iterdir() if c.is_dir()})
    if classes is not None:
        absent = [c for c in classes if c not in found]
        if absent:
            raise _missing(name, root / names[0] / absent[0], layout)
        found = sorted(classes)
    classes = found
    if not classes:
        raise _missing(name, root / names[0] / "<class>", layout)
    hw = _size(size)
    out: dict[str, list] = {k: [] for k in ("xtr", "ytr", "dtr", "xte", "yte", "dte")}
    for j, d in enumerate(names):
        listed = fedbn_split(root, d, list(classes))
        if listed is None:
            items = [(p, ci) for ci, c in enumerate(classes) if (root / d / c).is_dir()
                     for p in _image_files(root / d / c)]
            if len(items) < 2:
                raise ValueError(f"domain {d!r} has {len(items)} images under {root / d}; need >= 2")
            perm = np.random.default_rng([int(seed), j]).permutation(len(items))
            n_test = min(len(items) - 1, max(1, int(round(test_fraction * len(items)))))
            listed = ([items[i] for i in perm[n_test:]], [items[i] for i in perm[:n_test]])
        train, test = listed
        if train_per_domain is not None:
            if len(train) < int(train_per_domain):
                raise ValueError(f"domain {d!r} has {len(train)} training images; train_per_domain = {train_per_domain}")
            train = train[: int(train_per_domain)]
        for part, chosen in (("te", test), ("tr", train)):
            out["x" + part] += [_load_image(p, hw) for p, _ in chosen]
            out["y" + part] += [c for _, c in chosen]
            out["d" + part] += [j] * len(chosen)
    return _finish(np.stack(out["xtr"]), np.array(out["ytr"]), np.stack(out["xte"]),
                   np.array(out["yte"]), classes=classes, name=name, standardize=standardize,
                   domain_train=np.array(out["dtr"]), domain_test=np.array(out["dte"]),
                   domains=names, meta={"root": str(root), "size": hw, "seed": seed,
                                        "train_per_domain": train_per_domain})
