"""A :class:`~bnfl.diagnosis.Diagnosis` as a terminal table, a figure (bnfl.plots style) and JSON."""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bnfl import plots
from bnfl.diagnosis import rules
from bnfl.display import html_table
from bnfl.methods import METHODS

__all__ = ["COUPLINGS", "SHIFT_WORDS", "Diagnosis", "cost_rows", "figure", "format_table", "gradient_rows", "layer_rows", "to_html",
           "to_json", "verdict_lines"]

#: FedTAN's BN couplings of the first local step and the method each stands for.
COUPLINGS = {"none": "fedavg+bn", "stats": "fedavg+alg2", "fedtan": "fedtan"}

#: How a shift verdict reads.
SHIFT_WORDS = {"none": "no shift (i.i.d.-like)", "label": "label skew", "feature": "feature shift",
               "label+feature": "label skew and feature shift"}


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`~bnfl.diagnosis.diagnose` measured and recommends (``asdict`` gives the ``--json`` output).

    Attributes
    ----------
    layers : list of dict
        Per BN layer (module order): ``name``, ``channels``, ``var`` (union variance, mean over
        channels), ``avg_var`` (FedAvg's :math:`\\sum_i p_i\\sigma_i^2`), ``between`` (between-client
        share = relative bias of ``avg_var``), ``between_given_label``, ``batch_noise``
        (:func:`bnfl.diagnosis.measure.layer_shares`).
    grad_error : dict[str, float]
        First-step aggregated-gradient error against the centralized gradient, by coupling:
        ``"none"`` FedAvg+BN, ``"stats"`` FedAvg+Algorithm 2, ``"fedtan"`` FedTAN (~0).
    grad_error_floor : dict[str, float]
        The same on an i.i.d. re-partition of the sampled data (same batch sizes): what batch
        noise alone costs at this batch size.
    mean_b2 : dict[str, float]
        Mean over clients of the gradient deviation :math:`B_i^2` by coupling.
    update_error : dict[str, float]
        Error of one round's update after ``local_steps`` steps (``"none"``, ``"fedtan"``).
    label_divergence, label_floor : float or None
        :math:`D_y` and its value on an i.i.d. re-partition (``None`` without class labels).
    feature_shift, feature_floor : float or None
        First BN layer's ``between_given_label`` and its i.i.d. floor (``None`` when no class
        is held by two clients); without class labels its ``between`` share and floor.
    shift : str
        ``"none"``, ``"label"``, ``"feature"`` or ``"label+feature"`` (:func:`rules.classify_shift`).
    small_batch : bool
    recommendation : rules.Recommendation
    communication : list of dict
        :func:`rules.communication` of the fixes on this model.
    setting : dict
        Clients, their sizes, batch size, local steps, lr, seed, options, seconds.
    """

    layers: list[dict[str, Any]]
    grad_error: dict[str, float]
    grad_error_floor: dict[str, float]
    mean_b2: dict[str, float]
    update_error: dict[str, float]
    label_divergence: float | None
    label_floor: float | None
    feature_shift: float | None
    feature_floor: float | None
    shift: str
    small_batch: bool
    recommendation: rules.Recommendation
    communication: list[dict[str, Any]]
    setting: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict."""
        return asdict(self)

    def __str__(self) -> str:
        """The report table ``bnfl diagnose`` prints (:func:`format_table`)."""
        return format_table(self)


def _label(mid: str) -> str:
    return METHODS[mid].label


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _bytes(b: int | None) -> str:
    if b is None:
        return "n/a"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


def layer_rows(d: Diagnosis) -> list[dict[str, Any]]:
    """Table 1: per BN layer, the shares of its input's variance (mean over channels)."""
    b = d.setting["batch_size"]
    return [{"#": i + 1, "BN layer": f"{r['name']} ({r['type']})" if r.get("type") else r["name"], "C": r["channels"],
             "between clients": f"{r['between']:.1%}",
             "between, within classes": _num(r["between_given_label"], ".1%"),
             f"batch noise at B={b}": f"{r['batch_noise']:.1%}"} for i, r in enumerate(d.layers)]


def _err(v: float) -> str:
    """Three significant digits; float64 rounding (below 1e-9, FedTAN's exact coupling) as ``< 1e-9``."""
    return "< 1e-9" if abs(v) < 1e-9 else f"{v:.3g}"


def gradient_rows(d: Diagnosis) -> list[dict[str, Any]]:
    """Table 2: first-step aggregated-gradient error and mean B_i^2 per BN coupling."""
    return [{"coupling": _label(mid), "rel. error": _err(d.grad_error[mode]),
             "on an i.i.d. split": _err(d.grad_error_floor[mode]), "mean B_i^2": _err(d.mean_b2[mode]),
             f"update error after {d.setting['local_steps']} local step{'s' if d.setting['local_steps'] != 1 else ''}":
                 _err(d.update_error[mode]) if mode in d.update_error else "-"}
            for mode, mid in COUPLINGS.items()]


