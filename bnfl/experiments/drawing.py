"""Figure helpers the entries share: curve panels with std bands, bars and lines per method beside the
paper's, and :func:`drawn_by` for an entry whose plot is one of them with its own title (the panel
layouts of FedTAN's entries are :mod:`bnfl.experiments.papers.fedtan.layouts`).

A series is named ``<prefix>/<method id>`` (accuracy) or ``<prefix>/<method id>/loss``; a line takes
the method's colour and label from :data:`bnfl.methods.METHODS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.patches import FancyBboxPatch, Patch
from matplotlib.ticker import NullFormatter

from bnfl.experiments.core import Result
from bnfl.experiments.printed import parse_mean_std
from bnfl.experiments.setups import label as method_label
from bnfl.plots import color_for, marker_for, new_figure

__all__ = ["accuracy_lines", "arrow", "bar_figure", "bars_vs_paper", "bars_with_printed", "box", "curve_panels",
           "drawn_by", "grouped_bars", "grouped_bars_on", "line_panels", "ours_beside_paper",
           "ours_beside_paper_figure", "rows_figure", "series_bars", "series_panels", "table_figure"]


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


def box(ax: Any, xy: tuple[float, float], text: str, color: str, *, w: float = 1.6, h: float = 0.7) -> None:
    """A schematic's box: rounded, ``w`` x ``h`` data units, centred at ``xy``, filled with ``color``,
    ``text`` inside."""
    x, y = xy
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05",
                                fc=color, ec="#333333", lw=1.0))
    ax.text(x, y, text, ha="center", va="center", fontsize=8)


def arrow(ax: Any, start: tuple[float, float], end: tuple[float, float], color: str = "#333333",
          text: str = "") -> None:
    """A schematic's arrow from ``start`` to ``end``; ``text``, if given, on a white patch at its middle."""
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2})
    if text:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2, text, fontsize=7, color=color, ha="center",
                va="center", bbox={"fc": "white", "ec": "none", "pad": 0.5})


def bars_with_printed(ax: Any, ours: Sequence[float], printed: Sequence[float], colors: Sequence[str], *,
                      tick: float = 700, ours_label: str = "ours", paper_label: str = "paper") -> np.ndarray:
    """Our numbers as bars in ``colors`` and the paper's printed ones as black ticks across them (a
    table of quantities that are not accuracies: volumes, counts). Returns the bars' x positions.

    Parameters
    ----------
    ax : matplotlib Axes
    ours, printed : sequence of float
        One number per bar.
    colors : sequence of str
        One colour per bar.
    tick : float, default 700
        The tick's marker size (points squared): about the bar's width on the figure.
    ours_label, paper_label : str
        Their legend entries.
    """
    x = np.arange(len(ours))
    ax.bar(x, ours, color=list(colors), width=0.6, label=ours_label)
    ax.scatter(x, printed, marker="_", s=tick, color="k", zorder=3, label=paper_label)
    return x


def accuracy_lines(result: Result, x: str, lines: Mapping[str, str], *, xlabel: str, title: str,
                   levels: Mapping[str, str] | None = None, log_base: int | None = None,
                   ylim: tuple[float, float] | None = None) -> Any:
    """One panel of final test accuracy per method against a setting swept by an entry (a batch size, a
    number of classes per client), with a tick at every setting.

    Parameters
    ----------
    result : Result
        Its ``series[x]`` holds the settings, ``series[method]`` one accuracy per setting and, where
        present, ``series[f"{method}_std"]`` the seed std per setting (an error bar; ``None`` or NaN, one
        seed, draws none).
    x : str
        The series key of the settings.
    lines : mapping
        Method id -> legend label, in drawing order; the line takes the method's colour.
    xlabel, title : str
    levels : mapping, optional
        Method id -> series key of one accuracy drawn as a dashed level across the panel (a reference
        run that has no setting, such as centralized training on the pooled data).
    log_base : int, optional
        A log scale of this base on the x axis.
    ylim : (float, float), optional
    """
    s = result.series
    fig, ax = new_figure(width=5.0, height=3.4)
    for key, series_key in (levels or {}).items():
        ax.axhline(s[series_key], color=color_for(key), ls="--", label=method_label(key))
    for key, label in lines.items():
        std = s.get(f"{key}_std")
        err = None if std is None else [0.0 if v is None or not math.isfinite(v) else v for v in std]
        ax.errorbar(s[x], s[key], yerr=err, marker="o", color=color_for(key), label=label, capsize=2)
    if log_base is not None:
        ax.set_xscale("log", base=log_base)
    ax.set_xticks(s[x], [f"{v:g}" for v in s[x]])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (%)")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8)
    ax.set_title(f"{title} ({result.profile} profile)")
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


