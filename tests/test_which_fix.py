"""bnfl.which_fix: the which-fix page's table, its numbers computed from the engine and committed results."""

from __future__ import annotations

from pathlib import Path

import pytest

from bnfl import which_fix as W

FIGURES = Path(__file__).resolve().parents[1] / "figures"


@pytest.fixture(scope="module")
def comm():
    return W.communication()


def test_communication_is_what_the_accounting_counts(comm):
    from bnfl.fl import comm_volume
    from bnfl.methods import get
    from bnfl.models import build

    for m in ("fedavg+bn", "fedtan", "fixbn", "fedbn", "fedavg+gn"):
        model = build("q_mlp_bn", norm=get(m).norm)
        closed = comm_volume(model, 5, m, iterations=1)
        assert comm[m]["bytes"] == closed.bytes and comm[m]["rounds"] == closed.rounds, m
    assert comm["fedtan"]["rounds"] == 3 * 2 + 1  # 3L+1 for Q-MLP-BN's two BN layers
    assert comm["fedbn"]["vs_bn"] < 1 < comm["fedtan"]["vs_bn"]
    assert comm["hbn"]["bytes"] > 0  # HBN has no closed form: counted by the channel


def test_engines_follow_the_algorithms():
    assert "Flower" not in W.engines("fedtan") and "torch.distributed" in W.engines("fedtan")
    for m in W.METHODS:
        assert W.engines(m)[0] == "sequential" and "batched" in W.engines(m)
    assert "Flower" in W.engines("fedbn")


def test_headlines_and_benchmark_read_the_committed_results(tmp_path):
    heads = W.headlines(FIGURES)
    assert set(heads) == set(W.METHODS)
    for m, h in heads.items():
        assert h["profile"] == "quick" and "–" not in h["ours"].split(" vs ")[0], (m, h)
    bench = W.benchmark(FIGURES)
    assert bench is not None and bench["seeds"] >= 5 and len(bench["settings"]) == 3
    assert all(set(bench["cells"][m]) == set(bench["settings"]) for m in W.METHODS)
    assert W.benchmark(tmp_path) is None and W.headlines(tmp_path)["fedtan"]["ours"] == "not computed"


def test_markdown_has_every_row_and_section(comm):
    text = W.markdown(FIGURES, comm=comm)
    for label in ("FedTAN", "HBN", "FixBN", "FedBN", "FedAvg+GN"):
        assert f"**{label}**" in text
    for heading in ("### The decision table", "### Privacy, cost and assumptions", "### Headline numbers"):
        assert heading in text
    bench = W.benchmark_markdown(FIGURES)
    assert "FedAvg+BN, iid split" in bench and ": reproduced)" in bench  # the headline's words
    assert "not computed yet" in W.benchmark_markdown(Path("/nonexistent"))


def test_headlines_spell_methods_and_intervals_one_way():
    """The headline table names a baseline as the method table does (not a paper's "FEDAVG +BN")
    and writes every "mean ± spread" with spaces, the paper's cells as ours."""
    import re

    from bnfl.which_fix import headlines

    heads = headlines(FIGURES)
    text = " ".join(h["paper"] + " " + h["ours"] for h in heads.values())
    assert "FEDAVG" not in text and " BN " not in f" {text} "
    assert re.findall(r"\S±|±\S", text) == []
    assert heads["fixbn"]["paper"].split(" vs ")[1].startswith("FedAvg+BN ")
