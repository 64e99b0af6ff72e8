"""The leaderboard of a ``bnfl bench`` run: a table per setting, a figure, and a result file.

Per setting and method (:func:`leaderboard`):

* **accuracy**: mean ± sample standard deviation over the protocol's seeds (the setting's score);
* **vs FedAvg+BN**: the paired difference (method - FedAvg+BN, both at their tuned rates, paired
  by seed: same partition and initialisation draw) with its 95% Student t-interval
  (:func:`bnfl.intervals.estimate`);
* **repaired**: the share of BN's damage the method repairs, ``(method - FedAvg+BN) / (iid control
  - FedAvg+BN)``: 0% is FedAvg+BN, 100% reaches FedAvg+BN on an iid split of the same data;
* **rank**: 1 + the number of methods whose 95% t-interval of the mean lies wholly above this
  method's (methods whose intervals overlap share a rank);
* **comm / round**: bytes up and down over all clients per round, as the engine counted them;
* **wall**: seconds of the method's tuning and runs (where the baseline file records it).

The result file (``<out>/bench/result.json``, a :class:`~bnfl.experiments.core.Result` with id
``bench``) holds the rows and one interval claim per method and setting (``<setting>-<method>``:
the method beats FedAvg+BN), so ``bnfl compare`` reads two bench folders claim by claim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bnfl import _atomic
from bnfl.experiments.benchmarks.bench import mean_sd
from bnfl.experiments.benchmarks.bench_extended import ALIASES
from bnfl.experiments.core import Result
from bnfl.experiments.interval_claims import interval_claim
from bnfl.intervals import estimate
from bnfl.methods import METHODS, get
from bnfl.plots import color_for, forest, new_figure

__all__ = ["BENCH_ID", "claims", "damage_line", "figure", "leaderboard", "markdown", "result", "slug"]

#: The entry id of a bench's result file (``<out>/bench/result.json``).
BENCH_ID = "bench"
_BN = "fedavg+bn"
#: Colours of methods outside the Method table (yours), consistent across the panels.
_OWN_COLORS = ("#000000", "#AA3377", "#BBBB00", "#777777")


def slug(text: str) -> str:
    """A claim-name part: lower case, runs of other characters as ``-``."""
    return re.sub(r"[^a-z0-9+]+", "-", text.lower()).strip("-")


def _label(method: str) -> str:
    return ALIASES[method][0] if method in ALIASES else get(method).label


def _color(method: str) -> str:
    return color_for(ALIASES[method][1] if method in ALIASES else method)


def _mean_iv(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return float("nan"), float("nan")
    iv = estimate(values, method="t")
    return iv.low, iv.high


def leaderboard(records: Mapping[str, Mapping[str, Any]], reference: Mapping[str, Any],
                methods: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """``{setting: rows}``, best first (module docstring); ``records`` ``{method: {setting: record}}``
    (:func:`bnfl.experiments.benchmarks.bench.method_record`) holds FedAvg+BN and every method of
    ``methods``; ``reference`` ``{setting: {"damaged", "control"}}``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for setting in reference:
        bn = records[_BN][setting].get("scores") or []
        control = float(np.mean(reference[setting]["control"]))
        bn_mean = mean_sd(bn)[0]
        rows = []
        for m in methods:
            rec = records[m][setting]
            row: dict[str, Any] = {"setting": setting, "method": _label(m), "id": m}
            if "why" in rec:
                rows.append({**row, "why": rec["why"]})
                continue
            sc = rec["scores"]
            mean, sd = mean_sd(sc)
            low, high = _mean_iv(sc)
            row.update({"acc": mean, "sd": sd, "low": low, "high": high, "per seed": [round(v, 2) for v in sc],
                        "lr": rec["lr"], "lr tuning": rec.get("tuning"), "comm_per_round": rec.get("comm_per_round"),
                        "seconds": rec.get("seconds")})
            if rec.get("stopped"):
                row["why"] = (f"diverged (non-finite training loss) on {len(rec['stopped'])} of {len(sc)} seeds, at "
                              f"round(s) {', '.join(map(str, rec['stopped']))}")
            if m != _BN and len(sc) > 1 and math.isfinite(mean) and math.isfinite(bn_mean) and len(bn) == len(sc):
                iv = estimate(sc, bn, method="t")
                row["diff"] = {"estimate": iv.estimate, "low": iv.low, "high": iv.high}
            if m == _BN:
                row["diff"] = {"estimate": 0.0, "low": 0.0, "high": 0.0}
            gap = control - bn_mean
            if math.isfinite(mean) and math.isfinite(gap) and gap > 0:
                row["repaired"] = 100.0 * (mean - bn_mean) / gap
            rows.append(row)
        ranked = [r for r in rows if math.isfinite(r.get("acc", float("nan")))]
        for r in ranked:
            lo, hi = r["low"], r["high"]
            r["rank"] = 1 + sum(o is not r and math.isfinite(o["low"]) and math.isfinite(hi) and o["low"] > hi
                                for o in ranked) if math.isfinite(lo) else None
        rows.sort(key=_order)
        out[setting] = rows
    return out


