"""The quick HBN entries share their runs (issue 25's cost cut for ``make run``): the grid entries
(Tables 8-10) score exactly the 3-seed validation runs every other quick entry's learning rate is
chosen on (``setups.Q_LR3`` / ``Q_TINY_LR3``), and no quick entry trains a one-seed grid run any more.
The headline entries (hbn-tab1's Q-DIG columns, hbn-tab2, hbn-tab4, hbn-tab6; issue 36) tune every run
on its own spec instead (``regime.fair``): 5 seeds in lock-step, HBN with the headline lambda and
evaluation, and measure their precondition with BN-only runs.

Nothing trains: a recording cache (``benchmarks.paper_plan.RecordingCache``) notes every run an
entry asks for and answers with a neutral stand-in summary.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from benchmarks.paper_plan import RecordingCache
from bnfl.experiments import registry, tuning
from bnfl.experiments.core import Context
from bnfl.experiments.papers.hbn import grids as G
from bnfl.experiments.papers.hbn import setups as S

_CACHE: dict[str, dict[str, Any]] = {}


def quick_runs(eid: str) -> dict[str, Any]:
    """``{run hash: cache key}`` of every run entry ``eid`` asks for at the quick profile."""
    if eid not in _CACHE:
        e = registry.get(eid)
        cache = RecordingCache()
        ctx = Context(profile="quick", seeds=list(range(int(e.default_seeds["quick"]))), cache=cache, batched="auto")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e.compute(ctx, e.config("quick"))
        _CACHE[eid] = dict(cache.runs)
    return _CACHE[eid]


def _is_validation(key: dict[str, Any]) -> bool:
    return bool(key["spec"]["data"].get("validation"))


def test_quick_grid_entries_score_the_selection_runs():
    """Tables 8 and 9 at quick are Q_LR3's grid (Table 9's 3 rates nearest 0.005 are Table 8's)."""
    assert G.QUICK_GRIDS["hbn-tab8"] == G.QUICK_GRIDS["hbn-tab9"] == S.Q_GRID3
    assert registry.get("hbn-tab8").config("quick")["lr"] == S.Q_LR3
    assert registry.get("hbn-tab10").config("quick")["lr"] == S.Q_TINY_LR3
    tab8, tab9 = quick_runs("hbn-tab8"), quick_runs("hbn-tab9")
    assert set(tab8) == set(tab9)
    assert len(tab8) == sum(len(v) for v in S.Q_GRID3.values()) * len(S.Q_LR3["seeds"])  # 3 rates x 3 seeds a method
    assert all(_is_validation(k) and k.get("seed_group") == S.Q_LR3["seeds"] for k in tab8.values())
    assert set(quick_runs("hbn-tab10")) <= set(quick_runs("hbn-tab1"))  # the Tiny stand-in's selection


@pytest.mark.parametrize("eid", ["hbn-tab5", "hbn-fig7", "hbn-tab8", "hbn-tab9", "hbn-tab10"])
def test_no_quick_entry_trains_a_one_seed_grid(eid):
    runs = quick_runs(eid)
    single = [k for k in runs.values() if not k.get("seed_group")]
    assert not single, f"{eid}: {len(single)} one-seed runs"
    validation = {h for h, k in runs.items() if _is_validation(k)}
    grids = set(quick_runs("hbn-tab8")) | set(quick_runs("hbn-tab10"))
    assert validation <= grids, f"{eid}: {len(validation - grids)} validation runs outside the selection grids"


