"""The one per-seed claim (claims.per_seed_claim) that the papers' entries call: an interval over 2+
seeds, paired by seed; one test sample as the noise floor with one seed; lengths checked."""

from __future__ import annotations

import pytest

from bnfl.experiments.claims import per_seed_claim


def test_several_seeds_give_a_paired_interval():
    c = per_seed_claim("gap", "FedBN >= FedAvg", [80.0, 82.0, 81.0], 0.0, baseline=[70.0, 73.0, 71.0],
                       seeds=[0, 1, 2], n_test=360)
    assert c.verdict == "pass" and c.interval["paired"] and c.interval["seeds"] == [0, 1, 2]
    assert c.interval["values"] == pytest.approx([10.0, 9.0, 10.0])


def test_one_seed_is_judged_against_one_test_sample():
    near = per_seed_claim("gap", "s", [70.2], 0.0, baseline=[70.0], seeds=[0], n_test=360)
    far = per_seed_claim("gap", "s", [69.0], 0.0, baseline=[70.0], seeds=[0], n_test=360, side="above")
    assert near.verdict == "inconclusive" and near.noise == pytest.approx(100 / 360) and near.interval is None
    assert far.verdict == "fail"
    assert per_seed_claim("gap", "s", [69.0], 0.0, baseline=[70.0], seeds=[0], side="below").verdict == "pass"


def test_values_must_match_the_seeds():
    with pytest.raises(ValueError, match="one per seed"):
        per_seed_claim("gap", "s", [1.0, 2.0], 0.0, seeds=[0, 1, 2])
