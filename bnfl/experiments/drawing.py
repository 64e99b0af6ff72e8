"""Figure helpers the entries share: curve panels with std bands, bars and lines per method beside the
paper's, the panel layouts of FedTAN's other-data and FedTAN-II entries, and :func:`drawn_by` for an
entry whose plot is one of them with its own title.

A series is named ``<prefix>/<method id>`` (accuracy) or ``<prefix>/<method id>/loss``; a line takes
the method's colour and label from :data:`bnfl.methods.METHODS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.patches import Patch

from bnfl.experiments.core import Result
from bnfl.experiments.printed import parse_mean_std
from bnfl.experiments.setups import label as method_label
from bnfl.plots import color_for, marker_for, new_figure

__all__ = ["bars_vs_paper", "curve_panels", "domains_plot", "drawn_by", "fedtan_ii_plot", "grouped_bars",
           "iid_noniid_plot", "lines_against", "ours_beside_paper", "ours_beside_paper_figure"]


def drawn_by(draw: Callable[..., Any], *args: Any) -> Callable[[Result], Any]:
    """An entry's plot ``draw(result, *args)``: one figure helper serving several entries, each with its
    own title (``plotter("fedbn-tab11")(drawn_by(_bars, "FedBN Table 11: ..."))``)."""
    return lambda result: draw(result, *args)


def curve_panels(result: Result, panels: Sequence[tuple[str, str, str]], title: str, *,
                  ncols: int = 2) -> Any:
    """Panels of (series prefix, y-kind "acc"|"loss", title); lines per method with std bands."""
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = new_figure(nrows, ncols, width=4.0, height=3.0, squeeze=False)
    for ax, (prefix, kind, ptitle) in zip(axes.flat, panels, strict=False):
        for name, c in result.series.items():
            parts = name.split("/")
            is_loss = parts[-1] == "loss"
            if "/".join(parts[:-2 if is_loss else -1]) != prefix or is_loss != (kind == "loss"):
                continue
            key = parts[-2] if is_loss else parts[-1]
            ax.plot(c["x"], c["y"], color=color_for(key), label=method_label(key), lw=1.4)
            if not is_loss and any(c.get("std") or []):
                y, sd = np.array(c["y"]), np.array(c["std"])
                ax.fill_between(c["x"], y - sd, y + sd, color=color_for(key), alpha=0.15, lw=0)
        ax.set_title(ptitle)
        ax.set_xlabel("iteration")
        ax.set_ylabel("test accuracy (%)" if kind == "acc" else "training loss")
        if kind == "loss":
            ax.set_yscale("log")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    return fig


def bars_vs_paper(result: Result, groups: Sequence[str], title: str, paper_cols: Sequence[str],
                   ours_cols: Sequence[str]) -> Any:
    """One panel per group: each row's (``"FL scheme"``) bar in its method's colour, ours from
    ``series["bars"][ours_col]``, beside the paper's printed ``row[paper_col]`` in grey."""
    ncols = min(2, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = new_figure(nrows, ncols, width=4.2, height=3.2, squeeze=False)
    for ax, g, pc, oc in zip(axes.flat, groups, paper_cols, ours_cols, strict=True):
        names = [r["FL scheme"] for r in result.rows]
        x = np.arange(len(names))
        ours = [float("nan") if v is None else float(v) for v in result.series["bars"][oc]]
        paper = [_mean_of(r[pc]) for r in result.rows]
        ax.bar(x - 0.2, ours, width=0.4, color=[color_for(n) for n in names], label="ours")
        ax.bar(x + 0.2, paper, width=0.4, color="#BBBBBB", label="paper")
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
        ax.set_ylim(0, 100)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(g)
    handles = [Patch(facecolor="white", edgecolor="#333333", label="ours (method colour, left bar)"),
               Patch(facecolor="#BBBBBB", label="paper (right bar)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle(title)
    return fig


def lines_against(ax: Any, xs: Sequence[float], curves: Mapping[str, Mapping[str, float]], *,
                  rows: Mapping[str, str], xlabel: str, log_base: int | None = None) -> None:
    """One line per method of ``curves`` (``{row name: {str(x): y}}``, as a stored result keeps them)
    against ``xs``, in the method's colour and marker (the row name's method id in ``rows``); a tick
    at every x, on a log scale of ``log_base`` when given."""
    for k, d in curves.items():
        ax.plot(xs, [d[str(x)] for x in xs], marker=marker_for(rows[k]), color=color_for(rows[k]), label=k)
    if log_base is not None:
        ax.set_xscale("log", base=log_base)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs])
    ax.set_xlabel(xlabel)


def ours_beside_paper(ax: Any, names: Sequence[str], ours: Sequence[Any], paper: Sequence[Any], *, profile: str,
                      paper_label: str = "paper", yerr: Sequence[Any] | None = None, rotation: int = 25,
                      fontsize: int = 8) -> None:
    """Two bars per name on ``ax``: ours (blue, left; ``yerr`` its seed std) and the paper's (grey,
    right), accuracy in % on 0-100. ``None`` (a cell stored without a number) and NaN draw no bar."""
    def nums(values: Sequence[Any]) -> list[float]:
        return [float("nan") if v is None else float(v) for v in values]

    x = np.arange(len(names))
    err = None if yerr is None else [0 if v is None or not np.isfinite(v) else v for v in yerr]
    ax.bar(x - 0.2, nums(ours), 0.4, yerr=err, color="#0072B2", label=f"ours ({profile})")
    ax.bar(x + 0.2, nums(paper), 0.4, color="#BBBBBB", label=paper_label)
    ax.set_xticks(x, names, rotation=rotation, ha="right", fontsize=fontsize)
    ax.set_ylim(0, 100)
    ax.set_ylabel("test accuracy (%)")


def ours_beside_paper_figure(names: Sequence[str], ours: Sequence[Any], paper: Sequence[Any], *, title: str,
                             profile: str, paper_label: str = "paper", yerr: Sequence[Any] | None = None,
                             ylabel: str | None = None, width: float = 6.0, height: float = 3.4) -> Any:
    """A one-panel figure of :func:`ours_beside_paper` with its legend and the suptitle ``title``.

    Parameters
    ----------
    names, ours, paper, profile, paper_label, yerr
        As :func:`ours_beside_paper` takes them.
    title : str
        The figure's suptitle.
    ylabel : str, optional
        The y axis' label; default ``"test accuracy (%)"``.
    width, height : float, default 6.0, 3.4
        The panel's size in inches.
    """
    fig, ax = new_figure(1, 1, width=width, height=height)
    ours_beside_paper(ax, names, ours, paper, profile=profile, paper_label=paper_label, yerr=yerr)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def grouped_bars(ax: Any, groups: Sequence[str], bars: Mapping[str, Sequence[float]], *,
                 colors: Mapping[str, str] | None = None, fontsize: int = 8) -> None:
    """One group of bars per name of ``groups`` on ``ax``, one bar in it per series of ``bars``
    (``{series label: one value per group}``), side by side and centred on the group's tick.

    Parameters
    ----------
    ax : matplotlib Axes
    groups : sequence of str
        The tick labels, in the order of each series' values.
    bars : mapping
        Series label -> values; the legend shows the labels.
    colors : mapping, optional
        Series label -> the key :func:`bnfl.plots.color_for` colours it by (a method id); default the
        label itself.
    fontsize : int, default 8
        Of the tick labels.
    """
    x = np.arange(len(groups))
    w = 0.8 / len(bars)
    for i, (name, vals) in enumerate(bars.items()):
        ax.bar(x + (i - (len(bars) - 1) / 2) * w, vals, w, color=color_for((colors or {}).get(name, name)), label=name)
    ax.set_xticks(x, groups, fontsize=fontsize)


def _mean_of(text: Any) -> float:
    if isinstance(text, int | float):
        return float(text)
    try:
        return parse_mean_std(str(text))[0]
    except ValueError:
        return float("nan")


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
            labels = ["FedTAN", "FedAvg+BN"] + [f"FedBN-{d[:3]}" for d in names[:nd]] + [f"Single-{d[:3]}" for d in names[:nd]]
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
        cmap = [color_for("fedtan2"), "#56B4E9", "#009E73", "#CC79A7", "#777777"]
        for (a1, a2), tag in zip(axes, tags, strict=True):
            names = [n for n in result.series if n.rsplit("/", 1)[0] == tag]
            for i, n in enumerate(names):
                c = result.series[n]
                short = n.rsplit("/", 1)[1]
                col = color_for("fedtan") if short.startswith("FedTAN") else cmap[i % len(cmap)]
                label = short if short.startswith("FedTAN") else f"FedTAN-II ({short})"
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
