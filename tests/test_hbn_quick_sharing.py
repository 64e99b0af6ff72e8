"""The quick HBN entries share their runs (issue 25's cost cut for ``make run``): the grid entries
(Tables 8-10) score exactly the 3-seed validation runs every other quick entry's learning rate is
chosen on (``setups.Q_LR3`` / ``Q_TINY_LR3``), no quick entry trains a one-seed grid run any more,
and hbn-tab4's FedAvg rows are hbn-tab1's runs.

Nothing trains: a recording cache (``benchmarks.paper_plan.RecordingCache``) notes every run an
entry asks for and answers with a neutral stand-in summary.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from benchmarks.paper_plan import RecordingCache
from bnfl.experiments import registry
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
    assert set(tab8) <= set(quick_runs("hbn-tab1"))  # hbn-tab1 picks every method's rate from these runs
    assert set(quick_runs("hbn-tab10")) <= set(quick_runs("hbn-tab1"))  # the Tiny stand-in's selection


@pytest.mark.parametrize("eid", ["hbn-tab4", "hbn-tab5", "hbn-fig7", "hbn-tab8", "hbn-tab9", "hbn-tab10"])
def test_no_quick_entry_trains_a_one_seed_grid(eid):
    runs = quick_runs(eid)
    single = [k for k in runs.values() if not k.get("seed_group")]
    assert not single, f"{eid}: {len(single)} one-seed runs"
    validation = {h for h, k in runs.items() if _is_validation(k)}
    grids = set(quick_runs("hbn-tab8")) | set(quick_runs("hbn-tab10"))
    assert validation <= grids, f"{eid}: {len(validation - grids)} validation runs outside the selection grids"


def test_tab4_fedavg_rows_are_tab1_runs():
    tab1 = set(quick_runs("hbn-tab1"))
    fedavg = {h for h, k in quick_runs("hbn-tab4").items() if not _is_validation(k)
              and k["spec"]["method"] in ("fedavg+bn", "hbn") and "solver" not in k["spec"]["method_options"]}
    assert len(fedavg) == 2 * 3  # base BN and +HBN, 3 seeds each
    assert fedavg <= tab1
    claim = next(c for c in registry.get("hbn-tab4").compute(
        Context(profile="quick", seeds=[0, 1, 2], cache=RecordingCache(), batched="auto"),
        registry.get("hbn-tab4").config("quick"))["claims"] if c.name == "not-worse-FedAvg")
    assert claim.counted_in == "hbn-tab1"
