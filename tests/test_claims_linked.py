"""A claim that re-reads another entry's measurement is shown but counted once (issue 25, item 6)."""

from __future__ import annotations

import pytest

from bnfl.experiments.claims import Claim, at_least, linked
from bnfl.experiments.core import Result
from bnfl.experiments.dashboard import kind_counts
from bnfl.experiments.report import claim_counts, claim_rows


def _result(entry: str, claims: list[Claim]) -> Result:
    return Result(id=entry, title=entry, profile="quick", seeds=[0], rows=[], paper=[], claims=claims,
                  runs={"x": 1.0})


def test_linked_claim_is_counted_in_its_own_entry_only():
    own = at_least("gap", "FedBN beats FedAvg", 2.0, 0.0)
    again = linked(at_least("gap", "FedBN beats FedAvg", 2.0, 0.0), "fedbn-tab11")
    results = [_result("fedbn-tab11", [own]), _result("fedbn-fig5", [again])]
    assert claim_counts(results)["reproduced"] == 1  # counted reproduction claims read as the headline's words
    assert kind_counts(results)["fedbn"]["reproduction"]["reproduced"] == 1
    assert again.verdict == "pass" and results[1].verdict == "pass"  # the entry still shows it
    assert "fedbn-tab11" in claim_rows(results[1])[0]["check"]


def test_linked_round_trips_and_stays_out_of_unlinked_json():
    c = linked(at_least("gap", "s", 1.0, 0.0), "fedbn-tab13")
    assert Claim.from_dict(c.to_dict()) == c
    assert "counted_in" not in at_least("gap", "s", 1.0, 0.0).to_dict()


@pytest.mark.parametrize("bad", ["", None, 3])
def test_linked_refuses_a_missing_entry(bad):
    with pytest.raises(ValueError, match="entry id"):
        linked(at_least("gap", "s", 1.0, 0.0), bad)
