"""FedBN's own Office-Caltech10 / DomainNet folders (github.com/med-air/FedBN, ``utils/data_utils.py``).

The FedBN release keeps each benchmark in one folder, ``office_caltech_10/`` or ``DomainNet/``,
holding one folder per domain with one folder per class (``<domain>/<class>/<image>``) and, beside
them, the release's split files ``<domain>_train.pkl`` and ``<domain>_test.pkl``: each a pickled
pair ``(paths, class names)`` of equal length, the paths relative to the release's ``data/``
folder (``office_caltech_10/amazon/bike/frame_0001.jpg``). :func:`bnfl.data.image_domains` reads
such a folder with the release's own train/test split when the two files of a domain are there,
and falls back to its seeded random split otherwise; :data:`bnfl.data.DATASETS` finds the folder
under either bnfl's name (``office_caltech10``, ``domainnet``) or the release's.

The FedBN paper (App. D.3): "we choose top-10 class based on data amount from DomainNet"; the
release's list is :data:`DOMAINNET_TOP10`, Office-Caltech10's ten classes :data:`OFFICE_CLASSES`.
Each client keeps 62 (Office-Caltech10) or 105 (DomainNet) training images, "the smallest
dataset": the release takes the first half of the smallest domain's training list from every
domain, in file order (``fed_office.py``, ``fed_domainnet.py``).
"""

from __future__ import annotations

from pathlib import Path

from bnfl.data import _safe_pickle as safe_pickle

__all__ = ["DOMAINNET_TOP10", "OFFICE_CLASSES", "fedbn_split"]

#: DomainNet's ten classes in FedBN (``DomainNetDataset``'s label order).
DOMAINNET_TOP10: tuple[str, ...] = ("bird", "feather", "headphones", "ice_cream", "teapot", "tiger", "whale",
                                    "windmill", "wine_glass", "zebra")
#: Office-Caltech10's classes in FedBN (``OfficeDataset``'s label order; the folder names of the release).
OFFICE_CLASSES: tuple[str, ...] = ("back_pack", "bike", "calculator", "headphones", "keyboard", "laptop_computer",
                                   "monitor", "mouse", "mug", "projector")


def _resolve(root: Path, rel: str) -> Path:
    """A path of a split file: relative to the release's ``data/`` (the parent of ``root``), to
    ``root``, or to ``root`` without its first component."""
    parts = Path(rel).parts
    for cand in (root.parent / rel, root / rel, root.joinpath(*parts[1:]) if len(parts) > 1 else root / rel):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"{rel} (listed in a FedBN split file under {root}) is not under {root.parent} or {root}")


def fedbn_split(root: Path, domain: str, classes: list[str]) -> tuple[list, list] | None:
    """``(train, test)`` lists of ``(path, class index)`` from ``<root>/<domain>_{train,test}.pkl``, in
    file order, keeping the images of ``classes``; None when either file is absent."""
    files = [root / f"{domain}_{part}.pkl" for part in ("train", "test")]
    if not all(f.is_file() for f in files):
        return None
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for f in files:
        pair = safe_pickle.load(f)  # lists, strings and numpy arrays only: nothing in the file runs as code
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"{f}: a FedBN split file holds a pair (paths, class names), got {type(pair).__name__}")
        paths, labels = pair
        if len(paths) != len(labels):
            raise ValueError(f"{f}: {len(paths)} paths but {len(labels)} labels")
        out.append([(_resolve(root, str(p)), index[str(c)]) for p, c in zip(paths, labels, strict=True)
                    if str(c) in index])
    return out[0], out[1]
