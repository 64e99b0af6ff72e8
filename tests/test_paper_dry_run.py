"""The paper profile as a GPU user runs it: every entry dry-runs on fake files of the standard layouts
(``bnfl run <id> --profile paper --dry-run``), a missing data set is one line naming it, the scale
knob (:func:`bnfl.experiments.scale.shrink`) changes scale only, and HBN's paper-profile fixes
(Table 1's column keys, torchvision's ResNet-18, best / last-10 reports). The end-to-end runs of
HBN Tables 1 and 5: tests/test_paper_end_to_end.py."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from bnfl import experiments as E
from bnfl import models
from bnfl.cli import main
from bnfl.experiments.dryrun import dry_run
from bnfl.experiments.scale import SCALE_KEYS, scale_changes, shrink
from bnfl.experiments.sources import SOURCES

torch.set_num_threads(1)

#: The two entries whose dry run builds torchvision's five networks with their weights files (VGG-11/19: 133M/144M
#: parameters; on the meta device with time_steps=0, 13 s -> 5 s of hbn-fig7 on a busy 2-core CPU).
_HEAVY = {"hbn-tab5", "hbn-fig7"}
IDS = [pytest.param(e, marks=pytest.mark.slow) if e in _HEAVY else e for e in E.ids()]


def _shrunk(eid: str) -> tuple[dict, dict]:
    paper = E.get(eid).config("paper")
    return paper, shrink(paper, rounds=1, clients=4)


# ------------------------------------------------------------------------------ the dry run
@pytest.mark.parametrize("eid", IDS)
def test_every_paper_entry_dry_runs_on_the_standard_layouts(eid, paper_root, monkeypatch):
    from bnfl.fl.engine import Simulation

    def no_training(*a, **k):
        raise AssertionError("a dry run trained")

    monkeypatch.setattr(Simulation, "run", no_training)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pretrained heads / fresh norm layers
        plan = dry_run(eid, profile="paper", data_root=str(paper_root), seeds=1, time_steps=0)
    assert plan.ok, "\n".join(plan.lines())
    if plan.pending:  # ImageNet before its one-time decode: checked, not planned; decoded, it plans
        from bnfl.experiments.dryrun import _data_specs
        from bnfl.experiments.training import load_data

        assert not plan.runs and any("imagenet" in line and "not decoded yet" in line for line in plan.lines())
        for d in _data_specs(E.get(eid).config("paper")):
            if d["name"] == "imagenet":
                load_data(d, data_root=str(paper_root))  # the decode a first run does (tiny fake files)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            plan = dry_run(eid, profile="paper", data_root=str(paper_root), seeds=1, time_steps=0)
        assert plan.ok and not plan.pending, "\n".join(plan.lines())
    if E.get(eid).kind == "training":
        assert plan.runs and plan.models and plan.steps > 0
        assert {r["seed"] for r in plan.runs} == {0}
        assert any(line.startswith("  runs ") for line in plan.lines())
    else:
        assert not plan.runs and "trains nothing" in plan.lines()[0]


def test_dry_run_names_each_missing_data_set_with_its_layout_and_source(tmp_path, paper_root):
    plan = dry_run("hbn-tab1", profile="paper", data_root=str(tmp_path), seeds=1)
    assert not plan.ok and not plan.runs
    assert [m.split(":")[0] for m in plan.missing] == ["cifar10", "cifar100", "tiny_imagenet"]
    for line, name in zip(plan.missing, ("cifar10", "cifar100", "tiny_imagenet"), strict=True):
        assert SOURCES[name].layout in line and SOURCES[name].origin in line and "\n" not in line
    (tmp_path / "cifar-10-batches-py").symlink_to(paper_root / "cifar-10-batches-py")
    plan = dry_run("hbn-tab1", profile="paper", data_root=str(tmp_path), seeds=1)
    assert [m.split(":")[0] for m in plan.missing] == ["cifar100", "tiny_imagenet"]
    plan = dry_run("hbn-tab1", profile="paper", data_root=None, seeds=1)
    assert all("no --data-root" in m for m in plan.missing)


def test_dry_run_names_a_data_set_in_the_wrong_format_in_one_line(tmp_path):
    import pickle

    (tmp_path / "cifar-100-python").mkdir()
    for part in ("train", "test"):  # CIFAR-100 batches without their fine_labels
        with open(tmp_path / "cifar-100-python" / part, "wb") as f:
            pickle.dump({b"data": torch.zeros(2, 3072, dtype=torch.uint8).numpy()}, f)
    plan = dry_run("hbn-tab2", profile="paper", data_root=str(tmp_path), seeds=1)
    assert not plan.ok and len(plan.missing) == 1
    assert plan.missing[0].startswith("cifar100: unreadable") and "fine_labels" in plan.missing[0]


def test_dry_run_names_a_missing_pretrained_weights_file(paper_root, tmp_path):
    for item in paper_root.iterdir():
        if item.name != "pretrained":
            (tmp_path / item.name).symlink_to(item)
    plan = dry_run("hbn-tab5", profile="paper", data_root=str(tmp_path), seeds=1, time_steps=0)
    assert not plan.ok and plan.missing[0].startswith("pretrained:") and "mobilenet_v2.pth" in plan.missing[0]


def test_dry_run_estimates_the_time_from_a_timed_step(paper_root):
    plan = dry_run("hbn-fig5", profile="paper", data_root=str(paper_root), seeds=1, time_steps=1)
    assert plan.ok and plan.estimate_s is not None and plan.estimate_s > 0
    assert all(m.step_s is not None and m.step_s > 0 for m in plan.models)
    assert plan.images >= plan.steps > 0
    assert re.search(r"estimate [\d.]+ (s|min|h) on cpu", "\n".join(plan.lines()))


def test_dry_run_plans_every_seed(paper_root):
    one, two = (dry_run("fedtan-fig4", profile="paper", data_root=str(paper_root), seeds=n, time_steps=0) for n in (1, 2))
    assert len(two.runs) == 2 * len(one.runs) and {r["seed"] for r in two.runs} == {0, 1}
    assert two.steps == 2 * one.steps


def test_cli_dry_run_exit_codes(paper_root, tmp_path, capsys):
    assert main(["run", "hbn-fig5", "--profile", "paper", "--data-root", str(paper_root), "--dry-run",
                 "--seeds", "1"]) == 0
    assert "estimate" in capsys.readouterr().out
    assert main(["run", "hbn-tab1", "--profile", "paper", "--data-root", str(tmp_path), "--dry-run"]) == 1
    out = capsys.readouterr()
    assert out.out.count("MISSING") == 3 and "hbn-tab1" in out.err
    assert main(["reproduce", "--only", "fedtan-tab3", "hbn-tab1", "--profile", "paper", "--data-root",
                 str(tmp_path), "--dry-run"]) == 1
    assert "1 of 2 entries" in capsys.readouterr().err
    assert main(["run", "no-such-entry", "--dry-run"]) == 2
    assert "no experiment 'no-such-entry'" in capsys.readouterr().err


def test_cli_reports_only_a_real_unknown_id_as_unknown(monkeypatch, capsys):
    """An entry's own KeyError (hbn-tab1 printed ``bnfl run: error: c``) propagates as itself."""
    import dataclasses

    from bnfl.experiments import registry

    def broken(ctx, config):
        raise KeyError("c")

    entry = registry.get("fedtan-tab3")
    monkeypatch.setitem(registry.EXPERIMENTS._entries, "fedtan-tab3", dataclasses.replace(entry, compute=broken))
    with pytest.raises(KeyError, match="c"):
        main(["run", "fedtan-tab3", "--out", "/nonexistent-bnfl-out", "--force"])
    assert "error: c" not in capsys.readouterr().err


