"""FedBN's paper-scale data sets, read from a local folder (nothing is downloaded).

- :func:`digit5`: the digits benchmark (SVHN, USPS, SynthDigits, MNIST-M, MNIST), one domain per
  data set, from the partition files of the FedBN release (github.com/med-air/FedBN, its data link);
- :func:`abide`: ABIDE I connectome vectors of four sites (NYU, UM, USM, UCLA), one ``.npz`` per site;
- :func:`morpho_mnist`: the Morpho-MNIST perturbation test sets (global: thinning/thickening; local:
  swelling/fractures) in their released IDX format, FedBN's unseen-domain clients (App. G).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bnfl.data import _safe_pickle as safe_pickle
from bnfl.data.datasets import Split
from bnfl.data.loaders import _missing, read_idx

__all__ = ["ABIDE_SITES_I", "DIGIT5", "abide", "digit5", "morpho_mnist"]

#: The five digits data sets in the paper's column order, with their folders in the FedBN release.
DIGIT5: dict[str, str] = {"SVHN": "SVHN", "USPS": "USPS", "SynthDigits": "SynthDigits", "MNIST-M": "MNIST_M",
                          "MNIST": "MNIST"}
_DIGIT5_LAYOUT = ("  <root>/<SVHN|USPS|SynthDigits|MNIST_M|MNIST>/partitions/train_part0.pkl ... train_part9.pkl\n"
                  "  <root>/<...>/test.pkl\n"
                  "(each file a pickled (images uint8 (N, H, W[, 3]), labels) pair, as in the FedBN release: "
                  "github.com/med-air/FedBN, 'Dataset & Pretrained Model' link)")


def _pickled_pair(path: Path) -> tuple[np.ndarray, np.ndarray]:
    pair = safe_pickle.load(path)  # numpy arrays only: nothing in the file runs as code
    if not isinstance(pair, tuple | list) or len(pair) != 2:
        raise ValueError(f"{path}: expected a pickled (images, labels) pair, got {type(pair).__name__}")
    images, labels = pair
    return np.asarray(images), np.asarray(labels).astype(np.int64).reshape(-1)


def _to_rgb(images: np.ndarray, size: int) -> torch.Tensor:
    """uint8 (N, H, W) or (N, H, W, 3) -> float32 (N, 3, size, size) in [-1, 1] (the reference code's
    Grayscale(3), Resize, ToTensor, Normalize(0.5, 0.5); bilinear resizing)."""
    x = torch.from_numpy(np.ascontiguousarray(images)).to(torch.float32) / 255.0
    x = x.unsqueeze(1).expand(-1, 3, -1, -1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    if x.shape[-1] != size or x.shape[-2] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return ((x - 0.5) / 0.5).contiguous()


def digit5(root: str | Path, *, fraction: float = 0.1, domains: Sequence[str] = tuple(DIGIT5), size: int = 28,
           train_sizes: Sequence[int] | None = None) -> Split:
    """The FedBN digits benchmark: one domain (client) per data set.

    Parameters
    ----------
    root : path
        Folder with one sub-folder per data set, holding the FedBN release's partition files or,
        failing those, the data set's own files (MNIST IDX, SVHN and SynthDigits ``.mat``, USPS
        LIBSVM ``.bz2``, MNIST-M ``mnistm_data.pkl``), from which the release's partitions are
        rebuilt as its ``utils/data_preprocess.py`` does (layouts in the error of a missing file).
    fraction : float, default 0.1
        Share of the 7438 training digits each client holds (FedBN's default 10% = 743). As the
        reference code: ``fraction >= 0.1`` concatenates the first ``int(10 fraction)`` of the ten
        10% partitions; below 0.1 the head of partition 0.
    domains : sequence of str, default all five in the paper's order
        Names from :data:`DIGIT5`.
    size : int, default 28
        Images are resized to ``size x size``, grey images copied to 3 channels, scaled to [-1, 1].
    train_sizes : sequence of int, optional
        Keep the first ``train_sizes[j]`` training samples of domain ``j`` (unequal sizes).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    unknown = [d for d in domains if d not in DIGIT5]
    if unknown or not domains:
        raise ValueError(f"unknown digits data sets {unknown or list(domains)}; choose from {list(DIGIT5)}")
    if train_sizes is not None and len(train_sizes) != len(domains):
        raise ValueError(f"train_sizes must give one size per domain ({len(domains)}), got {list(train_sizes)}")
    root = Path(root)
    pieces = []
    for j, name in enumerate(domains):
        folder = root / DIGIT5[name]
        files = [folder / "partitions" / f"train_part{i}.pkl" for i in range(max(1, int(round(fraction * 10))))]
        absent = [p for p in [*files, folder / "test.pkl"] if not p.is_file()]
        if not absent:
            pairs = [_pickled_pair(p) for p in files]
            test = _pickled_pair(folder / "test.pkl")
        else:
            raw = _raw_partitions(folder, name)
            if raw is None:
                raise _missing(f"digit5 ({name})", absent[0], _DIGIT5_LAYOUT + "\nor the data set's own files:\n"
                               + _RAW_LAYOUT)
            pairs, test = raw[0][: len(files)], raw[1]
        x, y = np.concatenate([a for a, _ in pairs]), np.concatenate([b for _, b in pairs])
        if fraction < 0.1:
            keep = int(pairs[0][0].shape[0] * fraction * 10)
            x, y = x[:keep], y[:keep]
        if train_sizes is not None:
            x, y = x[: int(train_sizes[j])], y[: int(train_sizes[j])]
        xt, yt = test
        pieces.append((_to_rgb(x, size), y, _to_rgb(xt, size), yt))
    return Split.from_domains(pieces, domains=domains, classes=tuple(str(c) for c in range(10)), name="Digit-5",
                              meta={"fraction": fraction, "size": size, "normalize": "x/255, then (x-0.5)/0.5"})


# -- raw formats: rebuild the release's partitions from the data sets' own files --------------------
#: Raw files per data set (folder -> what the FedBN release was built from, utils/data_preprocess.py).
_RAW_LAYOUT = ("  MNIST/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]   (MNIST IDX)\n"
               "  SVHN/train_32x32.mat, test_32x32.mat                      (SVHN format 2)\n"
               "  USPS/usps.bz2, usps.t.bz2                                 (LIBSVM usps)\n"
               "  SynthDigits/synth_train_32x32.mat, synth_test_32x32.mat\n"
               "  MNIST_M/mnistm_data.pkl                                   (dict train/valid/test + *_label)")
_PART_LEN = 743.8  # the release's partition length: 7438 digits in ten parts (data_preprocess.split)


def _idx_file(folder: Path, stem: str) -> Path | None:
    return next((p for p in (folder / f"{stem}.gz", folder / stem) if p.is_file()), None)


def _mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    # costly to import; only the .mat files of the digit domains need it
    from scipy.io import loadmat

    m = loadmat(path)
    x = np.transpose(m["X"], (3, 0, 1, 2))  # (H, W, C, N) -> (N, H, W, C)
    y = m["y"].astype(np.int64).reshape(-1)
    return x, y


def _libsvm_usps(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import bz2

    with bz2.open(path, "rt") as f:
        rows = [line.split() for line in f if line.strip()]
    x = np.asarray([[float(t.split(":")[1]) for t in r[1:]] for r in rows], dtype=np.float32).reshape(-1, 16, 16)
    return ((x + 1) / 2 * 255).astype(np.uint8), np.asarray([int(r[0]) - 1 for r in rows], dtype=np.int64)


def _raw_pool(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """All samples (train and test pooled) of a data set's raw files, or None if they are absent."""
    if name == "MNIST":
        stems = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
        files = [_idx_file(folder, s) for s in stems]
        if any(f is None for f in files):
            return None
        a, b, c, d = (read_idx(f) for f in files)
        return np.concatenate([a, c]), np.concatenate([b, d]).astype(np.int64)
    if name in ("SVHN", "SynthDigits"):
        pre = "" if name == "SVHN" else "synth_"
        tr, te = folder / f"{pre}train_32x32.mat", folder / f"{pre}test_32x32.mat"
        if not (tr.is_file() and te.is_file()):
            return None
        (a, b), (c, d) = _mat(tr), _mat(te)
        y = np.concatenate([b, d])
        if name == "SVHN":
            y[y == 10] = 0  # SVHN labels the digit 0 as 10
        return np.concatenate([a, c]), y
    if name == "USPS":
        tr, te = folder / "usps.bz2", folder / "usps.t.bz2"
        if not (tr.is_file() and te.is_file()):
            return None
        (a, b), (c, d) = _libsvm_usps(tr), _libsvm_usps(te)
        return np.concatenate([a, c]), np.concatenate([b, d])
    path = folder / "mnistm_data.pkl"  # MNIST-M
    if not path.is_file():
        return None
    data = safe_pickle.load(path, encoding="latin1")  # numpy arrays only: nothing in the file runs as code
    keys = ("train", "valid", "test")
    return (np.concatenate([np.asarray(data[k]) for k in keys]),
            np.concatenate([np.asarray(data[f"{k}_label"]) for k in keys]).astype(np.int64).reshape(-1))


def _raw_partitions(folder: Path, name: str) -> tuple[list[tuple[np.ndarray, np.ndarray]], tuple] | None:
    """The release's ten training partitions and test set rebuilt from raw files: pooled train+test,
    a stratified 80/20 split (scikit-learn, ``random_state=0``), training parts of 743.8 samples."""
    pooled = _raw_pool(folder, name)
    if pooled is None:
        return None
    # seconds to import; only this split needs it
    from sklearn.model_selection import StratifiedShuffleSplit

    x, y = pooled
    tr, te = next(StratifiedShuffleSplit(n_splits=1, test_size=0.2, random_state=0).split(x, y))
    xt, yt = x[tr], y[tr]
    parts = [(xt[int(_PART_LEN * i):int(_PART_LEN * (i + 1))], yt[int(_PART_LEN * i):int(_PART_LEN * (i + 1))])
             for i in range(10)]
    return parts, (x[te], y[te])


#: ABIDE I sites of FedBN Table 1.
ABIDE_SITES_I: tuple[str, ...] = ("NYU", "USM", "UM", "UCLA")
_ABIDE_LAYOUT = ("  <root>/NYU.npz, USM.npz, UM.npz, UCLA.npz\n"
                 "(each with arrays x: (n, d) float connectome vectors, e.g. d = 5995 as in FedBN, and y: (n,) "
                 "0 = control, 1 = ASD; the preprocessed ABIDE I data come from the Preprocessed Connectomes "
                 "Project, preprocessed-connectomes-project.org/abide)")


def abide(root: str | Path, *, sites: Sequence[str] = ABIDE_SITES_I, test_fraction: float = 0.2,
          seed: int = 0) -> Split:
    """ABIDE I, one client per site (FedBN Table 1): connectome vectors and ASD labels.

    Every site is split ``1 - test_fraction`` / ``test_fraction`` at random (``seed``). Features are
    used as stored (no standardisation: the site shift is the point).
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    pieces = []
    dim = None
    for site in sites:
        path = root / f"{site}.npz"
        if not path.is_file():
            raise _missing(f"abide ({site})", path, _ABIDE_LAYOUT)
        with np.load(path) as f:
            x, y = np.asarray(f["x"], dtype=np.float32), np.asarray(f["y"]).astype(np.int64).reshape(-1)
        if x.ndim != 2 or x.shape[0] != y.size:
            raise ValueError(f"{path}: x must be (n, d) with one label per row, got x {x.shape}, y {y.shape}")
        if dim is not None and x.shape[1] != dim:
            raise ValueError(f"{path}: {x.shape[1]} features, other sites have {dim}")
        if not set(np.unique(y).tolist()) <= {0, 1} or not np.isfinite(x).all():
            raise ValueError(f"{path}: labels must be 0/1 and features finite")
        dim = x.shape[1]
        perm = rng.permutation(y.size)
        n_test = max(1, int(round(test_fraction * y.size)))
        tr, te = perm[n_test:], perm[:n_test]
        pieces.append((x[tr], y[tr], x[te], y[te]))
    return Split.from_domains(pieces, domains=sites, classes=("HC", "ASD"), name="ABIDE I",
                              meta={"seed": seed, "test_fraction": test_fraction})


_MORPHO_LAYOUT = ("  <root>/global/t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz  (thinning/thickening)\n"
                  "  <root>/local/t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz   (swelling/fractures)\n"
                  "(the Morpho-MNIST release, github.com/dccastro/Morpho-MNIST; .gz optional)")


def morpho_mnist(root: str | Path, style: str, *, size: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    """One Morpho-MNIST perturbation test set (``style`` "global" or "local") as ``(x, y)``: images
    (N, 3, size, size) in [-1, 1], normalised as :func:`digit5`'s MNIST (FedBN App. G's unseen clients)."""
    if style not in ("global", "local"):
        raise ValueError(f"style must be 'global' or 'local', got {style!r}")
    folder = Path(root) / style
    found = []
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        cands = [folder / (stem + ext) for ext in (".gz", "")]
        path = next((p for p in cands if p.is_file()), None)
        if path is None:
            raise _missing(f"morpho_mnist ({style})", cands[0], _MORPHO_LAYOUT)
        found.append(read_idx(path))
    images, labels = found
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{folder}: {images.shape[0]} images but {labels.shape[0]} labels")
    return _to_rgb(images, size), torch.from_numpy(labels.astype(np.int64))
