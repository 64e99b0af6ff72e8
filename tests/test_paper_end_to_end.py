"""HBN Tables 1 and 5 with the paper profile, end to end on fake files of the standard layouts,
with their real configuration shrunk in scale only (:func:`bnfl.experiments.scale.shrink`): Table
1's eight columns with their real keys (the run that stopped with ``bnfl run: error: c``), Table 5's
five torchvision networks from their (fake) weights files (the run that crashed at ResNet-18).
Slow: the networks are the papers' (VGG-19 has 144M parameters)."""

from __future__ import annotations

import warnings

import pytest
import torch

from bnfl import experiments as E
from bnfl import models
from bnfl.experiments.cache import RunCache
from bnfl.experiments.scale import shrink

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


@pytest.mark.slow  # 4 runs of each network (VGG-11/19: 133M / 144M parameters, ~30 s a run on a busy 2-core CPU)
@pytest.mark.parametrize("net", ["MobilenetV2", "ResNet-18", "ResNet-50", "VGG-11", "VGG-19"])
def test_hbn_tab5_paper_runs_end_to_end_with_each_network_and_its_weights(net, paper_root, monkeypatch):
    """Table 5 at the shrunken scale, one network per test: each runs exactly the runs the whole
    table asks for that network (the same run specs: real architecture, weights file, fresh norm
    layers for BN, GN and HBN, and BN from the file's norm entries)."""
    paper, small = _shrunk("hbn-tab5")
    # the whole table resolves its runs: every weights file must be there (conftest's paper_root has them)
    everything = _planned("hbn-tab5", small, paper_root)
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
        r = E.run("hbn-tab5", profile="paper", data_root=paper_root, seeds=1, overrides={**small, "use": [net]},
                  cache=cache, batched="off")
    assert {cache.key(v) for v in mine.values()} == set(cache._memory)  # the table's runs of this network
    last = [row for row in r.rows if row["accuracy"] == "last"]
    assert [row["model"] for row in last] == [net]
    assert set(last[0]) == {"model", "+BN", "+GN", "+HBN", "+BN (pretrained norm)", "accuracy"}
    assert {p.rsplit("/", 1)[-1] for p, _ in loads} == {f"{paper['archs'][net][0]}.pth"}
    assert sorted(s for _, s in loads) == [False, False, False, True]  # BN, GN, HBN fresh; BN from the file