# ------------------------------------------------------------------------------ the scale knob
def test_shrink_changes_scale_only_for_every_paper_entry():
    for eid in E.ids():
        paper, small = _shrunk(eid)
        changed = scale_changes(paper, small)
        assert all(p[-1] in SCALE_KEYS for p in changed), (eid, changed)
        assert shrink(small, rounds=1, clients=4) == small
    paper, small = _shrunk("hbn-tab1")
    assert small["base_tiny"]["rounds"] == 1 and small["base_tiny"]["partition"]["num_clients"] == 4
    assert small["columns"] == paper["columns"] and small["base_tiny"]["model"] == paper["base_tiny"]["model"]
    with pytest.raises(ValueError, match="clients"):
        shrink(paper, clients=1)


def test_hbn_paper_column_keys_name_three_data_sets():
    cfg = E.get("hbn-tab1").config("paper")
    keys = [k for k, _ in cfg["columns"]]
    assert keys == ["c10"] * 3 + ["c100"] * 3 + ["tiny"] * 2
    assert all(f"base_{k}" in cfg and f"lr_{k}" in cfg and k in cfg["names"] for k in keys)


def test_hbn_resnet18_is_torchvisions_for_tiny_imagenet_and_table5():
    """HBN's code uses torchvision's ResNet-18: 11,689,512 parameters at 1000 classes; a head of
    ``num_classes`` outputs has 513 * num_classes of them."""
    tiny = E.get("hbn-tab1").config("paper")["base_tiny"]["model"]
    assert tiny == {"name": "resnet18", "stem": "imagenet"}
    name, extra = E.get("hbn-tab5").config("paper")["archs"]["ResNet-18"]
    for opts, classes in ((tiny, 200), ({"name": name, **extra["model"]}, 100)):
        with torch.device("meta"):
            net = models.build(opts["name"], num_classes=classes, **{k: v for k, v in opts.items() if k != "name"})
        assert sum(p.numel() for p in net.parameters()) == 11_689_512 - 513 * 1000 + 513 * classes


