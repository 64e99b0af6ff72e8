"""Per-seed claims of FedTAN's and FixBN's entries: intervals stored, one-seed fallback, first-hit
tolerance (fedtan-fig10), init cells (fedtan-fig4/tab1) and claims counted once. Nothing trains."""

from __future__ import annotations

import math

import pytest

from bnfl.experiments.evidence import Seeds, finals, rounds_to_each

SEEDS = [0, 1, 2]


def _run(acc, n_test=360, rounds=None, mib=None):
    rounds = rounds or list(range(1, len(acc) + 1))
    return {"test_acc": list(acc), "round": rounds, "n_test": n_test, "diverged": False, "comm_rounds": rounds,
            "bytes_total": [int(m * 1024**2) for m in (mib or rounds)]}


def test_paired_claim_stores_its_interval():
    ev = Seeds(SEEDS, [_run([50.0])])
    a, b = [80.0, 82.0, 81.0], [70.0, 71.5, 70.5]
    c = ev.at_least("gap", "a - b >= 8", a, 8.0, baseline=b)
    assert c.verdict == "pass"
    iv = c.interval
    assert iv["paired"] is True and iv["seeds"] == SEEDS and iv["n_test"] == 360
    assert iv["values"] == pytest.approx([10.0, 10.5, 10.5])
    assert iv["low"] > 8.0
    # A difference whose interval straddles the threshold is inconclusive, never pass.
    c2 = ev.at_least("gap", "a - b >= 10.2", a, 10.2, baseline=b)
    assert c2.verdict == "inconclusive" and c2.interval["detectable_effect"] > 0
    c3 = ev.at_most("below", "a - b <= 0", a, 0.0, baseline=b)
    assert c3.verdict == "fail"


def test_versus_judges_two_methods_runs_paired_by_seed_and_names_their_means():
    ev = Seeds(SEEDS, [_run([50.0])])
    fix, bn = [_run([70.0, v]) for v in (80.0, 82.0, 81.0)], [_run([60.0, v]) for v in (70.0, 71.5, 70.5)]
    c = ev.versus("fixbn-bn", "FixBN >= BN + 8", fix, bn, 8.0, names=("FixBN", "BN"))
    same = ev.at_least("fixbn-bn", "FixBN >= BN + 8", [80.0, 82.0, 81.0], 8.0, baseline=[70.0, 71.5, 70.5])
    assert c.verdict == same.verdict == "pass" and c.interval == same.interval
    assert c.detail == "FixBN 81.00 vs BN 70.67"
    below = ev.versus("bn-fixbn", "BN <= FixBN - 8", bn, fix, -8.0, names=("BN", "FixBN"), below=True, why="w")
    assert below.verdict == "pass" and below.detail == "BN 70.67 vs FixBN 81.00"
    assert ev.versus("x", "BN >= FixBN", bn, fix, names=("BN", "FixBN"), why="BN trails").why.startswith("BN trails")


def test_within_and_monotone_use_intervals():
    ev = Seeds(SEEDS, [_run([50.0])])
    w = ev.within("near", "|a - b| <= 2", [90.0, 91.0, 90.5], [90.2, 90.8, 90.4], 2.0)
    assert w.verdict == "pass" and w.interval is not None
    # A wrong-way step smaller than its interval is no violation (a noisy plateau, then a clear rise).
    cols = [[50.0, 52.0, 48.0], [49.0, 53.5, 47.0], [70.0, 71.0, 69.0]]
    m = ev.monotone("up", "rises", cols, increasing=True)
    assert m.verdict == "pass" and len(m.interval["steps"]) == 2
    assert not any(s["violation"] for s in m.interval["steps"])
    # A step that falls by far more than its interval is one.
    bad = [[70.0, 71.0, 69.0], [50.0, 51.0, 49.5], [52.0, 53.0, 51.0]]
    assert ev.monotone("up", "rises", bad, increasing=True).verdict == "fail"


def test_one_seed_falls_back_to_one_test_sample():
    ev = Seeds([0], [_run([50.0], n_test=400)])
    assert ev.one_sample == pytest.approx(0.25)
    c = ev.at_least("gap", "a - b >= 0", [50.2], 0.0, baseline=[50.0])
    assert c.verdict == "inconclusive" and c.interval is None  # 0.2 pts < one test sample
    assert ev.at_least("gap", "a - b >= 0", [51.0], 0.0, baseline=[50.0]).verdict == "pass"
    with pytest.raises(ValueError, match="one number per seed"):
        ev.at_least("gap", "x", [1.0, 2.0], 0.0)


