"""The panel layouts of FedTAN's entries: curves of several settings side by side
(:func:`panels_plot`, :func:`iid_noniid_plot`), the feature-shift domains' bars
(:func:`domains_plot`), and FedTAN-II's curves and communication tables (:func:`fedtan_ii_plot`,
:func:`fedtan_ii_table_plot`). Labels and colours come from the Method table
(:data:`bnfl.methods.METHODS`) through :mod:`bnfl.plots` and the experiments' setups."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from bnfl.experiments.core import Result
from bnfl.experiments.drawing import bars_with_printed, curve_panels
from bnfl.experiments.printed import percent
from bnfl.experiments.setups import label as method_label
from bnfl.plots import color_for, new_figure

__all__ = ["domains_plot", "fedtan_ii_plot", "fedtan_ii_table_plot", "iid_noniid_plot", "panels_plot"]


def panels_plot(panels: Sequence[tuple[str, str, str]], title: str, *, xlabel: str | None = None,
                optional: Sequence[tuple[str, str, str]] = ()) -> Callable[[Result], Any]:
    """An entry's plot: :func:`curve_panels` of ``panels``, titled ``"<title> (<profile> profile)"``.

    Parameters
    ----------
    panels : sequence of (series prefix, "acc" | "loss", panel title)
        As :func:`curve_panels`.
    title : str
    xlabel : str, optional
        The x axis of every panel when the series' ``x`` is not the iteration (e.g. the MiB sent).
    optional : sequence of panels
        Panels drawn after ``panels`` only where the result has a series under their prefix (a
        setting that only some profiles run).
    """
    def plot(result: Result) -> Any:
        present = [p for p in optional if any(name.startswith(p[0] + "/") for name in result.series)]
        fig = curve_panels(result, [*panels, *present], f"{title} ({result.profile} profile)")
        for ax in fig.axes:
            if xlabel is not None and ax.get_xlabel() == "iteration":
                ax.set_xlabel(xlabel)
        return fig
    return plot


def iid_noniid_plot(title: str) -> Any:
    def plot(result: Result) -> Any:
        return curve_panels(result, [("iid", "acc", "iid"), ("non-iid", "acc", "non-iid")],
                             f"{title} ({result.profile} profile)")
    return plot


def domains_plot(title: str) -> Any:
    def plot(result: Result) -> Any:
        s = result.series
        names = s["domains"]
        nd = len(names) - 1
        ncols = 3 if nd + 1 <= 6 else 4
        nrows = math.ceil((nd + 1) / ncols)
        fig, axes = new_figure(nrows, ncols, width=3.0, height=2.6, squeeze=False)
        for j, ax in enumerate(axes.flat):
            if j > nd:
                ax.axis("off")
                continue
            single = method_label("singlenet").removesuffix("Net")  # "Single-<domain>": the bars are narrow
            labels = ([method_label("fedtan"), method_label("fedavg+bn")] + [f"{method_label('fedbn')}-{d[:3]}" for d in names[:nd]]
                      + [f"{single}-{d[:3]}" for d in names[:nd]])
            vals = [s["fedtan"][j], s["fedavg"][j]] + [r[j] for r in s["fedbn"]] + [r[j] for r in s["singlenet"]]
            cols = [color_for("fedtan"), color_for("fedavg+bn")] + [color_for("fedbn")] * nd + [color_for("singlenet")] * nd
            ax.bar(range(len(vals)), vals, color=cols)
            ax.set_xticks(range(len(vals)), labels, rotation=90, fontsize=6)
            ax.set_ylim(0, 100)
            ax.set_title(f"test: {names[j]}", fontsize=9)
            ax.set_ylabel("accuracy (%)")
        fig.suptitle(f"{title} ({result.profile} profile)")
        return fig
    return plot


def fedtan_ii_plot(title: str) -> Any:
    def plot(result: Result) -> Any:
        tags = list(dict.fromkeys(n.rsplit("/", 1)[0] for n in result.series))
        fig, axes = new_figure(len(tags), 2, width=4.3, height=3.0, squeeze=False)
        # one colour per switch point M, lent by the table's rows (the same hues in every figure)
        cmap = [color_for(m) for m in ("fedtan2", "fedavg+alg2", "fedavg+gn", "fedbn", "singlenet")]
        for (a1, a2), tag in zip(axes, tags, strict=True):
            names = [n for n in result.series if n.rsplit("/", 1)[0] == tag]
            for i, n in enumerate(names):
                c = result.series[n]
                short = n.rsplit("/", 1)[1]
                col = color_for("fedtan") if short.startswith("FedTAN") else cmap[i % len(cmap)]
                label = short if short.startswith("FedTAN") else f"{method_label('fedtan2')} ({short})"
                ls = "--" if "lr drop" in short else "-"  # FedTAN with FedTAN-II's schedule
                a1.plot(c["x"], c["y"], ls, color=col, label=label)
                a2.plot(c["comm_rounds"], c["y"], ls, color=col, label=label)
            a1.set_xlabel("iteration")
            a2.set_xlabel("communication rounds")
            a2.set_xscale("log")
            a1.set_title(f"{tag}: vs iterations")
            a2.set_title(f"{tag}: vs communication rounds")
            for ax in (a1, a2):
                ax.set_ylabel("test accuracy (%)")
            a1.legend(fontsize=7)
        fig.suptitle(f"{title} ({result.profile} profile)")
        return fig
    return plot


def fedtan_ii_table_plot(unit: str, key_ours: str, key_paper: str, title: str) -> Callable[[Result], Any]:
    """The plot of a FedTAN-II communication table (FedTAN Tables 4, 5): the whole run's volume per scheme,
    ours (column ``key_ours`` of each row, in ``unit``) as bars with the paper's (``key_paper``) as ticks
    and the misses annotated, beside the share of extra communication rounds, ours and the paper's."""
    def plot(result: Result) -> Any:
        fig, (a1, a2) = new_figure(1, 2, width=4.0, height=3.1)
        rows = result.rows
        ours, paper = [r[key_ours] for r in rows], [float(r[key_paper]) for r in rows]
        # a scheme's colour from its label: "FedTAN", "FedTAN-II (M=1000)" -> FedTAN-II's
        x = bars_with_printed(a1, ours, paper, [color_for(r["scheme"].split(" (")[0]) for r in rows])
        for xi, o, p in zip(x, ours, paper, strict=True):
            if abs(o - p) >= 0.5e-4:
                a1.annotate(f"paper {p:.4f}\nours {o:.4f}", (xi, max(o, p)), textcoords="offset points",
                            xytext=(0, 4), ha="center", fontsize=7, color="#B00020")
        lo, hi = min(ours + paper), max(ours + paper)
        a1.set(ylim=(lo - 0.6 * (hi - lo), hi + 0.8 * (hi - lo)), ylabel=unit, title="total exchanged")
        a1.legend(loc="upper left")
        a2.plot(x, [float(r["extra rounds ours"].rstrip("%")) for r in rows], "o-", color=color_for("fedtan2"),
                label="extra rounds, ours")
        a2.plot(x, [percent(r["extra rounds paper"]) for r in rows], "k+", ms=10, label="extra rounds, paper")
        a2.set(ylabel="% of all rounds", ylim=(0, 105), title="extra rounds from Algs. 2-3")
        a2.legend(loc="lower right")
        for ax in (a1, a2):
            ax.set_xticks(x, [r["scheme"].replace("FedTAN-II ", "") for r in rows], fontsize=8)
        fig.suptitle(title)
        return fig
    return plot
