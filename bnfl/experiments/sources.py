"""Where each local data set of the paper profiles sits under ``--data-root`` and where it comes from.

One line per data set, shared by ``bnfl run --dry-run`` (its "missing" lines) and the GPU users'
page of the docs (``docs/gpu.md``). bnfl never downloads data: the user places the files. The
layouts are those the loaders of :mod:`bnfl.data` read (the loader is the final judge: the dry
run loads every data set it needs, and a loader's own error names the first file it lacked).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SOURCES", "Source", "source"]


@dataclass(frozen=True)
class Source:
    """A local data set: ``layout`` (paths under the data root) and ``origin`` (where to get it)."""

    name: str
    layout: str
    origin: str


SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("cifar10", "cifar-10-batches-py/{data_batch_1..data_batch_5, test_batch}",
           "the 'CIFAR-10 python version' archive, https://www.cs.toronto.edu/~kriz/cifar.html"),
    Source("cifar100", "cifar-100-python/{train, test} (meta optional)",
           "the 'CIFAR-100 python version' archive, https://www.cs.toronto.edu/~kriz/cifar.html"),
    Source("mnist", "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (in the root or MNIST/raw/)",
           "the MNIST IDX files (e.g. as torchvision's MNIST/raw folder)"),
    Source("tiny_imagenet", "tiny-imagenet-200/{wnids.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG, "
           "val/val_annotations.txt}", "http://cs231n.stanford.edu/tiny-imagenet-200.zip (unzipped)"),
    Source("imagenet", "imagenet/{train,val}/<wnid>/*.JPEG",
           "ImageNet-1K (ILSVRC2012) from https://image-net.org (registration), train and val images"),
    Source("cityscapes", "cityscapes/{leftImg8bit,gtFine}/{train,val}/<city>/*_{leftImg8bit,gtFine_labelIds}.png",
           "leftImg8bit_trainvaltest.zip and gtFine_trainvaltest.zip from https://www.cityscapes-dataset.com "
           "(registration)"),
    Source("office_caltech10", "office_caltech10/{amazon,caltech,dslr,webcam}/<class>/*.jpg",
           "Office-Caltech10 as released with FedBN (github.com/med-air/FedBN, 'Dataset' link)"),
    Source("domainnet", "domainnet/{clipart,infograph,painting,quickdraw,real,sketch}/<class>/*.jpg",
           "DomainNet, http://ai.bu.edu/M3SDA/ (the cleaned version), one folder per domain"),
    Source("digit5", "digit5/{MNIST,SVHN,USPS,SynthDigits,MNIST_M}/{partitions/train_part0..9.pkl, test.pkl}",
           "the FedBN release's digits partitions (github.com/med-air/FedBN, 'Dataset & Pretrained Model' link)"),
    Source("abide", "abide/{NYU,USM,UM,UCLA}.npz (arrays x, y)",
           "ABIDE I connectomes from the Preprocessed Connectomes Project, preprocessed-connectomes-project.org/abide"),
    Source("morpho_mnist", "morpho_mnist/{global,local}/t10k-{images-idx3,labels-idx1}-ubyte[.gz]",
           "the Morpho-MNIST release, github.com/dccastro/Morpho-MNIST"),
    Source("image_domains", "<folder>/<domain>/<class>/<image>", "any folder of domain and class folders"),
    Source("pretrained", "pretrained/<model>.pth (mobilenet_v2, resnet18, resnet50, vgg11, vgg19)",
           "torchvision's ImageNet state_dict files (e.g. resnet18-f37072fd.pth), renamed; nothing is downloaded"),
)}


def source(name: str) -> Source:
    """The :class:`Source` of data set ``name`` (a plain one for a name without an entry)."""
    return SOURCES.get(name, Source(name, f"see bnfl.data's loader of {name}", "(no source recorded)"))