def cost_rows(d: Diagnosis) -> list[dict[str, Any]]:
    """Table 5: each fix's communication per round on this model."""
    return [{"method": c["label"], "bytes": _bytes(c["bytes"]), "comm. rounds": _num(c["rounds"], "d"),
             "vs FedAvg+BN": "n/a" if c["extra"] is None else f"{c['extra']:+.2%}",
             "what else leaves a client": "; ".join(t for t in (c["leaves_client"], c["note"]) if t)}
            for c in d.communication]


def verdict_lines(d: Diagnosis) -> list[str]:
    """The shift measurements, the verdict and the recommendation, as sentences."""
    noise = rules.total_batch_noise([r["batch_noise"] for r in d.layers])
    rec = d.recommendation
    return [
        f"label divergence D_y {_num(d.label_divergence, '.3f')} (i.i.d. {_num(d.label_floor, '.3f')}; "
        f"label skew from +{rules.LABEL_SKEW_THRESHOLD})",
        "feature shift (first BN layer, between clients "
        + ("within classes) " if d.label_divergence is not None else "; no class labels) ")
        + (f"{d.feature_shift:.3f} (i.i.d. {_num(d.feature_floor, '.3f')}; feature shift from "
           f"{rules.FEATURE_SHIFT_RATIO:g}x and +{rules.FEATURE_SHIFT_MIN_EXCESS})" if d.feature_shift is not None
           else "not measurable: no class is held by two clients"),
        f"batch noise {noise:.3f}, summed over {len(d.layers)} BN layer{'s' if len(d.layers) != 1 else ''} "
        f"(small batches from {rules.SMALL_BATCH_THRESHOLD})",
        f"=> {SHIFT_WORDS[d.shift]}; batches {'small' if d.small_batch else 'not small'}",
        "",
        f"Recommendation: {_label(rec.fix)}"
        + (f" (then {', '.join(_label(a) for a in rec.alternatives)})" if rec.alternatives else ""),
        f"   rule: {rec.rule}",
        f"   why: {rec.reason}",
    ]


def _text_table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as aligned plain-text columns (text left-aligned, numbers right-aligned)."""
    cols = list(rows[0])
    cells = [[str(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(cols)]

    def numeric(text: str) -> bool:
        return bool(text) and (text[0].isdigit() or text[0] in "+-.") and text != "-"

    right = [any(numeric(row[j]) for row in cells) for j in range(len(cols))]  # number columns

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)).rstrip()

    return [line(cols), "  ".join("-" * w for w in widths), *(line(row) for row in cells)]


def format_table(d: Diagnosis, *, title: str = "") -> str:
    """The terminal report: per-layer statistics, gradient errors, shift, recommendation, costs."""
    s = d.setting
    steps = s["local_steps"]
    lines = [
        "bnfl diagnose" + (f": {title}" if title else ""),
        f"{s['clients']} clients (sizes {', '.join(map(str, s['sizes']))}), batch size {s['batch_size']}, "
        f"{steps} local step{'s' if steps != 1 else ''}, statistics on <= {s['stat_samples']} samples per client, "
        f"seed {s['seed']}",
        "",
        "1. BN layers: share of each input's variance (mean over channels)",
        "",
        *_text_table(layer_rows(d)),
        "(between clients = the relative bias of the variance FedAvg+BN averages, sum_i p_i var_i)",
        "",
        "2. First local step: aggregated gradient vs the centralized gradient on the union batch",
        "",
        *_text_table(gradient_rows(d)),
        *([f"(FedTAN's update error after {steps} steps is client drift, not BN)"] if steps > 1 else []),
        "",
        "3. Shift (excess over an i.i.d. re-partition of the same samples)",
        "",
    ]
    verdict = verdict_lines(d)
    cut = verdict.index("")
    lines += verdict[:cut] + ["", "4. " + verdict[cut + 1]] + verdict[cut + 2:]
    lines += ["", f"5. Communication per round on this model ({s['clients']} clients, float32)", "",
              *_text_table(cost_rows(d)), f"({s['seconds']:.1f} s)"]
    return "\n".join(lines)


def to_html(d: Diagnosis) -> str:
    """The report as HTML (notebooks): the three tables and the verdict."""
    verdict = "<br>".join(html.escape(line).replace("   ", "&nbsp;&nbsp;&nbsp;") for line in verdict_lines(d))
    return "\n".join([
        html_table(layer_rows(d), caption="BN layers: share of each input's variance (mean over channels; "
                                          "between clients = the relative bias of FedAvg+BN's averaged variance)"),
        html_table(gradient_rows(d), caption="First local step: aggregated gradient vs the centralized one"),
        f"<p>{verdict}</p>",
        html_table(cost_rows(d), caption=f"Communication per round ({d.setting['clients']} clients, float32)"),
    ])


def to_json(d: Diagnosis) -> str:
    """The diagnosis as JSON (non-finite numbers as ``null``)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(d.to_dict()), indent=2)


