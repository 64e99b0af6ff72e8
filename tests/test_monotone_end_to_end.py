"""A monotone check judged by intervals, end to end (issue 25 item 1): the end-to-end change's 95%
interval decides when no single step is resolved: wholly on the wrong side => fail, containing 0 =>
inconclusive, wholly on the claimed side => pass. Checked through the claim helpers the entries call
(``claims.monotone`` with per-seed columns, FedTAN/FixBN's ``Seeds.monotone``) and through one entry's
own claim function (fixbn-fig5's "GN - BN decreases in E"), on synthetic per-seed values (no training).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from bnfl.experiments import claims  # noqa: E402
from bnfl.experiments.evidence import Seeds  # noqa: E402
from bnfl.experiments.interval_claims import interval_monotone  # noqa: E402

SEEDS = [0, 1, 2, 3, 4]
# Seed noise: the middle setting is noisy (no step is resolved), the two ends move together (the
# end-to-end paired difference is resolved).
_E0 = [0.0, 0.1, -0.1, 0.05, -0.05]
_E1 = [2.0, -2.0, 1.5, -1.5, 0.0]
_E2 = [e + d for e, d in zip(_E0, [0.1, -0.1, 0.05, -0.05, 0.0], strict=True)]


def _columns(step: float) -> list[list[float]]:
    """Three settings 70, 70 + step, 70 + 2 step, with the seed noise above."""
    return [[70 + e for e in _E0], [70 + step + e for e in _E1], [70 + 2 * step + e for e in _E2]]


def _steps_unresolved(c: claims.Claim) -> bool:
    return not any(s["violation"] for s in c.interval["steps"]) and all(
        s["low"] < 0 < s["high"] for s in c.interval["steps"])


@pytest.mark.parametrize("how", ["claims.monotone", "Seeds.monotone", "interval_monotone"])
def test_the_end_to_end_interval_decides_a_rising_claim(how):
    def judge(cols, **kw):
        if how == "claims.monotone":
            return claims.monotone("m", "rises", cols, interval={"seeds": SEEDS, "n_test": 5000}, **kw)
        if how == "Seeds.monotone":
            return Seeds(SEEDS).monotone("m", "rises", cols, **kw)
        return interval_monotone("m", "rises", cols, seeds=SEEDS, **kw)

    wrong = judge(_columns(-1.0))  # falls 2 pts end to end, no single step resolved
    assert _steps_unresolved(wrong)
    assert wrong.interval["high"] < 0
    assert wrong.verdict == "fail" and wrong.margin < 0
    assert "end to end" in wrong.why and "wrong side" in wrong.why

    inside = judge(_columns(0.0))  # flat: the end-to-end interval holds 0
    assert inside.interval["low"] < 0 < inside.interval["high"]
    assert inside.verdict == "inconclusive"

    right = judge(_columns(1.0))  # rises 2 pts end to end
    assert _steps_unresolved(right) and right.interval["low"] > 0
    assert right.verdict == "pass" and right.margin > 0

    # "non-increasing" is the mirror image
    down = judge(_columns(-1.0), increasing=False)
    assert down.verdict == "pass"
    assert judge(_columns(1.0), increasing=False).verdict == "fail"


def test_a_wrong_way_total_within_the_step_tolerance_is_unresolved_not_failed():
    # each step may fall by up to 1.5 pts: a resolved 0.5-pt fall end to end is within that allowance
    cols = _columns(-0.25)
    c = interval_monotone("m", "rises", cols, tolerance=1.5, seeds=SEEDS)
    assert c.interval["high"] < 0 and c.verdict == "inconclusive"
    # beyond the allowance it fails
    assert interval_monotone("m", "rises", _columns(-1.0), tolerance=1.5, seeds=SEEDS).verdict == "fail"


def test_claims_monotone_takes_per_seed_columns_or_plain_values():
    plain = claims.monotone("m", "rises", [1.0, 2.0, 3.0])
    assert plain.verdict == "pass" and plain.interval is None
    per_seed = claims.monotone("m", "rises", _columns(1.0), labels=["a", "b", "c"],
                               interval={"seeds": SEEDS, "n_test": 360})
    assert per_seed.interval["seeds"] == SEEDS and per_seed.interval["n_test"] == 360
    assert [s["from"] for s in per_seed.interval["steps"]] == ["a", "b"]
    with pytest.raises(ValueError, match="one value per seed"):
        claims.monotone("m", "rises", [[1.0, 2.0], [1.0, 2.0, 3.0]])


def test_fixbn_fig5_gap_falls_claim_fails_when_the_gap_rises_end_to_end():
    """fixbn-fig5's claim function on synthetic runs: GN - BN must fall in E; one step may violate."""
    from bnfl.experiments.papers.fixbn.esweep import _gap_falls

    es = [1, 5, 20]

    def runs_for(gaps_by_e):
        out = {}
        for e, gaps in zip(es, gaps_by_e, strict=True):
            out[("G", "P", "fedavg+bn", e, "steps")] = [{"test_acc": [50.0], "n_test": 360} for _ in SEEDS]
            out[("G", "P", "fedavg+gn", e, "steps")] = [{"test_acc": [50.0 + g], "n_test": 360} for g in gaps]
        return out

    ev = Seeds(SEEDS)
    rising = _gap_falls(ev, runs_for(_columns(1.0)), "G", "P", es, "gap-falls")  # the gap grows with E
    assert rising.verdict == "fail" and "end to end" in rising.why
    falling = _gap_falls(ev, runs_for(_columns(-1.0)), "G", "P", es, "gap-falls")
    assert falling.verdict == "pass"
    flat = _gap_falls(ev, runs_for(_columns(0.0)), "G", "P", es, "gap-falls")
    assert flat.verdict == "inconclusive"
