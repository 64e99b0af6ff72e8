"""The figure helpers the paper entries share (bnfl.experiments.drawing)."""

import math

import matplotlib

matplotlib.use("Agg")

from bnfl.experiments.drawing import ours_beside_paper  # noqa: E402
from bnfl.plots import new_figure  # noqa: E402


def test_ours_beside_paper_draws_two_bars_per_name_and_skips_missing_cells():
    fig, ax = new_figure(1, 1, width=4.0, height=3.0)
    # a stored result writes a cell without a number as null: it must draw no bar, not fail
    ours_beside_paper(ax, ["a", "b", "c"], [10.0, None, 30.0], [12.0, 20.0, float("nan")], profile="quick",
                      paper_label="paper (Table 1)", yerr=[1.0, None, float("nan")])
    bars = [c for c in ax.containers if c.get_label() in ("ours (quick)", "paper (Table 1)")]
    ours, paper = bars
    assert ours.get_label() == "ours (quick)" and paper.get_label() == "paper (Table 1)"
    h_ours = [p.get_height() for p in ours.patches]
    h_paper = [p.get_height() for p in paper.patches]
    assert h_ours[0] == 10.0 and math.isnan(h_ours[1]) and h_ours[2] == 30.0
    assert h_paper[:2] == [12.0, 20.0] and math.isnan(h_paper[2])
    assert all(p.get_x() + p.get_width() <= q.get_x() + 1e-9 for p, q in zip(ours.patches, paper.patches, strict=True))  # ours left
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert ax.get_ylim() == (0.0, 100.0) and ax.get_ylabel() == "test accuracy (%)"
    matplotlib.pyplot.close(fig)


def test_a_stored_one_seed_result_plots_its_per_domain_bars():
    """A one-seed run (smoke, or --seeds 1) has no spread: NaN in memory, null once stored. fedbn-fig5,
    -tab11 and -tab12 draw their error bars from it (``bnfl plot`` on a smoke folder failed with a
    TypeError before)."""
    import dataclasses
    from pathlib import Path

    from bnfl import experiments as E
    from bnfl.experiments.runner import load_result

    for eid in ("fedbn-fig5", "fedbn-tab11", "fedbn-tab12"):
        stored = load_result(Path(__file__).resolve().parents[1] / "figures", eid)
        one_seed = {**stored.series, "std": {k: [None] * len(v) for k, v in stored.series["std"].items()}}
        fig = E.plot(eid, dataclasses.replace(stored, series=one_seed))
        assert fig.axes
        matplotlib.pyplot.close(fig)


def test_ours_beside_paper_figure_is_one_labelled_panel_with_its_legend_and_title():
    from bnfl.experiments.drawing import ours_beside_paper_figure

    fig = ours_beside_paper_figure(["GN", "BN"], [50.0, None], [60.0, 40.0], title="Table X (smoke profile)",
                                   profile="smoke", ylabel="mean IoU (%)", width=4.6, height=3.2)
    (ax,) = fig.axes
    assert fig._suptitle.get_text() == "Table X (smoke profile)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ours (smoke)", "paper"]
    assert ax.get_ylabel() == "mean IoU (%)" and [t.get_text() for t in ax.get_xticklabels()] == ["GN", "BN"]
    assert tuple(fig.get_size_inches()) == (4.6, 3.2)
    matplotlib.pyplot.close(fig)
    default = ours_beside_paper_figure(["a"], [1.0], [2.0], title="t", profile="quick")
    assert default.axes[0].get_ylabel() == "test accuracy (%)"
    matplotlib.pyplot.close(default)


def test_grouped_bars_centres_one_bar_per_series_on_each_group():
    from bnfl.experiments.drawing import grouped_bars
    from bnfl.plots import color_for

    fig, ax = new_figure(1, 1, width=4.0, height=3.0)
    grouped_bars(ax, ["IID", "Shards"], {"FedAvg+BN": [60.0, 40.0], "FixBN": [61.0, 55.0]},
                 colors={"FedAvg+BN": "fedavg+bn"})
    bn, fix = ax.containers
    assert [p.get_height() for p in bn.patches] == [60.0, 40.0] and [p.get_height() for p in fix.patches] == [61.0, 55.0]
    for tick, a, b in zip(ax.get_xticks(), bn.patches, fix.patches, strict=True):  # centred on the group's tick
        assert math.isclose((a.get_x() + b.get_x() + b.get_width()) / 2, tick, abs_tol=1e-9)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["IID", "Shards"]
    assert matplotlib.colors.same_color(bn.patches[0].get_facecolor(), color_for("fedavg+bn"))
    assert matplotlib.colors.same_color(fix.patches[0].get_facecolor(), color_for("FixBN"))
    matplotlib.pyplot.close(fig)