@pytest.mark.parametrize("eid", ["hbn-tab1", "hbn-tab2", "hbn-tab4", "hbn-tab6"])
def test_headline_entries_tune_every_run_fairly(eid):
    """Issue 36: every validation run of a headline entry's stand-in is a fair-grid run (the entry's 5 seeds in
    one lock-step stack, the grid's 3 rates), HBN's grid runs carry the headline lambda and the recomputed
    statistics (not lambda = 0.01 with the EMA statistics), and the entry asks for BN-only precondition runs."""
    from bnfl.experiments.papers.hbn import regime

    config = registry.get(eid).config("quick")
    lr = config.get("lr_c10", config.get("lr"))
    assert lr["mode"] == "fair" and lr["seeds"] == list(range(regime.SEEDS))
    runs = quick_runs(eid)
    data = config.get("base_c10", config.get("base"))["data"]
    fair = [k for k in runs.values() if _is_validation(k) and k["spec"]["data"]["name"] == data["name"]]
    assert fair and all(k.get("seed_group") == lr["seeds"] for k in fair)
    per_spec: dict[str, set[float]] = {}
    for k in fair:
        s = {**k["spec"], "train": {**k["spec"]["train"], "lr": None}, "seed": None, "partition": None}
        per_spec.setdefault(repr(sorted(s.items())), set()).add(float(k["spec"]["train"]["lr"]))
    # the fair grid, grown past an edge by at most tuning.EXTEND rates (the same rule for every run)
    assert all(set(regime.FAIR_GRID) <= v and len(v) <= len(regime.FAIR_GRID) + tuning.EXTEND for v in per_spec.values())
    hbn = [k for k in fair if k["spec"]["method"] == "hbn"]
    headline = config.get("hbn_c10", config.get("hbn"))
    assert hbn and any(k["spec"]["method_options"].get("lam") == headline["lam"]
                       and k["spec"]["method_options"].get("eval_stats") == "recompute" for k in hbn)
    bn_only = {k["spec"]["partition"].get("kind") for k in runs.values()
               if k["spec"]["method"] == "fedavg+bn" and not _is_validation(k)}
    if config["precondition"].startswith("skew"):
        assert "iid" in bn_only  # the clean side of BN's damage
    claims = registry.get(eid).compute(Context(profile="quick", seeds=lr["seeds"], cache=RecordingCache(),
                                               batched="auto"), config)["claims"]
    pre = next(c for c in claims if c.name == "bn-damage")
    assert pre.counted_in is None and pre.statement.startswith("precondition:")


def test_regime_chooses_the_first_candidate_whose_precondition_holds():
    from bnfl.experiments.papers.hbn import regime

    assert regime.CHOSEN == {"skew-0.1": "Q-DIG/Q-SCNN", "batch-0.6": "Q-GAUSS(10)/Q-MLP-BN",
                             "skew-0.6": "Q-GAUSS(10)/Q-MLP-BN"}
    # a candidate earlier in the order wins once its interval lies above 0
    table = dict(regime.CALIBRATION)
    table[("Q-DIG/Q-SCNN", "batch-0.6")] = ((90.0, 91.0, 92.0), (80.0, 80.5, 81.0))
    assert regime._choose(table)["batch-0.6"] == "Q-DIG/Q-SCNN"
    assert "Q-DIG/Q-SCNN -0.72 [-3.25, +1.81]" in regime.calibration_note("batch-0.6")


