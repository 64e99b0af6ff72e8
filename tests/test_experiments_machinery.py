"""bnfl.experiments machinery: claim verdicts and margins, registry, cache, resumability, report, CLI.

These tests check that verdicts are *computed* correctly (a failing claim is a result, reported
with its margin), not that the paper's claims pass.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from bnfl import experiments as E
from bnfl.experiments import core
from bnfl.experiments.cache import RunCache

#: One in-memory run cache for the module: entries that share runs (Fig. 9 / Table 2 / Fig. 10)
#: compute them once here too.
CACHE = RunCache()

FEDTAN_IDS = [f"fedtan-fig{i}" for i in range(1, 15)] + [f"fedtan-tab{i}" for i in range(1, 6)] + ["fedtan-tabD"]


# -- claims ----------------------------------------------------------------------------------


def test_at_least_pass_and_fail_carry_signed_margin():
    ok = E.at_least("x", "x >= 5", 7.5, 5.0)
    bad = E.at_least("x", "x >= 5", 3.0, 5.0)
    assert ok.verdict == "pass" and ok.margin == pytest.approx(2.5)
    assert bad.verdict == "fail" and bad.margin == pytest.approx(-2.0)
    assert bad.measured == 3.0 and bad.threshold == 5.0


def test_at_most_within_and_nan_fail():
    assert E.at_most("x", "", 4.0, 5.0).margin == pytest.approx(1.0)
    assert E.at_most("x", "", 6.0, 5.0).verdict == "fail"
    w = E.within("x", "", 90.0, 91.5, 2.0)
    assert w.verdict == "pass" and w.measured == pytest.approx(1.5) and w.margin == pytest.approx(0.5)
    assert E.within("x", "", 90.0, 93.0, 2.0).margin == pytest.approx(-1.0)
    # A diverged run (NaN) cannot show the effect: fail, no margin.
    nan = E.at_least("x", "", float("nan"), 1.0)
    assert nan.verdict == "fail" and nan.margin is None


def test_soft_claim_reports_margin_without_verdict():
    c = E.at_most("x", "", 9.0, 5.0, soft=True)
    assert c.verdict == "info" and c.margin == pytest.approx(-4.0)


def test_monotone_forgives_only_small_violations():
    # strictly increasing: slack = smallest increase
    assert E.monotone("m", "", [1, 2, 4]).margin == pytest.approx(1.0)
    one_small = E.monotone("m", "", [1, 3, 2.5, 4], allowed_violations=1, max_violation=1.0)
    assert one_small.verdict == "pass" and one_small.margin == pytest.approx(0.5)
    one_big = E.monotone("m", "", [1, 3, 1.5, 4], allowed_violations=1, max_violation=1.0)
    assert one_big.verdict == "fail" and one_big.margin == pytest.approx(-1.5)
    two_small = E.monotone("m", "", [3, 2.5, 2.0, 4], allowed_violations=1, max_violation=1.0)
    assert two_small.verdict == "fail"
    tol = E.monotone("m", "", [80, 79.5, 81], tolerance=1.0)
    assert tol.verdict == "pass" and tol.margin == pytest.approx(0.5)
    assert E.monotone("m", "", [3, 2, 1], increasing=False).verdict == "pass"
    with pytest.raises(ValueError, match="labels"):
        E.monotone("m", "", [1, 2], labels=["a"])


def test_margin_below_noise_is_inconclusive_with_a_why():
    # 0.1 pt above the bound, but one test sample is 0.28 pts: not evidence either way
    c = E.at_least("gap", "gap >= 0", 0.1, 0.0, noise=0.28, noise_label="one test sample")
    assert c.verdict == "inconclusive" and "0.28" in c.why and "one test sample" in c.why
    c = E.at_most("gap", "x <= 30", 30.2, 30.0, noise=0.28, why="proxy too easy")
    assert c.verdict == "inconclusive" and "proxy too easy" in c.why
    assert E.within("w", "|a-b| <= 2", 91.0, 90.5, 2.0, noise=0.28).verdict == "pass"  # margin 1.5 > noise
    fail = E.at_least("g", "g >= 8", 2.0, 8.0, noise=0.28, why="the proxy is too easy")
    assert fail.verdict == "fail" and fail.why == "the proxy is too easy"
    assert E.at_least("g", "g >= 8", 2.0, 8.0).why.startswith("measured 2")  # default why: the numbers
    assert E.at_least("n", "n >= 1", float("nan"), 1.0, noise=5.0).verdict == "fail"  # NaN never inconclusive
    assert E.at_least("s", "soft", 0.1, 0.0, noise=1.0, soft=True).verdict == "info"


def test_noise_is_seed_std_or_one_test_sample():
    from bnfl.experiments.curves import noise

    one_seed = [{"test_acc": [50.0, 60.0], "n_test": 360}]
    value, text = noise(one_seed)
    assert value == pytest.approx(100 / 360) and "one test sample" in text
    seeds = [{"test_acc": [70.0], "n_test": 1000}, {"test_acc": [72.0], "n_test": 1000}]
    value, text = noise(seeds)
    assert value == pytest.approx(math.sqrt(2.0)) and "seed std" in text  # std(70, 72) > 0.1
    assert math.isnan(noise([{"test_acc": [1.0]}])[0])


def test_result_verdict_orders_fail_inconclusive_pass():
    def res(*verdicts):
        claims = [E.Claim(f"c{i}", "s", v) for i, v in enumerate(verdicts)]
        return E.Result("x", "t", "quick", [0], [], [], claims)

    assert res("pass", "inconclusive", "fail").verdict == "fail"
    assert res("pass", "inconclusive").verdict == "inconclusive"
    assert res("pass", "info").verdict == "pass"
    assert res("info").verdict == "n/a"


def test_consistency_checks_are_labelled():
    tab5 = E.run("fedtan-tab5", profile="smoke")
    kinds = {c.kind for c in tab5.claims if c.verdict != "info"}
    assert kinds == {"consistency"}  # R = 500 and the counting were inferred from Table 5 itself
    tab3 = {c.name: c.kind for c in E.run("fedtan-tab3", profile="smoke").claims}
    assert tab3["rounds-resnet20"] == "consistency" and tab3["mib-fedtan"] == "reproduction"
    assert "consistency check" in E.claims_table(tab5)


def test_registry_decorators_and_paper_discovery():
    from bnfl.experiments import registry

    assert registry.paper_keys() == sorted({e.split("-")[0] for e in E.ids()})
    with pytest.raises(ValueError, match="register the entry"):
        registry.plotter("nopaper-fig1")(lambda result: None)
    with pytest.raises(ValueError, match="registered papers"):
        E.ids("nopaper")
    entry = E.get("fedtan-fig4")
    assert entry.look_for and entry.paper == "fedtan" and entry.plot is not None
    # every entry carries its prose (the notebooks are generated from it)
    assert all(E.get(i).look_for and E.get(i).summary for i in E.ids())


def test_claim_rejects_unknown_verdict():
    with pytest.raises(ValueError, match="verdict"):
        E.Claim("x", "", "maybe")


def test_result_verdict_and_json_roundtrip():
    claims = [E.at_least("a", "", 2, 1), E.info("b", "", 0.3), E.at_most("c", "", 2, 1)]
    r = E.Result(id="fedtan-x", title="t", profile="smoke", seeds=[0], rows=[{"a": 1.0}],
                 paper=[{"a": "1"}], claims=claims)
    assert r.verdict == "fail"
    back = E.Result.from_dict(json.loads(r.to_json()))
    assert back.claims == r.claims and back.verdict == "fail"
    r.claims = claims[:2]
    assert r.verdict == "pass"
    r.claims = [claims[1]]
    assert r.verdict == "n/a"


def test_tables_keep_the_entrys_column_order_with_labels_first():
    rows = [{"phi": 0.1, "method": "BN", "acc": 90.0}, {"phi": 0.6, "method": "HBN", "acc": 95.5, "note": None}]
    r = E.Result(id="fedtan-x", title="t", profile="smoke", seeds=[0], rows=rows, paper=[], claims=[])
    back = E.Result.from_dict(json.loads(r.to_json()))
    assert [list(row) for row in back.rows] == [list(row) for row in rows]  # saved in the entry's order
    shown = E.labels_first(json.loads(json.dumps(rows, sort_keys=True)))  # a result saved with sorted keys
    assert [list(row) for row in shown] == [["method", "acc", "phi"], ["method", "acc", "phi", "note"]]
    from bnfl.experiments.notebook import tables_html

    html = tables_html(back)
    assert html.index(">method<") < html.index(">phi<") < html.index(">acc<")


def test_config_hash_is_order_free_and_sensitive():
    assert E.config_hash({"a": 1, "b": [1, 2]}) == E.config_hash({"b": [1, 2], "a": 1})
    assert E.config_hash({"a": 1}) != E.config_hash({"a": 2})


# -- registry ----------------------------------------------------------------------------------


def test_every_fedtan_catalog_id_is_registered_with_all_profiles():
    assert sorted(E.ids("fedtan")) == sorted(FEDTAN_IDS)
    for eid in FEDTAN_IDS:
        entry = E.get(eid)
        assert set(entry.configs) == set(core.PROFILES)
        assert entry.default_seeds["paper"] == (5 if entry.kind == "training" else 1)
        assert entry.title and entry.summary


TUNING_GRIDS = ("hbn-tab8", "hbn-tab9", "hbn-tab10")


def test_quick_training_entries_run_the_catalogs_seed_counts():
    """Every trained entry runs at least 5 seeds at quick (issue 47 part 7, amendment A12; the catalog's 3
    before), except the three learning-rate grids, which re-read the tuning rule's 3-seed selection
    runs; an entry that holds a headline claim runs the headline count (issue 36: 5), and a FedTAN or
    FixBN one its first 3 seeds as one lock-step group; no deviation says a seed count was cut."""
    from bnfl.experiments.calibration import HEADLINE_SEEDS
    from bnfl.experiments.headlines import HEADLINES

    headline = {h.entry for h in HEADLINES if h.entry != "hbn-tab1"}  # hbn-tab1: its earlier protocol for now
    for eid in E.ids():
        entry = E.get(eid)
        if entry.kind != "training":
            continue
        want = {"fedtan": 3, "fixbn": 3}.get(eid.split("-")[0])
        if eid in headline:
            assert entry.default_seeds["quick"] >= HEADLINE_SEEDS, eid
            if want is not None:
                assert entry.seed_groups[:1] == (want,), eid
        elif eid not in TUNING_GRIDS:
            assert entry.default_seeds["quick"] >= 5, eid  # issue 47 part 7 (amendment A12)
        assert not any("1 seed instead" in d for d in entry.config("quick").get("deviations", [])), eid
    assert E.get("hbn-tab6").default_seeds["quick"] == 5
    assert E.get("fedbn-fig5").default_seeds["quick"] == 10 and E.get("fedbn-fig5").seed_groups == (5,)  # row 18


def test_unknown_id_and_profile_raise():
    with pytest.raises(KeyError, match="fedtan-fig4"):
        E.get("fedtan-fig99")
    with pytest.raises(ValueError, match="profile"):
        E.run("fedtan-tab3", profile="huge")


def test_register_rejects_duplicates_and_missing_profiles():
    entry = E.get("fedtan-tab3")
    with pytest.raises(ValueError, match="twice"):
        E.register(entry)
    import dataclasses

    with pytest.raises(ValueError, match="lacks profile"):
        E.register(dataclasses.replace(entry, id="fedtan-test-x", configs={"quick": {}}))


# -- cache -------------------------------------------------------------------------------------


def test_run_cache_computes_once_and_persists(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"acc": [1.0, 2.0]}

    cache = RunCache(tmp_path / "runs")
    spec = {"method": "fedtan", "rounds": 3}
    assert cache.get_or_compute(spec, compute) == {"acc": [1.0, 2.0]}
    assert cache.get_or_compute(dict(reversed(list(spec.items()))), compute) == {"acc": [1.0, 2.0]}
    assert len(calls) == 1 and cache.hits == 1 and cache.misses == 1
    fresh = RunCache(tmp_path / "runs")  # a later process reads it from disk
    assert fresh.get_or_compute(spec, compute) == {"acc": [1.0, 2.0]} and len(calls) == 1
    (tmp_path / "runs" / f"{RunCache.key(spec)}.json").write_text("{torn")
    assert RunCache(tmp_path / "runs").get(spec) is None  # a torn file is recomputed, not trusted


def test_processes_sharing_the_cache_folder_compute_a_run_once(tmp_path):
    import threading
    import time

    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.3)  # the other caller arrives while this one computes
        return {"acc": [1.0]}

    spec = {"method": "fedavg+bn", "seed": 7}
    got = []
    threads = [threading.Thread(target=lambda: got.append(RunCache(tmp_path / "runs").get_or_compute(spec, compute)))
               for _ in range(2)]  # two caches on one folder, as two worker processes have (flock per open file)
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and got == [{"acc": [1.0]}] * 2


def test_a_cache_told_not_to_wait_raises_run_busy_and_computes_nothing(tmp_path):
    """``RunCache(wait=False)`` (reproduce's workers): a run another process holds raises
    :class:`RunBusy` at once, nothing is computed or stored; once released it computes."""
    from bnfl.experiments.cache import RunBusy

    spec = {"method": "fedavg+bn", "seed": 3}
    calls = []
    holder, eager = RunCache(tmp_path / "runs"), RunCache(tmp_path / "runs", wait=False)
    with holder.hold(spec):
        with pytest.raises(RunBusy, match="being computed by another process") as err:
            eager.get_or_compute(spec, lambda: calls.append(1) or {"acc": [1.0]})
        assert err.value.key == RunCache.key(spec) and not isinstance(err.value, Exception)
        assert calls == [] and eager.get(spec) is None
    assert eager.get_or_compute(spec, lambda: calls.append(1) or {"acc": [1.0]}) == {"acc": [1.0]} and calls == [1]


def test_a_lockstep_group_is_trained_once_by_processes_sharing_the_folder(tmp_path, monkeypatch):
    """Two processes that need the same seed group: one trains it (holding the group's lock),
    the other waits and reads the stored runs (before, both trained the whole group); a cache
    told not to wait raises :class:`RunBusy` instead."""
    import threading
    import time

    from bnfl.experiments import training
    from bnfl.experiments.cache import RunBusy
    from bnfl.fl import lockstep

    calls, started, release = [], threading.Event(), threading.Event()
    real = lockstep.run_lockstep

    def slow(sims, **kw):
        calls.append(len(sims))
        started.set()
        release.wait(30)  # the group trains (holding its lock) until the other callers have come
        return real(sims, **kw)

    monkeypatch.setattr(lockstep, "run_lockstep", slow)
    spec = {"method": "fedavg+bn", "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
            "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 3}, "rounds": 1,
            "train": {"local_unit": "epochs", "local_steps": 1, "eval_every": 1}}

    def ctx(wait=True):
        return core.Context(profile="smoke", cache=RunCache(tmp_path / "runs", wait=wait), batched="auto", seeds=[0, 1])

    got, busy = [], []
    first = threading.Thread(target=lambda: got.append(training.train_seeds(ctx(), spec)))
    first.start()
    assert started.wait(30)
    try:
        training.train_seeds(ctx(wait=False), spec)
    except RunBusy as err:
        busy.append(err)
    second = threading.Thread(target=lambda: got.append(training.train_seeds(ctx(), spec)))
    second.start()
    time.sleep(0.2)  # (the second caller then waits on the group's lock; if it came later, it reads the cache)
    release.set()
    first.join(60)
    second.join(60)
    assert calls == [2] and len(busy) == 1 and len(got) == 2 and got[0] == got[1]


def test_dispatch_puts_back_an_entry_whose_run_is_busy_and_waits_only_when_nothing_else_is_left():
    from bnfl.experiments.runner import _Dispatch

    d = _Dispatch(["a", "b", "c"])
    assert d.next() == ("a", False) and d.next() == ("b", False)
    d.put_back("b")  # b needs a run that a is training: c goes out meanwhile
    assert d.next() == ("c", False)
    d.put_back("c")
    assert d.next() == ("c", True)  # only put-back entries left: it waits for the run
    d.finished("a")  # a stored its runs: b goes out again, without waiting
    assert d.next() == ("b", False) and not d


def test_dispatch_order_is_longest_first_by_the_stored_durations(tmp_path):
    from bnfl.experiments.runner import _dispatch_order, result_path

    for eid, seconds in (("a", 5.0), ("c", 50.0)):
        stored = E.Result(id=eid, title=eid, profile="quick", seeds=[0], rows=[], paper=[], claims=[],
                          duration_s=seconds)
        result_path(tmp_path, eid).parent.mkdir(parents=True)
        result_path(tmp_path, eid).write_text(stored.to_json())
    assert _dispatch_order(["a", "b", "c"], tmp_path) == ["b", "c", "a"]  # b: no duration stored, first
    assert _dispatch_order(["a", "b"], tmp_path / "fresh") == ["a", "b"]


def test_reproduce_bar_eta_comes_from_the_stored_durations(tmp_path):
    """The bar counts expected seconds: after the longest entry (run first) its remaining time is
    the others' recorded durations, not the first entry's time per remaining entry."""
    from bnfl.experiments.runner import _Progress, result_path

    for eid, seconds in (("long", 600.0), ("a", 10.0), ("b", 20.0)):
        stored = E.Result(id=eid, title=eid, profile="quick", seeds=[0], rows=[], paper=[], claims=[],
                          duration_s=seconds)
        result_path(tmp_path, eid).parent.mkdir(parents=True)
        result_path(tmp_path, eid).write_text(stored.to_json())
    bar = _Progress(["long", "a", "b", "new"], tmp_path, desc="x", progress=True)
    assert bar.expected == {"long": 600.0, "a": 10.0, "b": 20.0, "new": 20.0}  # new: the median
    bar.finished("long")
    assert bar.bar.total == 650.0 and bar.bar.n == 600.0 and bar.done == 1
    rate = bar.bar.n / 600.0  # 600 expected seconds in 600 s of wall time
    assert (bar.bar.total - bar.bar.n) / rate == 50.0  # tqdm's remaining: 50 s, not 3 x 600 s
    bar.close()


def test_shared_runs_are_computed_once_across_entries():
    before = CACHE.misses
    E.run("fedtan-fig9", profile="smoke", cache=CACHE)
    assert CACHE.misses - before in (0, 8)  # 2 methods x 2 distributions x 2 optimisers (0: already cached)
    misses, hits = CACHE.misses, CACHE.hits
    tab2 = E.run("fedtan-tab2", profile="smoke", cache=CACHE)
    # tab2 re-reads Fig. 9's 8 runs; it trains only the with-momentum non-iid cell's BN-only precondition
    # runs (centralized BN, FedAvg+BN), each cell's rate grids (lock-step, stored whole) and the runs at
    # the tuned rates (FedTAN, FedAvg+GN in each of the 4 cells; one the same as Fig. 9's where the base
    # rate wins)
    assert 2 <= CACHE.misses - misses <= 2 + 2 * 4 and CACHE.hits - hits >= 8
    misses = CACHE.misses
    E.run("fedtan-fig10", profile="smoke", cache=CACHE)
    assert CACHE.misses == misses  # Fig. 10: the same runs again
    # the shared runs are recorded with the time they took when they were computed
    assert len(tab2.runs) == 8 + 2 + 4 * 5 and all(sec > 0 for sec in tab2.runs.values())  # 5 per tuned cell


def test_batched_training_runs_are_cached_apart_and_named_in_the_command(tmp_path):
    """``batched="auto"`` (the default of ``run``/``reproduce``): the entry's training runs use
    the batched engine (recorded in each run's summary), under another result hash and
    run-cache key than the sequential ones (``batched="off"``, named in the command)."""
    cache = RunCache(None)
    seq = E.run("fedtan-fig9", profile="smoke", cache=cache, batched="off")
    bat = E.run("fedtan-fig9", profile="smoke", cache=cache)
    assert bat.config_hash != seq.config_hash and set(bat.runs).isdisjoint(seq.runs)
    assert seq.command.endswith("--batched off") and "--batched" not in bat.command
    spec = {"method": "fedavg+bn", "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
            "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 4}, "rounds": 2,
            "train": {"local_unit": "epochs", "local_steps": 1, "eval_every": 2}}
    ctx = core.Context(profile="smoke", cache=cache, batched="auto")
    run = E.training.train(ctx, spec)
    assert {k: run["batched"][k] for k in ("mode", "used", "why")} == {"mode": "auto", "used": True, "why": "batched"}
    off = E.training.train(core.Context(profile="smoke", cache=cache), spec)
    assert "batched" not in off and off["test_acc"][-1] == pytest.approx(run["test_acc"][-1], abs=100 / off["n_test"])
    with pytest.raises(ValueError, match="batched must be one of"):
        E.run("fedtan-fig9", profile="smoke", batched="yes")


def test_seeds_train_together_under_the_batched_engine_and_are_cached_by_their_group(monkeypatch):
    """``train_seeds`` with ``batched="auto"`` and several seeds: one lock-step run of all seeds
    (their clients in one batched computation), each seed cached under its group; the numbers
    are each seed's own batched run's up to rounding (within one test sample here)."""
    from bnfl.experiments import training
    from bnfl.fl import lockstep

    calls = []
    real = lockstep.run_lockstep
    monkeypatch.setattr(lockstep, "run_lockstep", lambda sims, **kw: calls.append(len(sims)) or real(sims, **kw))
    spec = {"method": "fedbn", "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
            "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 4}, "rounds": 2,
            "train": {"local_unit": "epochs", "local_steps": 1, "eval_every": 2}}
    cache = RunCache(None)
    ctx = core.Context(profile="smoke", cache=cache, batched="auto", seeds=[0, 1, 2])
    runs = training.train_seeds(ctx, spec)
    assert calls == [3] and len(cache) == 3 and all(r["batched"]["used"] for r in runs)
    again = training.train_seeds(ctx, spec)
    assert again == runs and calls == [3]  # cached: nothing trained again
    alone = training.train_seeds(core.Context(profile="smoke", cache=cache, batched="auto", seeds=[1]), spec)
    assert calls == [3] and len(cache) == 4  # one seed: its own batched run, another key
    assert alone[0]["test_acc"][-1] == pytest.approx(runs[1]["test_acc"][-1], abs=100 / runs[1]["n_test"])
    training.train_seeds(core.Context(profile="smoke", cache=cache, seeds=[0, 1, 2]), spec)
    assert calls == [3] and len(cache) == 7  # batched off: the seeds one by one, sequential keys


def test_seed_groups_make_a_five_seed_entry_reuse_the_three_seed_runs_bitwise(monkeypatch):
    """``Context.seed_groups=(3,)``: seeds 0-2 are the cached 3-seed group's runs (no training, the
    same numbers), seeds 3-4 train as one more group; ``seed_groups`` cuts and validates."""
    from bnfl.experiments import registry, training
    from bnfl.fl import lockstep

    assert training.seed_groups([0, 1, 2, 3, 4], (3,)) == [[0, 1, 2], [3, 4]]
    assert training.seed_groups([0, 1], (3,)) == [[0, 1]]
    assert training.seed_groups([0, 1, 2, 3, 4, 5], (3, 2)) == [[0, 1, 2], [3, 4], [5]]
    assert training.seed_groups([0, 1, 2]) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="seed_groups must be sizes"):
        registry.entry("x-bad", title="", summary="", kind="training", configs={}, seed_groups=(0,))
    calls = []
    real = lockstep.run_lockstep
    monkeypatch.setattr(lockstep, "run_lockstep", lambda sims, **kw: calls.append(len(sims)) or real(sims, **kw))
    spec = {"method": "fedavg+bn", "data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
            "partition": {"kind": "dirichlet", "phi": 0.1, "num_clients": 3}, "rounds": 2,
            "train": {"local_steps": 2, "eval_every": 2}}
    cache = RunCache(None)
    three = training.train_seeds(core.Context(profile="smoke", cache=cache, batched="auto", seeds=[0, 1, 2]), spec)
    five = training.train_seeds(core.Context(profile="smoke", cache=cache, batched="auto", seeds=[0, 1, 2, 3, 4],
                                             seed_groups=(3,)), spec)
    assert calls == [3, 2] and len(cache) == 5
    assert five[:3] == three and five[3] != five[4] and five[3] not in three


# -- runner: results, resumability, report -----------------------------------------------------


def test_run_writes_result_and_reuses_it(tmp_path):
    r1 = E.run("fedtan-tab4", profile="smoke", out=tmp_path)
    path = tmp_path / "fedtan-tab4" / "result.json"
    stored = json.loads(path.read_text())
    assert stored["config_hash"] == r1.config_hash and stored["verdict"] == r1.verdict
    assert stored["profile"] == "smoke" and stored["seeds"] == [0] and "duration_s" in stored
    import platform

    import torch

    assert stored["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # what rounds
    assert stored["machine"]["torch"] == torch.__version__ and stored["machine"]["cpu"]
    assert stored["machine"]["python"] == platform.python_version()  # bnfl compare and REPORT.md show it
    mtime = path.stat().st_mtime_ns
    r2 = E.run("fedtan-tab4", profile="smoke", out=tmp_path)
    assert path.stat().st_mtime_ns == mtime and r2.rows == r1.rows
    E.run("fedtan-tab4", profile="smoke", out=tmp_path, overrides={"iterations": 10_000, "M": [1, 2, 4, 10_000]})
    assert path.stat().st_mtime_ns != mtime  # a changed configuration is recomputed


def test_reproduce_without_paper_runs_every_paper(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("bnfl.experiments.runner.run", lambda eid, **kw: seen.append(eid) or E.run(eid, **kw))
    E.reproduce(profile="smoke", out=tmp_path, only=["fedtan-tab4"], progress=False, report=False)
    assert seen == ["fedtan-tab4"]
    import inspect

    from bnfl.experiments.runner import reproduce

    assert inspect.signature(reproduce).parameters["paper"].default is None


def test_reproduce_in_parallel_equals_one_process(tmp_path):
    ids = ["fedtan-fig9", "fedtan-tab2", "fedtan-tab4"]  # fig9 and tab2 share their runs
    one = E.reproduce("fedtan", profile="smoke", out=tmp_path / "one", only=ids, progress=False, report=False)
    two = E.reproduce("fedtan", profile="smoke", out=tmp_path / "two", only=ids, progress=False, report=False, jobs=2)
    assert [r.id for r in two] == ids
    for a, b in zip(one, two, strict=True):
        assert a.rows == b.rows and a.series == b.series and a.config_hash == b.config_hash, a.id
        assert (tmp_path / "two" / f"{a.id}.png").is_file()
    runs = [f for f in (tmp_path / "two" / "_runs").glob("*.json")]
    assert len(runs) == len(list((tmp_path / "one" / "_runs").glob("*.json")))
    with pytest.raises(ValueError, match="jobs must be an integer >= 1"):
        E.reproduce("fedtan", profile="smoke", out=tmp_path, only=ids, jobs=0)


def test_reproduce_is_resumable_and_writes_report(tmp_path):
    ids = ["fedtan-tab3", "fedtan-tab5"]
    E.reproduce("fedtan", profile="smoke", out=tmp_path, only=ids, progress=False)
    for eid in ids:
        for ext in ("png", "svg", "json"):
            assert (tmp_path / f"{eid}.{ext}").is_file()
        prov = json.loads((tmp_path / f"{eid}.json").read_text())
        assert prov["profile"] == "smoke" and prov["config_hash"]
    stamps = {eid: (tmp_path / eid / "result.json").stat().st_mtime_ns for eid in ids}
    fig_stamp = (tmp_path / "fedtan-tab3.png").stat().st_mtime_ns
    E.reproduce("fedtan", profile="smoke", out=tmp_path, only=ids, progress=False)
    assert {eid: (tmp_path / eid / "result.json").stat().st_mtime_ns for eid in ids} == stamps
    assert (tmp_path / "fedtan-tab3.png").stat().st_mtime_ns == fig_stamp
    E.reproduce("fedtan", profile="smoke", out=tmp_path, only=["fedtan-tab3"], force=True, progress=False)
    assert (tmp_path / "fedtan-tab3" / "result.json").stat().st_mtime_ns != stamps["fedtan-tab3"]
    report = (tmp_path / "REPORT.md").read_text()
    assert "## fedtan-tab5" in report and "![fedtan-tab5](fedtan-tab5.png)" in report
    assert "2.1493" in report and "2.1386" in report  # ours beside the paper's
    assert "bnfl reproduce --paper fedtan --profile smoke" in report and "--only fedtan-tab5 --force" in report


def test_fresh_clone_recomputes_committed_results(tmp_path):
    # A clone carries result.json files but not the git-ignored _runs/ folder: the main job
    # must recompute them rather than trust files it did not make.
    E.reproduce("fedtan", profile="smoke", out=tmp_path, only=["fedtan-tab3"], progress=False)
    path = tmp_path / "fedtan-tab3" / "result.json"
    stamp = path.stat().st_mtime_ns
    shutil.rmtree(tmp_path / "_runs")
    E.reproduce("fedtan", profile="smoke", out=tmp_path, only=["fedtan-tab3"], progress=False)
    assert path.stat().st_mtime_ns != stamp


def test_stored_result_is_keyed_by_the_bnfl_source(tmp_path, monkeypatch):
    r1 = E.run("fedtan-tab4", profile="smoke", out=tmp_path)
    monkeypatch.setattr(core, "code_fingerprint", lambda: "changed-code")
    monkeypatch.setattr("bnfl.experiments.runner.code_fingerprint", lambda: "changed-code")
    r2 = E.run("fedtan-tab4", profile="smoke", out=tmp_path)
    assert r2.config_hash != r1.config_hash  # new code, new key: recomputed, not reused


def test_failing_claim_is_reported_with_margin(tmp_path):
    failing = E.at_least("gap", "FedTAN - FedAvg+BN >= 8 pts", 3.0, 8.0)
    r = E.Result(id="fedtan-tab3", title="t", profile="smoke", seeds=[0], rows=[], paper=[], claims=[failing])
    from bnfl.experiments.report import write_report

    text = write_report([r], tmp_path / "REPORT.md").read_text()
    assert "FAIL" in text and "-5" in text and "FedTAN - FedAvg+BN >= 8 pts" in text


# -- CLI -----------------------------------------------------------------------------------------


def test_cli_run_list_and_errors(tmp_path, capsys):
    from bnfl.cli import main

    assert main(["run", "fedtan-tab3", "--profile", "smoke", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "fedtan-tab3" / "result.json").is_file()
    assert (tmp_path / "fedtan-tab3" / "fedtan-tab3.png").is_file()
    out = capsys.readouterr().out
    assert "PASS" in out
    assert main(["list", "--paper", "fedtan", "--out", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    from bnfl.experiments.counting import entry_verdict
    from bnfl.experiments.runner import load_result

    verdict = entry_verdict(load_result(tmp_path, "fedtan-tab3"))
    assert verdict.startswith("structural checks: ")  # an entry that trains nothing: its checks, by pass/fail
    row = listing.split("\nfedtan-tab3 ", 1)[1]
    assert row.split("\n", 1)[0].split()[2] == "smoke" and f"\n    verdict: {verdict}\n" in row
    assert "fedtan-fig14" in listing
    assert main(["run", "fedtan-fig99", "--profile", "smoke", "--out", str(tmp_path)]) == 2
    assert "no experiment" in capsys.readouterr().err


def test_cli_reproduce_only(tmp_path):
    from bnfl.cli import main

    assert main(["reproduce", "--profile", "smoke", "--out", str(tmp_path), "--only", "fedtan-fig2"]) == 0
    assert (tmp_path / "fedtan-fig2.png").is_file() and (tmp_path / "REPORT.md").is_file()


def test_cli_reproduce_headline_runs_the_entries_behind_the_headline_table(tmp_path, monkeypatch, capsys):
    from bnfl.cli import main
    from bnfl.experiments.headlines import HEADLINES

    seen = {}

    def fake(paper, **kw):
        seen.update(kw, paper=paper)
        return []

    monkeypatch.setattr("bnfl.experiments.runner.reproduce", fake)
    assert main(["reproduce", "--headline", "--out", str(tmp_path), "--report-only"]) == 0
    assert set(seen["only"]) == {h.entry for h in HEADLINES} and seen["only"] == [e for e in E.ids() if e in seen["only"]]
    assert main(["reproduce", "--headline", "--paper", "fedtan", "--out", str(tmp_path), "--report-only"]) == 0
    assert seen["paper"] == "fedtan" and seen["only"] == [e for e in E.ids("fedtan") if e in {h.entry for h in HEADLINES}]
    assert main(["reproduce", "--headline", "--only", "fedtan-fig2"]) == 2
    assert "leave out --only" in capsys.readouterr().err


def test_report_after_only_keeps_the_other_stored_results(tmp_path):
    """`--only` (or `--headline`) into a folder that holds other results: REPORT.md still lists them."""
    E.run("fedtan-tab4", profile="smoke", out=tmp_path)
    E.reproduce(profile="smoke", out=tmp_path, only=["fedtan-tab3"], progress=False)
    report = (tmp_path / "REPORT.md").read_text()
    assert "## fedtan-tab3" in report and "## fedtan-tab4" in report


def test_plot_does_not_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = E.run("fedtan-fig1", profile="smoke")
    fig = E.plot("fedtan-fig1", r)
    assert fig.axes and not list(tmp_path.iterdir())
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.parametrize("eid", E.ids())
def test_every_entry_runs_at_smoke(eid, tmp_path):
    """Every registered entry of every paper, at the smoke profile (a new paper is covered as it registers)."""
    r = E.run(eid, profile="smoke", cache=CACHE)
    assert r.id == eid and r.profile == "smoke"
    assert r.rows, "every entry reports numbers"
    for c in r.claims:
        assert c.verdict in ("pass", "fail", "inconclusive", "info")
        if c.verdict in ("pass", "fail") and c.margin is not None:
            assert (c.margin >= 0) == (c.verdict == "pass")
            assert math.isfinite(c.margin)
        if c.verdict in ("fail", "inconclusive"):
            assert c.why, f"{eid}: {c.name} is {c.verdict} without a why"
    paths = E.save_figures(r, tmp_path)
    assert paths["png"].stat().st_size > 1000


# -- training adapter --------------------------------------------------------------------------


def test_piecewise_lr_steps():
    from bnfl.fl import Schedule

    p = Schedule(0.5, steps=((6000, 0.001), (1000, 0.01)))
    assert [p.at(r, 10_000) for r in (1, 1000, 1001, 6000, 6001)] == [0.5, 0.5, 0.01, 0.01, 0.001]
    with pytest.raises(ValueError, match="positive"):
        Schedule(0.5, steps=((10, -1.0),))


def test_canonical_specs_share_equal_runs():
    from bnfl.experiments.training import canonical

    base = {"data": {"name": "digits"}, "model": {"name": "q_mlp_bn"}, "rounds": 10}
    # centralized training pools the data: the partition does not matter
    a = canonical({**base, "method": "centralized", "partition": {"kind": "classes_per_client", "k": 2}})
    b = canonical({**base, "method": "centralized", "partition": {"kind": "iid"}})
    assert E.config_hash(a) == E.config_hash(b)
    # FedTAN-II that never switches is FedTAN
    c = canonical({**base, "method": "fedtan2", "method_options": {"switch": 10}, "partition": {"kind": "iid"}})
    d = canonical({**base, "method": "fedtan", "partition": {"kind": "iid"}})
    assert E.config_hash(c) == E.config_hash(d)
    e = canonical({**base, "method": "fedtan2", "method_options": {"switch": 3}, "partition": {"kind": "iid"}})
    assert e["method"] == "fedtan2"
    with pytest.raises(ValueError, match="lacks"):
        canonical({"method": "fedtan"})


@pytest.mark.parametrize("eid", E.ids())
def test_every_committed_result_plots(eid):
    """The docs and notebooks draw each entry from its committed figures/<id>/result.json (where JSON
    has turned NaN into null): every plot must accept the stored result."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    from bnfl.experiments.runner import load_result

    stored = load_result(Path(__file__).resolve().parents[1] / "figures", eid)
    assert stored is not None, f"{eid}: no committed quick result in figures/"
    assert stored.profile == "quick"
    fig = E.plot(eid, stored)
    assert fig.axes
    plt.close(fig)