def test_first_hit_tolerance_fedtan_fig10():
    from bnfl.experiments.evidence import first_hits

    ev = Seeds(SEEDS, [_run([1.0], n_test=360)])
    gn = [_run([60.0, 80.0, 90.0], mib=[1, 2, 3]), _run([60.0, 81.0, 90.3], mib=[1, 2, 3]),
          _run([60.0, 79.0, 89.7], mib=[1, 2, 3])]
    # FedTAN ends 0.18 pts under seed 0's target: within one test sample (0.28 pts) it has reached it.
    tan = [_run([85.0, 89.82], mib=[0.5, 1.0]), _run([90.3, 90.3], mib=[0.5, 1.0]), _run([80.0, 89.7], mib=[0.5, 1.0])]
    hit, gn_hit, targets, tol = first_hits(ev, tan, gn, x="mib")
    assert targets == [90.0, 90.3, 89.7]
    assert tol >= 100 / 360
    assert all(math.isfinite(v) for v in hit)
    assert hit == [1.0, 0.5, 1.0] and gn_hit == [3.0, 3.0, 3.0]
    # Without a tolerance the 0.18 shortfall would read as "never": the old, infinite bits.
    assert math.isinf(rounds_to_each(tan[:1], [90.0], x="mib")[0])


def test_fig4_init_cells_and_links(monkeypatch):
    """fedtan-fig4 runs the headline He-normal cells and the PyTorch-init non-iid cells; FedBN's claim
    is relative to FedAvg+BN; fedtan-fig5's k=2 FedBN claim links to fig4."""
    from bnfl.experiments.core import Context
    from bnfl.experiments.papers.fedtan import noniid

    seen = []

    def fake_train_runs(ctx, spec):
        seen.append(spec)
        k = spec["method"]
        base = {"fedbn": 30.0, "fedavg+bn": 78.0, "silobn": 60.0, "fedtan": 95.0, "centralized": 97.0}.get(k, 93.0)
        if spec["partition"].get("kind") == "iid":
            base = 97.0
        if spec["model"].get("init") == "he_normal":
            base -= 1.0
        return [dict(_run([base - 2, base + 0.1 * s]), train_loss=[0.1, 0.05]) for s in SEEDS]

    def fake_tuned_runs(ctx, spec, tune):  # the fair-rate claims: one tuning per compared method
        from bnfl.experiments.tuning import Tuned

        tuned.append((spec["method"], spec["partition"].get("kind"), spec["data"]["name"]))
        return Tuned(0.1, {lr: 50.0 for lr in tune["grid"]}, (0, 1, 2), 0.2), fake_train_runs(ctx, spec)

    tuned = []
    from bnfl.experiments.papers.fedtan import fair

    monkeypatch.setattr(noniid, "train_runs", fake_train_runs)
    monkeypatch.setattr(fair, "tuned_runs", fake_tuned_runs)
    ctx = Context(profile="quick", seeds=SEEDS)
    from bnfl.experiments.registry import get

    config = get("fedtan-fig4").config("quick")
    out = noniid.compute_fig4(ctx, config)
    nc = "classes_per_client"
    assert sorted(tuned) == sorted([("centralized", "iid", "digits"), ("fedavg+bn", "iid", "digits"),  # row 3 too
                                    ("fedavg+bn", nc, "digits"), ("fedavg+bn", nc, "mnist5k"), ("fedbn", nc, "digits"),
                                    ("fedbn", nc, "mnist5k"), ("fedtan", "iid", "digits")])  # row 4 on MNIST-5K
    inits = {(s["partition"].get("kind"), s["model"].get("init", "pytorch")) for s in seen}
    assert ("iid", "he_normal") in inits and ("classes_per_client", "pytorch") in inits
    assert ("iid", "pytorch") not in inits  # the second init only in the non-iid cells
    # The PyTorch-init cells use the spec other entries train (no init key), so the run cache shares them.
    assert all("init" not in s["model"] for s in seen if s["model"].get("init", "pytorch") == "pytorch")
    claims = {c.name: c for c in out["claims"]}
    assert {"fair-iid-fedtan", "fair-iid-fedtan-fedavg+bn", "fair-iid-both", "fair-fedbn"} <= set(claims)  # rows 3, 4
    assert claims["fedbn"].verdict == "pass" and claims["fedbn"].interval["paired"]
    assert "fedbn-pytorch-init" in claims and "silobn-pytorch-init" in claims
    assert all(c.interval is not None for c in out["claims"] if c.verdict != "info")
    assert any("PyTorch" in str(r.get("init", "")) for r in out["rows"])

    f5 = noniid.compute_fig5(ctx, get("fedtan-fig5").config("quick"))
    k2 = next(c for c in f5["claims"] if c.name == "fedbn-k2")
    assert k2.counted_in == "fedtan-fig4"


def test_finals_reads_last_value_and_nan_for_diverged():
    runs = [_run([1.0, 2.0]), {**_run([3.0]), "diverged": True}]
    out = finals(runs)
    assert out[0] == 2.0 and math.isnan(out[1])
