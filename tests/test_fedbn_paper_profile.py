"""The paper profile of every FedBN training entry runs end to end on tiny fake files written in the
real formats (the FedBN release's digits partitions, ABIDE npz, Office/DomainNet class folders,
Morpho-MNIST IDX), with rounds and sizes overridden to tiny; and the paper profiles state the
paper's setup. On a GPU machine the same path runs with ``--device cuda``."""

from __future__ import annotations

import numpy as np
import pytest

from bnfl import experiments as E
from bnfl.data.fedbn_folders import DOMAINNET_TOP10
from bnfl.experiments.cache import RunCache
from bnfl.experiments.papers.fedbn import numbers as N
from tests.test_data_fedbn import write_abide, write_digit5, write_morpho

TINY_TRAIN = {"batch_size": 4, "eval_every": 1}
#: The digits CNN's own class, narrowed (the full one is 14M parameters; its layers are checked by fedbn-tab3).
_BASE = {"base": {"rounds": 1, "train": TINY_TRAIN, "model": {"channels": [4, 4, 8], "fc": [16, 8]}}, "epochs": 1}
#: Per-entry overrides: one round, short grids; Table 1's image groups on a small CNN at 32x32
#: (AlexNet-BN's path is the same and is exercised by fedtan-fig8's paper test).
OVERRIDES = {
    "fedbn-fig4": {**_BASE, "E": [1, 2], "fractions": [1.0, 0.5], "n": [1, 2], "c_epochs": 1, "c_batch": 2},
    "fedbn-tab14": {**_BASE, "fractions": [1.0, 0.5]},
    "fedbn-fig6": {},
    "fedbn-fig7": {**_BASE, "E": [1, 2]},
    "fedbn-tab13": {**_BASE, "B": ["4", "inf"], "E": [1]},
    "fedbn-fig8": {**_BASE, "B": ["4", "inf"], "E": [1]},
    "fedbn-tab15": {**_BASE, "sizes": [8, 4, 12, 6, 6]},
    "fedbn-tab16": {**_BASE, "sizes": [8, 4, 12, 6, 6]},
    "fedbn-tab1": {"groups": {
        "Office": {"data": {"size": 32, "train_per_domain": 3}, "model": {"name": "simple_cnn"}, "rounds": 1,
                   "train": TINY_TRAIN},
        "DomainNet": {"data": {"size": 32, "train_per_domain": 3}, "model": {"name": "simple_cnn"}, "rounds": 1,
                      "train": TINY_TRAIN},
        "ABIDE": {"rounds": 1, "train": TINY_TRAIN}}},
}
CACHE = RunCache()
TRAINING = [eid for eid in E.ids("fedbn") if E.get(eid).kind == "training"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("fedbn_data")
    write_digit5(root / "digit5", per_part=8, n_test=8)
    write_abide(root / "abide")
    write_morpho(root / "morpho_mnist")
    rng = np.random.default_rng(0)
    for name, domains in (("office_caltech10", ["amazon", "caltech", "dslr", "webcam"]),
                          ("domainnet", ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"])):
        # DomainNet: FedBN's ten classes (one image each) and a class the paper profile leaves out
        classes, per = (("bike", "cup"), 4) if name == "office_caltech10" else ((*DOMAINNET_TOP10, "aircraft_carrier"), 1)
        for d in domains:
            for c in classes:
                folder = root / name / d / c
                folder.mkdir(parents=True)
                for i in range(per):
                    Image.fromarray(rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


@pytest.mark.parametrize("eid", [*TRAINING, "fedbn-fig6"])
def test_fedbn_paper_profile_runs_end_to_end_on_real_formats(eid, data_root, tmp_path):
    r = E.run(eid, profile="paper", data_root=data_root, seeds=1, overrides=OVERRIDES.get(eid, _BASE), cache=CACHE,
              device="cpu", out=tmp_path)
    assert r.profile == "paper" and r.rows and r.claims
    assert (tmp_path / eid / "result.json").is_file()
    names = set(_data_names(r.config))  # every run really read the paper's data, not the embedded proxies
    assert names and names <= {"digit5", "office_caltech10", "domainnet", "abide"}
    E.save_figures(r, tmp_path)


def _data_names(config):
    if isinstance(config, dict):
        if isinstance(config.get("data"), dict) and "name" in config["data"]:
            yield config["data"]["name"]
        for v in config.values():
            yield from _data_names(v)


def test_fedbn_paper_profiles_are_the_papers_setup():
    base = E.get("fedbn-fig5").config("paper")["base"]
    assert base["data"] == {"name": "digit5", "fraction": 0.1} and base["model"]["name"] == "digit_cnn"
    t = base["train"]
    assert (t["batch_size"], t["lr"], t["local_steps"], t["local_unit"]) == (32, 0.01, 1, "epochs")
    assert base["rounds"] == N.ROUNDS_CODE == 100
    assert E.get("fedbn-fig5").default_seeds == {"smoke": 1, "quick": 10, "paper": 5}  # row 18: 10 seeds decide
    assert E.get("fedbn-tab1").default_seeds["paper"] == 5
    fig4 = E.get("fedbn-fig4").config("paper")
    assert fig4["E"] == [1, 4, 8, 16] and fig4["n"] == list(range(1, 11))
    assert fig4["fractions"] == [1.0, 0.6, 0.4, 0.2, 0.1, 0.05, 0.01]
    groups = E.get("fedbn-tab1").config("paper")["groups"]
    assert groups["Office"]["model"]["name"] == "alexnet_bn" and groups["Office"]["data"]["size"] == 256
    assert groups["ABIDE"]["train"]["batch_size"] == 100 and groups["ABIDE"]["rounds"] == 50
    assert E.get("fedbn-tab17").config("paper")["unseen"] == ["morpho:global", "morpho:local"]
    prox = E.get("fedbn-tab11")
    assert prox.config("quick")["base"]["partition"] == {"kind": "by_domain"}