def test_the_gpu_page_lists_the_data_every_training_entry_reads():
    from pathlib import Path

    from bnfl.data import DATASETS
    from bnfl.experiments.dryrun import _data_specs, _morpho_styles

    page = (Path(__file__).parents[1] / "docs" / "gpu.md").read_text()
    listed = {m[0]: set(re.findall(r"`([a-z0-9_]+)`", m[1]))
              for m in re.findall(r"^\| `([a-z]+-(?:fig|tab)\w+)` \| (.*?) \|", page, flags=re.M)}
    for eid in E.ids():
        if E.get(eid).kind != "training":
            assert eid not in listed
            continue
        c = E.get(eid).config("paper")
        names = {d["name"] for d in _data_specs(c) if DATASETS[d["name"]].local}
        names |= {"morpho_mnist"} if _morpho_styles(c) else set()
        names |= {"pretrained"} if c.get("pretrained") else set()
        if not names and eid.startswith("bench"):  # a benchmark on embedded data: nothing to fetch
            assert eid not in listed, eid
            continue
        assert listed.get(eid) == names, eid
    assert all(f"`{name}`" in page for name in SOURCES if name != "image_domains")


def test_eval_last_also_evaluates_each_of_the_last_rounds():
    from bnfl import fl

    sim = fl.build({"method": "fedavg+bn", "rounds": 6,
                    "train": {"local_steps": 1, "eval_every": 4, "eval_last": 2, "progress": False}})
    assert [r["round"] for r in sim.run().rows if "test_acc" in r] == [4, 5, 6]
    with pytest.raises(ValueError, match="eval_last"):
        fl.TrainConfig(eval_last=-1)


def test_hbn_reports_the_last_the_best_and_the_last_10_mean():
    import math

    from bnfl.experiments.papers.hbn.setups import reported

    run = {"round": [10, 20, 25, 26, 27, 28, 29, 30], "test_acc": [50.0, 70.0, 60.0, 61.0, 62.0, 63.0, 64.0, 65.0]}
    assert reported(run) == {"last": 65.0, "best": 70.0, "last-10 mean": 62.5}  # rounds 21-30: 25..30
    assert all(math.isnan(v) for v in reported({**run, "diverged": True}).values())
