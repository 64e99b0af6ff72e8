"""Toolkit helpers written for the FedTAN entries and open to every paper: printed tables typed as text
(bnfl.experiments.printed.printed_table) and accuracy lines over a swept setting
(bnfl.experiments.drawing.accuracy_lines)."""

import matplotlib
import pytest

matplotlib.use("Agg")

from bnfl.experiments.core import Result  # noqa: E402
from bnfl.experiments.drawing import accuracy_lines  # noqa: E402
from bnfl.experiments.printed import parse_mean_std, printed_table  # noqa: E402


def test_printed_table_keeps_cells_verbatim_and_skips_blank_lines():
    rows = printed_table("""
        FedTAN    | 89.32 ±0.28 | 1.02%
        FedAvg+GN | 85.99±0.71  | -0.51%

    """)
    assert rows == (("FedTAN", "89.32 ±0.28", "1.02%"), ("FedAvg+GN", "85.99±0.71", "-0.51%"))
    assert parse_mean_std(rows[1][1]) == (85.99, 0.71)
    assert printed_table("a ; b", sep=";") == (("a", "b"),)


def test_printed_table_refuses_ragged_rows():
    with pytest.raises(ValueError, match=r"\[2, 3\] cells"):
        printed_table("a | b\nc | d | e")


def _result(series):
    return Result(id="x-fig1", title="t", profile="smoke", seeds=[0], rows=[], paper=[], claims=[], series=series)


def test_accuracy_lines_draws_one_line_per_method_a_level_and_error_bars_where_known():
    series = {"k": [2, 4, 10], "central": 97.0, "fedtan": [95.0, 96.0, 96.5], "fedbn": [30.0, 60.0, 90.0],
              "fedtan_std": [1.0, None, float("nan")]}
    fig = accuracy_lines(_result(series), "k", {"fedtan": "FedTAN", "fedbn": "FedBN"}, xlabel="k", title="Fig. 5",
                         levels={"centralized": "central"}, log_base=2, ylim=(0, 100))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[1:] == ["FedTAN", "FedBN"] and "Central" in labels[0]
    lines = {c.get_label(): c for c in ax.containers}
    assert list(lines["FedTAN"].lines[0].get_ydata()) == [95.0, 96.0, 96.5]
    assert lines["FedTAN"].has_yerr and not lines["FedBN"].has_yerr  # no std stored: no bars
    seg = lines["FedTAN"].lines[2][0].get_segments()
    assert [s[1][1] - s[0][1] for s in seg] == [2.0, 0.0, 0.0]  # None and NaN (one seed) draw no spread
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "10"]
    assert ax.get_ylim() == (0.0, 100.0) and ax.get_title() == "Fig. 5 (smoke profile)"
    assert list(ax.lines[0].get_ydata()) == [97.0, 97.0] and ax.lines[0].get_linestyle() == "--"  # the level
    matplotlib.pyplot.close(fig)


def test_printed_claim_rounds_to_the_printed_decimals():
    from bnfl.experiments.printed import printed_claim

    ok = printed_claim("mib", "reproduces 6.2679", 6.26794, "6.2679")
    assert ok.verdict == "pass" and ok.measured == 0.0 and ok.threshold == 0.5e-4
    assert printed_claim("pct", "reproduces 85.07%", 85.0749, "85.07%", kind="consistency").verdict == "pass"
    off = printed_claim("pct", "reproduces 75%", 74.4, "75%")  # rounds to 74: one printed unit off
    assert off.verdict == "fail" and off.measured == 1.0


def test_with_data_replaces_and_with_init_writes_equal_runs_as_equal_specs():
    from bnfl.experiments.setups import with_data, with_init

    base = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn", "init": "x"}, "rounds": 3}
    assert with_data(base, {"name": "mnist"})["data"] == {"name": "mnist"}  # replaced, not merged
    assert with_init(base, "he_normal")["model"] == {"name": "q_mlp_bn", "init": "he_normal"}
    assert with_init(base, "pytorch")["model"] == {"name": "q_mlp_bn"}  # the default: no key
    # ResNet-20's own init is its authors': "authors" is the spec without the option (one cache entry)
    assert with_init({"model": {"name": "resnet20"}}, "authors")["model"] == {"name": "resnet20"}
    assert base["model"]["init"] == "x"  # the input is not mutated


def test_schematic_box_arrow_and_bars_with_printed_ticks():
    from bnfl.experiments.drawing import arrow, bars_with_printed, box
    from bnfl.plots import new_figure

    fig, ax = new_figure(1, 1, width=4.0, height=3.0)
    box(ax, (5, 5), "server", "#DDDDDD", w=2.0, h=1.0)
    arrow(ax, (5, 1), (5, 4.5), text="SGD")
    (patch,) = ax.patches
    assert (patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()) == (4.0, 4.5, 2.0, 1.0)
    assert {t.get_text() for t in ax.texts} == {"server", "SGD", ""}  # the arrow is an empty annotation
    fig2, ax2 = new_figure(1, 1, width=4.0, height=3.0)
    x = bars_with_printed(ax2, [1.0, 2.0], [1.5, 2.0], ["red", "blue"], ours_label="ours", paper_label="paper")
    assert list(x) == [0, 1] and [p.get_height() for p in ax2.containers[0].patches] == [1.0, 2.0]
    assert ax2.collections[0].get_offsets().tolist() == [[0.0, 1.5], [1.0, 2.0]]
    matplotlib.pyplot.close(fig)
    matplotlib.pyplot.close(fig2)