def figure(d: Diagnosis, *, columns: int = 3):
    """Three panels: per-layer variance shares, first-step gradient errors, the shift map.

    Parameters
    ----------
    d : Diagnosis
    columns : {3, 1}, default 3
        Panels side by side (a wide screen or a terminal's ``--figure``) or stacked (a narrow page).

    Returns
    -------
    matplotlib.figure.Figure
        Nothing is written (:func:`bnfl.plots.save_figure` or ``fig.savefig`` do that).
    """
    if columns not in (1, 3):
        raise ValueError(f"columns must be 1 or 3, got {columns!r}")
    shape = (1, 3) if columns == 3 else (3, 1)
    fig, (ax1, ax2, ax3) = plots.new_figure(*shape, width=3.8 if columns == 3 else 5.2, height=3.1)
    names = [r["name"] for r in d.layers]
    x = np.arange(len(names))
    w = 0.27
    series = [("between clients", "between", "#0072B2"),
              ("between, within classes", "between_given_label", "#CC79A7"),
              (f"batch noise (B={d.setting['batch_size']})", "batch_noise", "#E69F00")]
    for j, (label, key, color) in enumerate(series):
        vals = [np.nan if r[key] is None else r[key] for r in d.layers]
        ax1.bar(x + (j - 1) * w, vals, w, label=label, color=color)
    if all(r["between_given_label"] is None for r in d.layers):
        ax1.text(0.98, 0.68, "within classes: not measurable\n(no class held by two clients)", fontsize=7,
                 color="#CC79A7", transform=ax1.transAxes, va="top", ha="right")
    ax1.set_xticks(x, [f"BN {i + 1}" for i in range(len(names))])
    ax1.set_ylabel("share of the input's variance")
    ax1.set_title("BN statistics per layer")
    ax1.set_ylim(0, max(0.05, *(v for r in d.layers for _, k, _ in series if (v := r[k]) is not None)) * 1.7)
    ax1.legend(loc="upper right")

    modes = list(COUPLINGS)
    errs = [max(d.grad_error[m], 1e-17) for m in modes]
    colors = [plots.color_for(COUPLINGS[m]) for m in modes]
    ax2.bar(range(3), errs, color=colors)
    ax2.scatter(range(3), [max(d.grad_error_floor[m], 1e-17) for m in modes], marker="_", s=400, color="black",
                zorder=3, label="i.i.d. split")
    for i, e in enumerate(errs):
        ax2.text(i, e * 1.6, f"{e:.2g}", ha="center", fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylim(1e-17, 30)
    ax2.set_xticks(range(3), [_label(COUPLINGS[m]).replace("FedAvg+Algorithm 2", "FedAvg+Alg. 2") for m in modes],
                   rotation=15)
    ax2.set_ylabel("rel. error of the aggregated gradient")
    ax2.set_title("First local step vs centralized")
    ax2.legend(loc="upper right")

    lx = 0.0 if d.label_divergence is None else d.label_divergence - d.label_floor
    measurable = d.feature_shift is not None and d.feature_floor is not None and d.feature_floor > 0
    fx = d.feature_shift / d.feature_floor if measurable else 0.0
    lim_x, lim_y = max(1.0, lx * 1.1), max(3 * rules.FEATURE_SHIFT_RATIO, fx * 1.2)
    ax3.axvline(rules.LABEL_SKEW_THRESHOLD, color="grey", lw=1, ls="--")
    ax3.axhline(rules.FEATURE_SHIFT_RATIO, color="grey", lw=1, ls="--")
    below = rules.FEATURE_SHIFT_RATIO - 0.06 * lim_y
    for tx, ty, text in ((0.0, below - 0.05 * lim_y, "no\nshift"), (0.55 * lim_x, below, "label skew"),
                         (0.0, 0.85 * lim_y, "feature\nshift"), (0.55 * lim_x, 0.9 * lim_y, "both")):
        ax3.text(tx, ty, text, color="grey", fontsize=8)
    marker = "o" if measurable else "^"
    ax3.scatter([lx], [fx], s=80, color=plots.color_for(d.recommendation.fix), marker=marker, zorder=3)
    ax3.annotate(f"this setting\n-> {_label(d.recommendation.fix)}", (lx, fx), xytext=(0.5 * lim_x, 0.45 * lim_y),
                 fontsize=8, arrowprops={"arrowstyle": "->", "color": "grey"})
    ax3.set_xlim(-0.05 * lim_x, lim_x)
    ax3.set_ylim(-0.05 * lim_y, lim_y)
    ax3.set_xlabel("label divergence above i.i.d.")
    ax3.set_ylabel("within-class share / its i.i.d. value")
    ax3.set_title(f"Shift: {SHIFT_WORDS[d.shift]}")
    return fig
