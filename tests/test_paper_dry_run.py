"""The paper profile as a GPU user runs it: every entry dry-runs on fake files of the standard layouts
(``bnfl run <id> --profile paper --dry-run``), a missing data set is one line naming it, and the
HBN entries that failed at start (Table 1's column keys, Table 5's ResNet-18) run end to end with
their real configuration shrunk in scale only (:func:`bnfl.experiments.scale.shrink`)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from bnfl import experiments as E
from bnfl import models
from bnfl.cli import main
from bnfl.experiments.cache import RunCache
from bnfl.experiments.dryrun import dry_run
from bnfl.experiments.scale import SCALE_KEYS, scale_changes, shrink
from bnfl.experiments.sources import SOURCES
from tests.paper_fakes import write_paper_root, write_pretrained

torch.set_num_threads(1)

#: The two entries whose dry run builds torchvision's VGG-11/19 (133M/144M parameters) four times.
_HEAVY = {"hbn-tab5", "hbn-fig7"}
IDS = [pytest.param(e, marks=pytest.mark.slow) if e in _HEAVY else e for e in E.ids()]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = write_paper_root(tmp_path_factory.mktemp("paper_root"))
    write_pretrained(r)
    return r


def _shrunk(eid: str) -> tuple[dict, dict]:
    paper = E.get(eid).config("paper")
    return paper, shrink(paper, rounds=1, clients=4)


# ------------------------------------------------------------------------------ the dry run
@pytest.mark.parametrize("eid", IDS)
def test_every_paper_entry_dry_runs_on_the_standard_layouts(eid, root, monkeypatch):
    from bnfl.fl.engine import Simulation

    def no_training(*a, **k):
        raise AssertionError("a dry run trained")

    monkeypatch.setattr(Simulation, "run", no_training)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pretrained heads / fresh norm layers
        plan = dry_run(eid, profile="paper", data_root=str(root), seeds=1, time_steps=0)
    assert plan.ok, "\n".join(plan.lines())
    if E.get(eid).kind == "training":
        assert plan.runs and plan.models and plan.steps > 0
        assert {r["seed"] for r in plan.runs} == {0}
        assert any(line.startswith("  runs ") for line in plan.lines())
    else:
        assert not plan.runs and "trains nothing" in plan.lines()[0]


def test_dry_run_names_each_missing_data_set_with_its_layout_and_source(tmp_path, root):
    plan = dry_run("hbn-tab1", profile="paper", data_root=str(tmp_path), seeds=1)
    assert not plan.ok and not plan.runs
    assert [m.split(":")[0] for m in plan.missing] == ["cifar10", "cifar100", "tiny_imagenet"]
    for line, name in zip(plan.missing, ("cifar10", "cifar100", "tiny_imagenet"), strict=True):
        assert SOURCES[name].layout in line and SOURCES[name].origin in line and "\n" not in line
    (tmp_path / "cifar-10-batches-py").symlink_to(root / "cifar-10-batches-py")
    plan = dry_run("hbn-tab1", profile="paper", data_root=str(tmp_path), seeds=1)
    assert [m.split(":")[0] for m in plan.missing] == ["cifar100", "tiny_imagenet"]
    plan = dry_run("hbn-tab1", profile="paper", data_root=None, seeds=1)
    assert all("no --data-root" in m for m in plan.missing)


def test_dry_run_names_a_missing_pretrained_weights_file(tmp_path, root):
    for item in root.iterdir():
        if item.name != "pretrained":
            (tmp_path / item.name).symlink_to(item)
    plan = dry_run("hbn-tab5", profile="paper", data_root=str(tmp_path), seeds=1, time_steps=0)
    assert not plan.ok and plan.missing[0].startswith("pretrained:") and "mobilenet_v2.pth" in plan.missing[0]


def test_dry_run_estimates_the_time_from_a_timed_step(root):
    plan = dry_run("fedtan-fig4", profile="paper", data_root=str(root), seeds=2, time_steps=1)
    assert plan.ok and plan.estimate_s is not None and plan.estimate_s > 0
    assert {r["seed"] for r in plan.runs} == {0, 1}
    assert all(m.step_s is not None and m.step_s > 0 for m in plan.models)
    assert plan.images >= plan.steps > 0
    assert re.search(r"estimate [\d.]+ (s|min|h) on cpu", "\n".join(plan.lines()))


def test_cli_dry_run_exit_codes(root, tmp_path, capsys):
    assert main(["run", "fedtan-fig4", "--profile", "paper", "--data-root", str(root), "--dry-run",
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
    monkeypatch.setitem(registry._REGISTRY, "fedtan-tab3", dataclasses.replace(entry, compute=broken))
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


# ------------------------------------------------------------------------------ end to end, shrunk
def test_hbn_tab1_paper_runs_end_to_end_shrunk_in_scale_only(root):
    paper, small = _shrunk("hbn-tab1")
    r = E.run("hbn-tab1", profile="paper", data_root=root, seeds=1, overrides=small, cache=RunCache(),
              batched="off")
    assert r.config == small  # what ran is the paper's configuration at a smaller scale
    assert r.series["columns"] == [f"{d} phi={p}" for d in ("CIFAR-10", "CIFAR-100") for p in (0.6, 0.3, 0.1)] + \
        ["Tiny-ImageNet phi=0.1", "Tiny-ImageNet phi=0.05"]
    reports = [row["accuracy"] for row in r.rows]
    assert reports == ["last"] * 7 + ["best"] * 7 + ["last-10 mean"] * 7
    last = {row["method"]: row for row in r.rows if row["accuracy"] == "last"}
    assert all(last[k][c] == pytest.approx(r.series["acc"][c][k], abs=0.01) for c in r.series["columns"]
               for k in last if r.series["acc"][c][k] == r.series["acc"][c][k])


@pytest.mark.slow
def test_hbn_tab5_paper_runs_end_to_end_with_the_five_networks_and_their_weights(root, monkeypatch):
    paper, small = _shrunk("hbn-tab5")
    loads: list[tuple[str, bool]] = []
    real = models.load_pretrained

    def spy(model, path, *, norm_state=True):
        loads.append((str(path), norm_state))
        return real(model, path, norm_state=norm_state)

    monkeypatch.setattr(models, "load_pretrained", spy)  # what models.build calls
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = E.run("hbn-tab5", profile="paper", data_root=root, seeds=1, overrides=small, cache=RunCache(),
                  batched="off")
    assert r.config == small
    last = [row for row in r.rows if row["accuracy"] == "last"]
    assert [row["model"] for row in last] == ["MobilenetV2", "ResNet-18", "ResNet-50", "VGG-11", "VGG-19"]
    assert set(last[0]) == {"model", "+BN", "+GN", "+HBN", "+BN (pretrained norm)", "accuracy"}
    files = {p.rsplit("/", 1)[-1] for p, _ in loads}
    assert files == {"mobilenet_v2.pth", "resnet18.pth", "resnet50.pth", "vgg11.pth", "vgg19.pth"}
    # per network: BN, GN and HBN start with fresh norm layers (the authors), one BN run from the file's
    assert sorted(s for _, s in loads) == [False] * 15 + [True] * 5


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
        assert listed.get(eid) == names, eid
    assert all(f"`{name}`" in page for name in SOURCES if name != "image_domains")