def line_panels(panels: Sequence[Mapping[str, Any]], *, rows: Mapping[str, str], title: str, ylabel: str,
                width: float = 4.2, height: float = 3.4, legend: int = 0) -> Any:
    """A figure of one panel per item of ``panels``, each a line per method against a setting.

    Parameters
    ----------
    panels : sequence of mapping
        ``{"curves": {row name: {x: y}}, "xlabel": str}`` and optionally ``"title"``, ``"log_base"``
        (a log x axis of that base) and ``"ticks"`` (default True: a tick at every x). The x values
        are the keys, numbers or numbers as text (a stored result keeps them as text), drawn in
        numerical order; ``None`` or NaN draws no point.
    rows : mapping
        Row name -> bnfl method id: each line takes its method's colour and marker.
    title, ylabel : str
        The figure's title; the first panel's y label.
    width, height : float
        The size of one panel (inches).
    legend : int, default 0
        The panel that carries the legend.
    """
    fig, axes = new_figure(1, len(panels), width=width, height=height, squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=True):
        xs: set[float] = set()
        for k, d in panel["curves"].items():
            pts = sorted((float(x), math.nan if y is None else float(y)) for x, y in d.items())
            xs.update(x for x, _ in pts)
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker=marker_for(rows[k]), color=color_for(rows[k]),
                    label=k)
        if panel.get("log_base"):
            ax.set_xscale("log", base=panel["log_base"])
        if panel.get("ticks", True):
            ax.set_xticks(sorted(xs))
            ax.set_xticklabels([f"{x:g}" for x in sorted(xs)])
            ax.xaxis.set_minor_formatter(NullFormatter())  # a log axis labels its minor ticks too: they overlap
        ax.set_xlabel(panel["xlabel"])
        ax.set_title(panel.get("title", ""))
    axes.flat[0].set_ylabel(ylabel)
    axes.flat[legend].legend(fontsize=7)
    fig.suptitle(title)
    return fig


def grouped_bars(groups: Sequence[str], table: Mapping[str, Mapping[str, float | None]], bars: Sequence[str], *,
                 title: str, colors: Mapping[str, str], labels: Mapping[str, str] | None = None, width: float = 7.0,
                 height: float = 3.4, floor: float = 10.0) -> Any:
    """A figure of one group of bars per item of ``groups``, one bar per item of ``bars`` in each.

    Parameters
    ----------
    groups : sequence of str
        The groups, left to right (the x tick labels).
    table : mapping
        ``{group: {bar: height}}``, test accuracy in %. ``None`` or NaN (a diverged run; a stored
        result keeps NaN as null) draws no bar but the word "diverged".
    bars : sequence of str
        The bars of each group, left to right.
    title : str
    colors : mapping
        Bar -> colour.
    labels : mapping, optional
        Bar -> its legend label (default: the bar's name). The legend stands right of the panel.
    width, height : float
        The figure's size (inches).
    floor : float, default 10
        The y axis starts this many points below the lowest bar (at 0 at the lowest) and ends at 100.
    """
    fig, ax = new_figure(1, 1, width=width, height=height)
    w = 0.8 / len(bars)
    x = np.arange(len(groups))
    lo = min(v for g in groups for v in table[g].values() if v is not None and math.isfinite(v))
    bottom = max(0.0, lo - floor)
    for j, k in enumerate(bars):
        ys = [math.nan if table[g][k] is None else float(table[g][k]) for g in groups]  # type: ignore[arg-type]
        xs = x + (j - (len(bars) - 1) / 2) * w
        ax.bar(xs, ys, w, color=colors[k], label=(labels or {}).get(k, k))
        for xi, y in zip(xs, ys, strict=True):
            if not math.isfinite(y):  # a diverged run has no bar: say so
                ax.text(xi, bottom + 1, "diverged", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, fontsize=7)
    ax.set_ylim(bottom, 100)
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(title)
    return fig


def table_figure(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, title: str, width: float = 8.0,
                 row_height: float = 0.3, col_widths: Sequence[float] | None = None) -> Any:
    """A figure that is a table: a header of ``columns``, then one line per item of ``rows`` with the
    cells ``str(row[column])``, left aligned in 7 pt (an entry's printed layers beside bnfl's, say).

    Parameters
    ----------
    rows : sequence of mapping
        The result's rows.
    columns : sequence of str
        The keys shown, left to right; also the header.
    title : str
    width : float, default 8
        The figure's width (inches); its height is ``row_height`` per row plus 1.
    row_height : float, default 0.3
    col_widths : sequence of float, optional
        Each column's share of the width (matplotlib's default: equal).
    """
    fig, ax = new_figure(1, 1, width=width, height=row_height * len(rows) + 1.0)
    ax.axis("off")
    table = ax.table(cellText=[[str(r[c]) for c in columns] for r in rows], colLabels=list(columns), loc="center",
                     cellLoc="left", colWidths=None if col_widths is None else list(col_widths))
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    ax.set_title(title)
    return fig


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


