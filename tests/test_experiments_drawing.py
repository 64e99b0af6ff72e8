"""The figure helpers the paper entries share (bnfl.experiments.drawing)."""

import math

import matplotlib
import pytest

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


def test_line_panels_draws_stored_keys_in_numeric_order_and_skips_missing_points():
    """A stored result keeps a curve's x values as text ("16" sorts before "2"); the line must run in numeric
    order, a null (NaN in memory) draws no point, and each line takes its method's colour."""
    from matplotlib.colors import to_hex

    from bnfl.experiments.drawing import line_panels
    from bnfl.plots import color_for

    curves = {"BN": {"16": 80.0, "2": 60.0, "4": None}, "HBN": {"16": 82.0, "2": 79.0, "4": 81.0}}
    fig = line_panels([{"curves": curves, "xlabel": "batch size B", "log_base": 2, "title": "phi = 0.6"},
                       {"curves": {"BN": {0.1: 50.0, 1.0: 70.0}}, "xlabel": "phi", "ticks": False}],
                      rows={"BN": "fedavg+bn", "HBN": "hbn"}, title="t", ylabel="acc", legend=1)
    left, right = fig.axes[:2]
    bn, hbn = left.get_lines()
    assert list(bn.get_xdata()) == [2.0, 4.0, 16.0] and math.isnan(bn.get_ydata()[1])
    assert list(hbn.get_ydata()) == [79.0, 81.0, 82.0]
    assert to_hex(bn.get_color()) == to_hex(color_for("fedavg+bn")) and bn.get_label() == "BN"
    assert [t.get_text() for t in left.get_xticklabels()] == ["2", "4", "16"] and left.get_xscale() == "log"
    assert left.get_title() == "phi = 0.6" and left.get_ylabel() == "acc" and right.get_legend() is not None
    assert left.get_legend() is None and right.get_xscale() == "linear"
    matplotlib.pyplot.close(fig)


def test_line_panels_labels_a_log_axis_at_its_points_only():
    """Within one decade a log axis labels its minor ticks (3 x 10^-3, 4 x 10^-3, ...) beside the points'
    own labels, and they overlapped (hbn-tab8/9/10's learning-rate grids)."""
    from bnfl.experiments.drawing import line_panels

    fig = line_panels([{"curves": {"BN": {0.002: 90.0, 0.005: 95.0, 0.01: 96.0, 0.02: 97.0}}, "xlabel": "lr",
                        "log_base": 10}], rows={"BN": "fedavg+bn"}, title="t", ylabel="acc")
    fig.canvas.draw()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.002", "0.005", "0.01", "0.02"]
    assert not [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]
    matplotlib.pyplot.close(fig)


def test_grouped_bars_marks_a_diverged_cell_and_labels_each_bar():
    from matplotlib.colors import to_hex

    from bnfl.experiments.drawing import grouped_bars

    table = {"FedAvg": {"base": 70.0, "HBN": 75.0}, "FedProx": {"base": None, "HBN": float("nan")}}
    fig = grouped_bars(["FedAvg", "FedProx"], table, ["base", "HBN"], title="t",
                       colors={"base": "#BBBBBB", "HBN": "#332288"}, labels={"HBN": "+HBN"})
    ax = fig.axes[0]
    base, hbn = ax.containers
    assert base.get_label() == "base" and hbn.get_label() == "+HBN"
    assert [p.get_height() for p in base.patches][0] == 70.0 and math.isnan(base.patches[1].get_height())
    assert to_hex(hbn.patches[0].get_facecolor()) == "#332288"
    assert [t.get_text() for t in ax.texts] == ["diverged", "diverged"]  # both FedProx bars
    assert ax.get_ylim() == (60.0, 100.0) and [t.get_text() for t in ax.get_xticklabels()] == ["FedAvg", "FedProx"]
    matplotlib.pyplot.close(fig)


def test_table_figure_writes_each_cell_as_text_under_its_header():
    from bnfl.experiments.drawing import table_figure

    rows = [{"block": "Block 1", "n": 16, "extra": "not shown"}, {"block": "Block 2", "n": None}]
    fig = table_figure(rows, ["block", "n"], title="layers", col_widths=[0.3, 0.7])
    ax = fig.axes[0]
    cells = ax.tables[0].get_celld()
    assert [cells[0, j].get_text().get_text() for j in range(2)] == ["block", "n"]
    assert [[cells[i, j].get_text().get_text() for j in range(2)] for i in (1, 2)] == [["Block 1", "16"], ["Block 2", "None"]]
    assert (1, 2) not in cells and ax.get_title() == "layers" and cells[1, 1].get_width() > cells[1, 0].get_width()
    matplotlib.pyplot.close(fig)


