"""Which run is better, in one command: ``bnfl plot DIR... --baseline METHOD`` prints each
configuration's final test accuracy minus the baseline's, paired by seed, with the 95% t-interval
in points and a verdict word; the legend shows method labels; without ``--out`` the figure goes
next to the runs, not into the current folder; a single seed reads as one seed, not "seeds 0".

Before (bnfl at e5220bf): ``--baseline`` did not exist (exit 2, argparse), the legend showed ids
(``fedavg+bn``), the default ``--out`` was ``curves.png`` in the current folder, and the seeds
column of one seed read ``0``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bnfl import cli, fl, runs
from bnfl.intervals import t_interval

TINY = {"method": "fedavg+bn", "rounds": 3, "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
        "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 4},
        "train": {"local_steps": 1, "batch_size": 16, "progress": False}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for s in (0, 1, 2):
        fl.run({**TINY, "seed": s, "out": str(root / "bn" / f"seed{s}")})
        fl.run({**TINY, "method": "fedtan", "seed": s, "out": str(root / "tan" / f"seed{s}")})
    fl.run({**TINY, "method": "fedprox", "seed": 7, "out": str(root / "prox")})
    return root


def _final(folder: Path) -> float:
    return 100 * next(r["test_acc"] for r in reversed(runs.load_run(folder).rows) if r.get("test_acc") is not None)


def test_baseline_prints_the_paired_difference_with_the_reports_interval(folders, tmp_path, capsys) -> None:
    out = tmp_path / "c.png"
    assert cli.main(["plot", str(folders / "bn"), str(folders / "tan"), "--baseline", "fedavg+bn",
                     "--out", str(out)]) == 0
    text = capsys.readouterr().out
    diffs = [_final(folders / "tan" / f"seed{s}") - _final(folders / "bn" / f"seed{s}") for s in (0, 1, 2)]
    iv = t_interval(diffs)
    word = "better" if iv.low > 0 else "worse" if iv.high < 0 else "inconclusive"
    line = next(line for line in text.splitlines() if line.strip().startswith("fedtan ") and "pts" in line)
    assert f"{iv.estimate:+.1f} [{iv.low:.1f}, {iv.high:.1f}] pts, {word}" in line and "(3 seeds)" in line
    assert "paired by seed" in text and "Interval(" not in text


def test_baseline_by_label_and_the_python_call_agree(folders) -> None:
    both = runs.find_runs([folders / "bn", folders / "tan"])
    by_id, by_label = runs.compare_to(both, "fedavg+bn"), runs.compare_to(both, "FedAvg+BN")
    assert [str(d) for d in by_id] == [str(d) for d in by_label]
    d = by_id[0]
    assert d.run == "fedtan" and d.baseline == "fedavg+bn" and d.seeds == [0, 1, 2] and d.interval.n == 3
    assert str(d).startswith("fedtan vs fedavg+bn: ") and str(d).endswith("pts, " + d.word + " (3 seeds)")


def test_baseline_without_shared_seeds_says_what_to_train(folders) -> None:
    diffs = runs.compare_to(runs.find_runs([folders / "bn", folders / "prox"]), "fedavg+bn")
    assert diffs[0].interval is None and "same --seed" in diffs[0].word


def test_an_unknown_baseline_is_one_line_with_a_suggestion(folders, capsys) -> None:
    assert cli.main(["plot", str(folders / "bn"), str(folders / "tan"), "--baseline", "fedtn",
                     "--out", str(folders / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'fedtan'?" in err and "fedavg+bn, fedtan" in err


def test_the_figure_goes_next_to_the_runs_and_the_legend_shows_labels(folders, tmp_path, capsys) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert cli.main(["plot", str(folders / "bn"), str(folders / "tan")]) == 0
        assert cli.main(["plot", str(folders / "prox")]) == 0
    finally:
        os.chdir(cwd)
    assert not list(tmp_path.iterdir())  # nothing in the current folder
    assert (folders / "curves.png").is_file() and (folders / "prox-curves.png").is_file()
    assert not (folders / "prox" / "curves.png").exists()  # the run folder stays the run's
    fig = runs.plot_runs(runs.find_runs([folders / "bn", folders / "prox"]))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["FedAvg+BN (3 seeds, 95% interval)", "FedProx+BN"]


def test_one_seed_reads_as_one_seed(folders) -> None:
    text = runs.format_comparison(runs.compare(runs.find_runs([folders / "prox"])))
    assert "7 (1 seed)" in text.splitlines()[2]


def test_a_loaded_run_compares_itself_and_others_against_a_baseline(folders) -> None:
    tan, *rest = runs.find_runs([folders / "tan", folders / "bn"])
    diffs = tan.compare(*rest, baseline="fedavg+bn")
    assert [str(d) for d in diffs] == [str(d) for d in runs.compare_to([tan, *rest], "fedavg+bn")]
    assert len(diffs) == 1 and str(diffs[0]).startswith("fedtan vs fedavg+bn: ") and "(3 seeds)" in str(diffs[0])
    with pytest.raises(ValueError, match="did you mean 'fedavg\\+bn'"):
        tan.compare(*rest, baseline="fedavg+b")