def test_regime_runs_every_other_stand_in_whose_precondition_holds():
    """Issue 47, part 2: the other MLP stand-ins (regime.ALSO, declared before they ran) are chosen by
    their own BN-only calibration, every one that shows the damage, and hbn-tab2 runs rows 8-9 on each
    with its margin by the calibration's rule on that stand-in's own drop."""
    from bnfl.experiments import calibration
    from bnfl.experiments.papers.hbn import regime

    assert set(regime.ALSO_CHOSEN) == {"batch-0.6", "skew-0.6"}  # the preconditions whose stand-in is an MLP
    assert regime.ALSO_CHOSEN == regime._holding(regime.ALSO_CALIBRATION)
    assert {c for c, _ in regime.ALSO_CALIBRATION} == {c.name for c in regime.ALSO}
    # a candidate without the damage is not run; one with it is
    table = dict(regime.ALSO_CALIBRATION)
    table[("Q-DIG/Q-MLP-BN", "batch-0.6")] = ((90.0, 91.0, 92.0), (91.0, 90.0, 92.5))
    assert "Q-DIG/Q-MLP-BN" not in regime._holding(table)["batch-0.6"]
    table[("Q-DIG/Q-MLP-BN", "batch-0.6")] = ((90.0, 91.0, 92.0), (80.0, 80.5, 81.0))
    assert "Q-DIG/Q-MLP-BN" in regime._holding(table)["batch-0.6"]
    others = registry.get("hbn-tab2").config("quick")["stand_ins"]
    assert list(others) == [regime.short_name(c) for c in regime.ALSO_CHOSEN["batch-0.6"]]
    for c in regime.ALSO_CHOSEN["batch-0.6"]:
        o = others[regime.short_name(c)]
        assert o["base"]["data"] == next(a.data for a in regime.ALSO if a.name == c)
        assert o["drop_margin"] == calibration.rule_threshold("hbn-tab2", "drop-0.6", regime.also_damage(c, "batch-0.6"))
    assert "stand_ins" not in registry.get("hbn-fig4").config("quick")


def test_hbn_tab2_measures_rows_8_and_9_on_each_other_stand_in_after_its_own_damage():
    """Each other stand-in's claims: its BN-only damage first (untuned rate, no validation split), then BN's
    drop, the drop over HBN's (the stand-in's own margin) and HBN >= BN at B = 2, on that stand-in's data."""
    from bnfl.experiments.papers.hbn import regime

    config = registry.get("hbn-tab2").config("quick")
    cache = RecordingCache()
    ctx = Context(profile="quick", seeds=list(range(regime.SEEDS)), cache=cache, batched="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        claims = {c.name: c for c in registry.get("hbn-tab2").compute(ctx, config)["claims"]}
    assert config["stand_ins"]
    for name, other in config["stand_ins"].items():
        assert claims[f"bn-damage {name}"].statement.startswith("precondition:")
        assert claims[f"drop-0.6 {name}"].threshold == other["drop_margin"]
        assert f"bn-drop-0.6 {name}" in claims and f"hbn-ge-bn-0.6-B2 {name}" in claims
    data = {o["base"]["data"]["name"] for o in config["stand_ins"].values()}
    asked = {k["spec"]["data"]["name"] for k in cache.runs.values()}
    assert data <= asked


@pytest.mark.parametrize("eid, claim", [("hbn-tab4", "gains"), ("hbn-tab6", "moving-average-worst")])
def test_rows_10_and_11_run_on_the_skew_stand_in_that_calibration_holds(eid, claim):
    """Rows 10-11 on MNIST-5K/Q-MLP-BN, the one other stand-in whose BN-only calibration shows the skew's damage
    at phi = 0.6 (Q-DIG/Q-MLP-BN does not): its own damage first, then the row's claim on its data; the smoke
    profile shrinks that stand-in's base as the entry's own."""
    from bnfl.experiments.papers.hbn import regime

    assert regime.ALSO_CHOSEN["skew-0.6"] == ("MNIST-5K/Q-MLP-BN",)
    config = registry.get(eid).config("quick")
    assert config["stand_ins"] == regime.also_stand_ins("skew-0.6")
    smoke = registry.get(eid).config("smoke")
    assert smoke["stand_ins"]["MNIST-5K"]["base"]["rounds"] == smoke["base"]["rounds"] == 2
    cache = RecordingCache()
    ctx = Context(profile="quick", seeds=list(range(regime.SEEDS)), cache=cache, batched="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = [c.name for c in registry.get(eid).compute(ctx, config)["claims"]]
    assert names.index("bn-damage MNIST-5K") < names.index(f"{claim} MNIST-5K")
    assert claim in names and "mnist5k" in {k["spec"]["data"]["name"] for k in cache.runs.values()}
