"""HBN Tables 1 and 5 with the paper profile, end to end on fake files of the standard layouts,
with their real configuration shrunk in scale only (:func:`bnfl.experiments.scale.shrink`): Table
1's eight columns with their real keys (the run that stopped with ``bnfl run: error: c``), Table 5's
five torchvision networks from their (fake) weights files (the run that crashed at ResNet-18).
VGG-11/19 run end to end with their convolutions as the paper's and their two hidden FC layers
at width :data:`VGG_HIDDEN` (torchvision's 4096 puts 103M of VGG-11's 133M parameters in one
layer: 75 s a run of this test on a busy CPU for the same wiring); the full-size networks are
built on the ``meta`` device (no memory, no initialisation) and checked against torchvision's
parameter counts and the paper profile's weights files. Table 5's runs read a fake CIFAR-100 of
:data:`TAB5_IMAGES` images (scale: the networks' cost is per image)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from bnfl import experiments as E
from bnfl import models
from bnfl.experiments.cache import RunCache
from bnfl.experiments.scale import scale_changes, shrink
from tests.paper_fakes import write_pretrained
from tests.test_hbn_paper_profile import _cifar_batch

torch.set_num_threads(1)


def _shrunk(eid: str) -> tuple[dict, dict]:
    paper = E.get(eid).config("paper")
    return paper, shrink(paper, rounds=1, clients=4)


@pytest.mark.slow  # 56 runs, 14 of them torchvision's ResNet-18 at 64x64
def test_hbn_tab1_paper_runs_end_to_end_shrunk_in_scale_only(paper_root):
    paper, small = _shrunk("hbn-tab1")
    r = E.run("hbn-tab1", profile="paper", data_root=paper_root, seeds=1, overrides=small, cache=RunCache(),
              batched="off")
    assert r.config == small  # what ran is the paper's configuration at a smaller scale
    assert r.series["columns"] == [f"{d} phi={p}" for d in ("CIFAR-10", "CIFAR-100") for p in (0.6, 0.3, 0.1)] + \
        ["Tiny-ImageNet phi=0.1", "Tiny-ImageNet phi=0.05"]
    reports = [row["accuracy"] for row in r.rows]
    assert reports == ["last"] * 7 + ["best"] * 7 + ["last-10 mean"] * 7
    last = {row["method"]: row for row in r.rows if row["accuracy"] == "last"}
    # cells read "mean ± sd" over seeds ("12.34 (1 seed)" here): the leading number is the series' mean
    assert all(float(str(last[k][c]).split()[0]) == pytest.approx(r.series["acc"][c][k], abs=0.01)
               for c in r.series["columns"] for k in last if r.series["acc"][c][k] == r.series["acc"][c][k])


def _planned(eid: str, config: dict, paper_root) -> dict[str, dict]:
    """The runs ``config`` asks for, by cache key (recorded, not trained: the dry run's cache)."""
    from bnfl.experiments.core import Context
    from bnfl.experiments.dryrun import PlanCache

    cache = PlanCache(str(paper_root))
    E.get(eid).compute(Context(profile="paper", seeds=[0], data_root=str(paper_root), cache=cache), config)
    return cache.keys


#: Width of VGG-11/19's two hidden FC layers in the end-to-end runs (the paper's: torchvision's 4096).
VGG_HIDDEN = 32
#: Training and test images of the fake CIFAR-100 Table 5's runs read (conftest's paper_root: 200, 100).
TAB5_IMAGES = (64, 32)
#: torchvision's vgg11_bn / vgg19_bn at 1000 classes (torchvision.models.vgg*_bn(), dropout kept as Identity).
TORCHVISION_PARAMS = {"VGG-11": 132_868_840, "VGG-19": 143_678_248}


def _root_and_config(net: str, small: dict, paper_root, tmp_path) -> tuple[dict, object]:
    """A data root that is ``paper_root`` but for a smaller fake CIFAR-100 (:data:`TAB5_IMAGES`: the
    networks are the paper's, their cost is per image), and ``small``; for VGG-11/19, ``small`` with
    the network's hidden FC width at :data:`VGG_HIDDEN` (its one change) and its weights file
    written at that width in the root."""
    name, extra = small["archs"][net]
    root = tmp_path / "root"
    (root / "pretrained").mkdir(parents=True)
    for item in paper_root.iterdir():
        if item.name not in ("pretrained", "cifar-100-python"):
            (root / item.name).symlink_to(item)
    (root / "cifar-100-python").mkdir()
    rng = np.random.default_rng(0)
    for part, n in zip(("train", "test"), TAB5_IMAGES, strict=True):
        _cifar_batch(root / "cifar-100-python" / part, n, 100, b"fine_labels", rng)
    narrow = net in TORCHVISION_PARAMS
    for item in (paper_root / "pretrained").iterdir():
        if not (narrow and item.stem == name):
            (root / "pretrained" / item.name).symlink_to(item)
    if not narrow:
        return small, root
    config = copy.deepcopy(small)
    config["archs"][net] = [name, {**extra, "model": {**extra.get("model", {}), "hidden": VGG_HIDDEN}}]
    assert scale_changes(small, config) == [("archs", net, 1, "model")]
    write_pretrained(root, (name,), options={name: {"hidden": VGG_HIDDEN}})
    return config, root


@pytest.mark.slow  # 4 runs of each network
@pytest.mark.parametrize("net", ["MobilenetV2", "ResNet-18", "ResNet-50", "VGG-11", "VGG-19"])
def test_hbn_tab5_paper_runs_end_to_end_with_each_network_and_its_weights(net, paper_root, tmp_path, monkeypatch):
    """Table 5 at the shrunken scale, one network per test: each runs exactly the runs the whole
    table asks for that network (the same run specs: real architecture, weights file, fresh norm
    layers for BN, GN and HBN, and BN from the file's norm entries). VGG's hidden FC layers are
    narrowed (:func:`_root_and_config`; full size: the next test)."""
    paper, small = _shrunk("hbn-tab5")
    small, root = _root_and_config(net, small, paper_root, tmp_path)
    # the whole table resolves its runs: every weights file must be there (conftest's paper_root has them)
    everything = _planned("hbn-tab5", small, root)
    mine = {k: v for k, v in everything.items() if v["spec"]["model"]["weights"].endswith(
        f"/{paper['archs'][net][0]}.pth")}
    assert len(mine) == 4 and len(everything) == 4 * len(paper["archs"])
    loads: list[tuple[str, bool]] = []
    real = models.load_pretrained

    def spy(model, path, *, norm_state=True):
        loads.append((str(path), norm_state))
        return real(model, path, norm_state=norm_state)

    monkeypatch.setattr(models, "load_pretrained", spy)  # what models.build calls
    cache = RunCache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = E.run("hbn-tab5", profile="paper", data_root=root, seeds=1, overrides={**small, "use": [net]},
                  cache=cache, batched="off")
    assert {cache.key(v) for v in mine.values()} == set(cache._memory)  # the table's runs of this network
    last = [row for row in r.rows if row["accuracy"] == "last"]
    assert [row["model"] for row in last] == [net]
    assert set(last[0]) == {"model", "+BN", "+GN", "+HBN", "+BN (pretrained norm)", "accuracy"}
    assert {p.rsplit("/", 1)[-1] for p, _ in loads} == {f"{paper['archs'][net][0]}.pth"}
    assert sorted(s for _, s in loads) == [False, False, False, True]  # BN, GN, HBN fresh; BN from the file


@pytest.mark.parametrize("net", list(TORCHVISION_PARAMS))
def test_hbn_tab5_full_size_vgg_is_torchvisions_and_takes_its_weights_file(net, paper_root):
    """What the end-to-end runs narrow, at full size on the ``meta`` device: the paper profile's four
    runs of ``net`` build torchvision's network (its parameter count at 1000 classes, the paper's 4096
    head), each with its norm kind loads the data root's weights file (keys and shapes checked as
    :func:`bnfl.models.load_pretrained` checks them), and a CIFAR-100 batch comes out as 100 logits."""
    from bnfl.methods import get

    paper, small = _shrunk("hbn-tab5")
    name = paper["archs"][net][0]
    runs = [v["spec"] for v in _planned("hbn-tab5", small, paper_root).values() if v["spec"]["model"]["name"] == name]
    assert len(runs) == 4 and all("hidden" not in s["model"] for s in runs)  # the default: torchvision's 4096
    with torch.device("meta"):
        full = models.build(name, num_classes=1000)
    assert sum(p.numel() for p in full.parameters()) == TORCHVISION_PARAMS[net]
    assert full.classifier[0].out_features == 4096 and full.classifier[3].out_features == 4096
    loads: list[tuple[str, bool]] = []
    for spec in runs:
        opts = {k: v for k, v in spec["model"].items() if k != "name"}
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # heads, fresh norm layers, copies onto meta (no-ops)
            model = models.build_for(name, (3, 32, 32), num_classes=100, norm=get(spec["method"]).norm, **opts)
            out = model.train()(torch.empty(2, 3, 32, 32))
        assert out.shape == (2, 100)
        loads.append((opts["weights"].rsplit("/", 1)[-1], opts.get("pretrained_norm", True)))
    assert sorted(loads) == [(f"{name}.pth", False)] * 3 + [(f"{name}.pth", True)]