def _order(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Ranked rows first, by rank then accuracy; then diverged rows; then rows that do not apply."""
    acc = row.get("acc", float("nan"))
    if row.get("rank") is not None:
        return (0, row["rank"], -acc)
    return (1, 0, 0.0) if "acc" in row else (2, 0, 0.0)


def _pts(x: float) -> str:
    return f"{x:+.2f}"


def _bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def cells(row: Mapping[str, Any]) -> list[str]:
    """A leaderboard row as the table's cells: rank, method, accuracy, vs FedAvg+BN, repaired,
    comm / round, wall, lr."""
    if "acc" not in row:  # no scores: it does not apply ("n/a"), or it diverged at every rate it was tuned at
        why = row["why"] if row["why"].startswith("diverged") else f"n/a: {row['why']}"
        return ["—", row["method"], why, "—", "—", "—", "—", "—"]
    if not math.isfinite(row["acc"]):
        return ["—", row["method"], row.get("why", "diverged"), "—", "—", _bytes(row.get("comm_per_round")),
                _secs(row.get("seconds")), f"{row['lr']:g}"]
    acc = f"{row['acc']:.2f} ± {row['sd']:.2f}" if math.isfinite(row["sd"]) else f"{row['acc']:.2f}"
    d = row.get("diff")
    diff = ("(baseline)" if row["id"] == _BN else
            f"{_pts(d['estimate'])} [{_pts(d['low'])}, {_pts(d['high'])}]" if d else "—")
    rep = f"{row['repaired']:.0f}%" if "repaired" in row else "—"
    rank = str(row["rank"]) if row.get("rank") is not None else "—"
    return [rank, row["method"], acc, diff, rep, _bytes(row.get("comm_per_round")), _secs(row.get("seconds")),
            f"{row['lr']:g}"]


def _secs(s: float | None) -> str:
    return "—" if s is None else f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


HEADER = ["rank", "method", "accuracy (%)", "vs FedAvg+BN (pts, 95% CI)", "BN damage repaired", "comm / round",
          "wall", "lr"]


def damage_line(reference: Mapping[str, Sequence[float]]) -> str:
    """FedAvg+BN's damage in one setting (iid control - skewed, paired over seeds, the shared recipe's
    rate) in words; where its 95% interval reaches 0, that BN is not measurably hurt there."""
    control, damaged = list(reference["control"]), list(reference["damaged"])
    if len(control) < 2 or len(control) != len(damaged) or not all(map(math.isfinite, [*control, *damaged])):
        return "FedAvg+BN's damage: no interval (fewer than 2 seeds or a diverged run)"
    iv = estimate(control, damaged, method="t")
    text = (f"FedAvg+BN's damage (iid control - skewed, shared recipe's rate): {iv.estimate:+.2f} "
            f"[{iv.low:+.2f}, {iv.high:+.2f}] pts")
    if iv.low <= 0:
        text += ("; its interval reaches 0: BN is not measurably hurt here, so there is no damage to repair "
                 "(a method's difference with FedAvg+BN still stands)")
    return text


def markdown(board: Mapping[str, list[dict[str, Any]]], *, title: str, scales: Mapping[str, str],
             notes: Sequence[str] = (), reference: Mapping[str, Any] | None = None) -> str:
    """The leaderboard as markdown: one table per setting (under it FedAvg+BN's damage, with
    ``reference``), then ``notes``."""
    lines = [f"# {title}", ""]
    for setting, rows in board.items():
        lines += [f"## {setting} ({scales.get(setting, '')})", ""]
        if reference and setting in reference:
            lines += [damage_line(reference[setting]) + ".", ""]
        lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in cells(r)) + " |" for r in rows]
        lines.append("")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def claims(board: Mapping[str, list[dict[str, Any]]], records: Mapping[str, Mapping[str, Any]],
           seeds: Sequence[int]) -> list[Any]:
    """One interval claim per method (not FedAvg+BN) and setting: it beats FedAvg+BN (paired)."""
    out = []
    for setting, rows in board.items():
        bn = records[_BN][setting].get("scores")
        for row in rows:
            m = row["id"]
            rec = records[m][setting]
            if m == _BN or not bn or "scores" not in rec or len(rec["scores"]) != len(bn) or len(bn) < 2:
                continue
            out.append(interval_claim(
                f"{slug(setting)}-{slug(m)}", f"{setting}: {row['method']} beats FedAvg+BN (paired difference > 0, "
                "each at its tuned rate)", rec["scores"], bn, seeds=list(seeds), n_test=rec.get("n_test") or None,
                why=f"{row['method']} does not repair FedAvg+BN's damage here"))
    return out


def figure(board: Mapping[str, list[dict[str, Any]]], *, scales: Mapping[str, str], subtitle: str) -> Any:
    """One forest panel per setting: every method's paired difference with FedAvg+BN (95% interval),
    best first; a method without one is listed with its reason."""
    fig, axes = new_figure(1, len(board), width=4.0, height=0.5 + 0.42 * max(len(r) for r in board.values()),
                           squeeze=False)
    known = _known()
    own = list(dict.fromkeys(r["id"] for rows in board.values() for r in rows if r["id"] not in known))
    for ax, (setting, rows) in zip(axes[0], board.items(), strict=True):
        items, missing = [], []
        for r in rows:
            d = r.get("diff")
            if d and all(math.isfinite(d[k]) for k in ("estimate", "low", "high")):
                color = _color(r["id"]) if r["id"] in known else _OWN_COLORS[own.index(r["id"]) % len(_OWN_COLORS)]
                items.append({"label": r["method"], "estimate": d["estimate"], "low": d["low"], "high": d["high"],
                              "color": color})
            else:
                gone = "acc" in r or str(r.get("why", "")).startswith("diverged")
                missing.append(f"{r['method']}: {'diverged' if gone else 'n/a'}")
        if items:
            forest(ax, items, xlabel="vs FedAvg+BN (accuracy points)")
            for tick in ax.get_yticklabels():  # the methods under test stand out
                if tick.get_text() in {r["method"] for r in rows if r["id"] in own}:
                    tick.set_fontweight("bold")
        ax.set_title(f"{setting}\n({scales.get(setting, '')})", fontsize=9)
        if missing:
            ax.text(0.99, 0.01, "\n".join(missing), transform=ax.transAxes, ha="right", va="bottom", fontsize=7)
    fig.suptitle(f"bnfl bench: paired difference with FedAvg+BN, 95% t-interval ({subtitle})", fontsize=10)
    return fig


def _known() -> set[str]:
    return set(METHODS) | set(ALIASES)


def result(board: Mapping[str, list[dict[str, Any]]], records: Mapping[str, Mapping[str, Any]], *, profile: str,
           seeds: Sequence[int], config: Mapping[str, Any], key: str, notes: Sequence[str], duration: float,
           command: str, runs: Mapping[str, float], machine_info: Mapping[str, str]) -> Result:
    """The bench as a :class:`Result` (what ``bnfl compare`` reads)."""
    rows = []
    for setting, rs in board.items():
        for r in rs:
            c = cells(r)
            rows.append({"setting": setting, **dict(zip(HEADER, c, strict=True)),
                         **({"per seed": r["per seed"]} if "per seed" in r else {}),
                         **({"lr tuning": r["lr tuning"]} if r.get("lr tuning") else {})})
    return Result(id=BENCH_ID, title="bnfl bench: your methods beside the BN fixes on the common settings",
                  profile=profile, seeds=list(seeds), rows=rows, paper=[], claims=claims(board, records, seeds),
                  series={"board": {s: list(rs) for s, rs in board.items()}}, config=dict(config), config_hash=key,
                  notes=list(notes), duration_s=round(duration, 3), command=command, runs=dict(runs),
                  machine=dict(machine_info))


def write_text(path: Path, text: str) -> None:
    _atomic.write_text(path, text)