def test_config_deviations_and_panels_plot():
    from bnfl.experiments.papers.fedtan.layouts import panels_plot
    from bnfl.experiments.setups import config_deviations

    config = {"deviations": ["R = 100"]}
    out = config_deviations(config)
    assert out == ["R = 100"] and out is not config["deviations"] and config_deviations({}) == []
    series = {"iid/fedtan": {"x": [1, 2], "y": [50.0, 60.0], "std": [1.0, 1.0]},
              "non-iid/fedtan": {"x": [1, 2], "y": [40.0, 45.0], "std": [0.0, 0.0]}}
    fig = panels_plot([("iid", "acc", "iid"), ("non-iid", "acc", "non-iid")], "Fig. 6")(_result(series))
    assert fig._suptitle.get_text() == "Fig. 6 (smoke profile)"
    assert [list(ax.lines[0].get_ydata()) for ax in fig.axes] == [[50.0, 60.0], [40.0, 45.0]]
    matplotlib.pyplot.close(fig)


def test_fedtan_ii_table_plot_draws_ours_beside_the_printed_totals():
    from bnfl.experiments.papers.fedtan.layouts import fedtan_ii_table_plot

    rows = [{"scheme": "FedTAN-II (M=10)", "ours": 2.1388, "paper": "2.1388", "extra rounds ours": "5.66%",
             "extra rounds paper": "5.66%"},
            {"scheme": "FedTAN", "ours": 2.1493, "paper": "2.1386", "extra rounds ours": "75.00%",
             "extra rounds paper": "75%"}]
    result = Result(id="x-tab5", title="t", profile="quick", seeds=[0], rows=rows, paper=[], claims=[])
    fig = fedtan_ii_table_plot("Gibit", "ours", "paper", "Table 5")(result)
    a1, a2 = fig.axes
    assert [p.get_height() for p in a1.containers[0].patches] == [2.1388, 2.1493]
    assert [t.get_text() for t in a1.get_xticklabels()] == ["(M=10)", "FedTAN"]
    assert [t.get_text() for t in a1.texts] == ["paper 2.1386\nours 2.1493"]  # only the miss is annotated
    assert list(a2.lines[0].get_ydata()) == [5.66, 75.0] and a1.get_ylabel() == "Gibit"
    matplotlib.pyplot.close(fig)


def test_beside_printed_puts_ours_next_to_each_printed_cell():
    from bnfl.experiments.setups import beside_printed

    runs = {("a", 0): [{"test_acc": [50.0, 60.0]}, {"test_acc": [50.0, 62.0]}], ("a", 1): [{"test_acc": [40.0]}] * 2,
            ("b", 0): [{"test_acc": [70.0]}] * 2, ("b", 1): [{"test_acc": [30.0]}, {"test_acc": [34.0]}]}
    table = (("Method A", "61.0 ± 1.0", "41 ± 0"), ("Method B", "70.5±0.1", "33.3 ± 2.0"))
    rows, bars = beside_printed(table, ["a", "b"], ["iid", "non-iid"], lambda k, j: runs[(k, j)])
    assert rows[0] == {"FL scheme": "Method A", "iid ours": "61.00 ± 1.41", "iid paper": "61.0 ± 1.0",
                       "non-iid ours": "40.00 ± 0.00", "non-iid paper": "41 ± 0"}
    assert list(rows[1]) == ["FL scheme", "iid ours", "iid paper", "non-iid ours", "non-iid paper"]
    assert bars == {"iid ours": [61.0, 70.0], "non-iid ours": [40.0, 32.0]}


def test_panels_plot_relabels_x_and_draws_optional_panels_only_when_run():
    from bnfl.experiments.papers.fedtan.layouts import panels_plot

    series = {"iid/fedtan": {"x": [1, 2], "y": [50.0, 60.0], "std": [0.0, 0.0]}}
    plot = panels_plot([("iid", "acc", "iid")], "Fig. 10", xlabel="MiB", optional=[("extra", "acc", "extra")])
    fig = plot(_result(series))
    drawn = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in drawn] == ["iid"] and drawn[0].get_xlabel() == "MiB"
    matplotlib.pyplot.close(fig)
    fig = plot(_result({**series, "extra/fedtan": series["iid/fedtan"]}))
    assert [ax.get_title() for ax in fig.axes if ax.axison] == ["iid", "extra"]
    matplotlib.pyplot.close(fig)