def grouped_bars_on(ax: Any, groups: Sequence[str], values: Mapping[str, Sequence[float]], *,
                 colors: Mapping[str, str], errors: Mapping[str, Sequence[Any]] | None = None, title: str = "",
                 ylabel: str = "test accuracy (%)", rotation: int = 0) -> None:
    """One bar per name of ``values`` (``{name: [value per group]}``) side by side in each group, the
    bars of a group 0.8 wide together, in ``colors[name]``, accuracy in % on 0-100. ``errors`` (per
    name, one per group) draws error bars; ``None`` or NaN there (one seed has no spread) draws none."""
    x = np.arange(len(groups))
    w = 0.8 / len(values)
    for i, (name, vals) in enumerate(values.items()):
        err = None if errors is None else [0.0 if v is None or not np.isfinite(v) else v for v in errors[name]]
        ax.bar(x + (i - (len(values) - 1) / 2) * w, vals, w, yerr=err, capsize=2, color=colors[name], label=name)
    ax.set_xticks(x, groups, rotation=rotation)
    ax.set_ylim(0, 100)
    ax.set_ylabel(ylabel)
    ax.set_title(title)


def bar_figure(groups: Sequence[str], values: Mapping[str, Sequence[float]], title: str, *,
               colors: Mapping[str, str], ylabel: str = "test accuracy (%)", width: float = 5.0, height: float = 3.4,
               legend_size: float = 8) -> Any:
    """One panel of :func:`grouped_bars_on` (bars per name in each group) with its legend and ``title``."""
    fig, ax = new_figure(1, 1, width=width, height=height)
    grouped_bars_on(ax, groups, values, colors=colors, title=title, ylabel=ylabel)
    ax.legend(fontsize=legend_size)
    return fig


def series_panels(panels: Sequence[tuple[str, Mapping[str, Sequence[Any]]]], title: str, *,
                styles: Mapping[str, Mapping[str, Any]], xlabel: str | Sequence[str], ylabel: str,
                logy: bool = False, log_x: int | None = None, xticks: bool = False, invert_x: bool = False,
                width: float = 4.2, height: float = 3.2, legend_size: float = 7, legend_panel: int = 0) -> Any:
    """A row of panels, each ``(panel title, {line label: (xs, ys)})``, a line optionally
    ``(xs, ys, keywords)``. A line is drawn with ``styles[label]`` (matplotlib keywords: colour,
    marker, line style), else the style of the first name of ``styles`` the label starts with
    (``"FedBN (mini-batches)"`` takes ``styles["FedBN"]``), then its own keywords. ``xlabel``: one for all panels or one per panel;
    ``log_x``: a log x axis of that base; ``xticks``: a tick at every x of the panel; ``invert_x``:
    largest x first. The first panel carries the y label, panel ``legend_panel`` the legend."""
    fig, axes = new_figure(1, len(panels), width=width, height=height, squeeze=False)
    xlabels = [xlabel] * len(panels) if isinstance(xlabel, str) else list(xlabel)
    for ax, (ptitle, lines), xl in zip(axes[0], panels, xlabels, strict=True):
        for label, (xs, ys, *own) in lines.items():
            style = styles.get(label) or next((v for k, v in styles.items() if label.startswith(k)), {})
            ax.plot(xs, ys, label=label, **{**style, **(own[0] if own else {})})
        if logy:
            ax.set_yscale("log")
        if log_x is not None:
            ax.set_xscale("log", base=log_x)
        if xticks:
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
        if invert_x:
            ax.invert_xaxis()
        ax.set_xlabel(xl)
        ax.set_title(ptitle)
    axes[0][0].set_ylabel(ylabel)
    axes[0][legend_panel].legend(fontsize=legend_size)
    fig.suptitle(title)
    return fig


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


def rows_figure(result: Result, title: str, *, columns: Sequence[str] | None = None,
                 headers: Sequence[str] | None = None, width: float = 7.6, row_height: float = 0.25,
                 pad: float = 0.8, col_widths: Sequence[float] | None = None,
                 shade: Callable[[Mapping[str, Any]], bool] | None = None) -> Any:
    """An entry's table drawn as a figure: one line per row of ``result.rows``, the cells of
    ``columns`` (all of the first row's, by default) under ``headers`` (the column names, by
    default); a row for which ``shade(row)`` holds is shaded (e.g. a printed row that differs)."""
    rows = result.rows
    columns = list(columns or rows[0])
    fig, ax = new_figure(1, 1, width=width, height=row_height * len(rows) + pad)
    ax.axis("off")
    table = ax.table(cellText=[[str(r[c]) for c in columns] for r in rows], colLabels=list(headers or columns),
                     loc="center", cellLoc="left", colWidths=col_widths)
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    for i, r in enumerate(rows, start=1):
        if shade is not None and shade(r):
            for j in range(len(columns)):
                table[i, j].set_facecolor("#FBE3D6")
    ax.set_title(title)
    return fig


def series_bars(ax: Any, groups: Sequence[str], bars: Mapping[str, Sequence[float]], *,
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