def test_grouped_bars_places_one_bar_per_name_in_each_group_and_skips_missing_spread():
    from bnfl.experiments.drawing import grouped_bars_on

    fig, ax = new_figure(1, 1, width=4.0, height=3.0)
    grouped_bars_on(ax, ["g1", "g2"], {"A": [10.0, 20.0], "B": [30.0, 40.0]}, colors={"A": "#000000", "B": "#FFFFFF"},
                 errors={"A": [1.0, None], "B": [float("nan"), 2.0]}, title="t")
    a, b = (c for c in ax.containers if c.get_label() in ("A", "B"))
    assert [p.get_height() for p in a.patches] == [10.0, 20.0] and [p.get_height() for p in b.patches] == [30.0, 40.0]
    # the two bars of a group sit side by side, 0.8 wide together, centred on the group
    for pa, pb, centre in zip(a.patches, b.patches, (0, 1), strict=True):
        assert pa.get_x() + pa.get_width() == pytest.approx(pb.get_x())
        assert pa.get_x() == pytest.approx(centre - 0.4) and pb.get_x() + pb.get_width() == pytest.approx(centre + 0.4)
    assert a.errorbar is not None and ax.get_ylim() == (0.0, 100.0) and ax.get_title() == "t"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["g1", "g2"]
    matplotlib.pyplot.close(fig)


def test_line_panels_styles_lines_by_label_prefix_and_own_keywords():
    from bnfl.experiments.drawing import series_panels

    styles = {"FedBN": {"color": "#CC79A7"}, "FedAvg": {"color": "#0072B2"}}
    fig = series_panels([("p1", {"FedBN": ([1, 2], [3.0, 2.0]), "FedBN (mini-batches)": ([1, 2], [4.0, 3.0], {"ls": "--"})}),
                       ("p2", {"FedAvg": ([1, 4, 16], [1.0, 2.0, 3.0])})],
                      "title", styles=styles, xlabel=["a", "b"], ylabel="loss", logy=True, log_x=2, xticks=True,
                      legend_panel=1)
    a1, a2 = fig.axes
    (l1, l2), (l3,) = a1.get_lines(), a2.get_lines()
    assert l1.get_color() == l2.get_color() == "#CC79A7" and l3.get_color() == "#0072B2"
    assert l1.get_linestyle() == "-" and l2.get_linestyle() == "--"
    assert a1.get_yscale() == "log" and a2.get_xscale() == "log" and a1.get_xlabel() == "a" and a2.get_xlabel() == "b"
    assert [t.get_text() for t in a2.get_xticklabels()] == ["1", "4", "16"]
    assert a1.get_ylabel() == "loss" and a1.get_legend() is None and a2.get_legend() is not None
    matplotlib.pyplot.close(fig)


def test_table_figure_draws_the_chosen_columns_and_shades_rows():
    from bnfl.experiments.core import Result
    from bnfl.experiments.drawing import rows_figure

    rows = [{"layer": "1", "text": "Conv", "note": ""}, {"layer": "2", "text": "FC", "note": "differs"}]
    result = Result(id="x-tab1", title="t", profile="smoke", seeds=[0], rows=rows, paper=[], claims=[])
    fig = rows_figure(result, "T", columns=["layer", "text"], headers=["L", "printed"], shade=lambda r: bool(r["note"]))
    table = fig.axes[0].tables[0]
    cells = table.get_celld()
    assert cells[0, 0].get_text().get_text() == "L" and cells[0, 1].get_text().get_text() == "printed"
    assert cells[2, 1].get_text().get_text() == "FC" and (2, 2) not in cells
    assert cells[2, 0].get_facecolor() != cells[1, 0].get_facecolor()
    assert fig.axes[0].get_title() == "T"
    matplotlib.pyplot.close(fig)


def test_bar_figure_is_one_panel_of_grouped_bars_with_its_legend():
    from bnfl.experiments.drawing import bar_figure

    fig = bar_figure(["x", "y", "z"], {"A": [1.0, 2.0, 3.0], "B": [4.0, 5.0, 6.0]}, "T", colors={"A": "#111111", "B": "#222222"},
                     ylabel="share (%)")
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["A", "B"]
    assert ax.get_title() == "T" and ax.get_ylabel() == "share (%)" and len(ax.patches) == 6
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
    from bnfl.experiments.drawing import series_bars
    from bnfl.plots import color_for

    fig, ax = new_figure(1, 1, width=4.0, height=3.0)
    series_bars(ax, ["IID", "Shards"], {"FedAvg+BN": [60.0, 40.0], "FixBN": [61.0, 55.0]},
                 colors={"FedAvg+BN": "fedavg+bn"})
    bn, fix = ax.containers
    assert [p.get_height() for p in bn.patches] == [60.0, 40.0] and [p.get_height() for p in fix.patches] == [61.0, 55.0]
    for tick, a, b in zip(ax.get_xticks(), bn.patches, fix.patches, strict=True):  # centred on the group's tick
        assert math.isclose((a.get_x() + b.get_x() + b.get_width()) / 2, tick, abs_tol=1e-9)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["IID", "Shards"]
    assert matplotlib.colors.same_color(bn.patches[0].get_facecolor(), color_for("fedavg+bn"))
    assert matplotlib.colors.same_color(fix.patches[0].get_facecolor(), color_for("FixBN"))
    matplotlib.pyplot.close(fig)
