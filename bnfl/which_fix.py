"""Which BN fix for which setting: the decision table of ``docs/which-fix.md``, with its numbers computed.

Five rows: the four fixes (FedTAN, HBN, FixBN, FedBN) and FedAvg+GN, the BN-free alternative. The
qualitative columns (the shift each addresses, what leaves a client, the assumptions) are text
written from the papers and bnfl's implementation (:data:`PROFILES`); every number is computed:

* :func:`communication`: bytes and communication rounds of one training round of each method on
  the benchmark's model (Q-MLP-BN on the digits, 5 clients), counted by the engine's channel
  (:class:`bnfl.fl.comm.Channel`, the same count as :func:`bnfl.fl.comm_volume`);
* :func:`engines`: which engines each method runs on, asked of the algorithm and the model;
* :func:`headlines`: the paper's headline number and ours, read from the committed
  ``figures/<id>/result.json``;
* :func:`benchmark`: the common benchmark's paired differences (``figures/bench-bn-fixes``).

:func:`markdown` and :func:`benchmark_markdown` render it; the docs build writes both into the which-fix page.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bnfl.experiments import training
from bnfl.experiments.core import Context, Result
from bnfl.experiments.counting import claim_word, entry_verdict
from bnfl.methods import METHODS as ALL
from bnfl.methods import get
from bnfl.models import build
from bnfl.nn.batched import batching_obstacle

__all__ = ["HEADLINES", "METHODS", "PROFILES", "Profile", "benchmark", "benchmark_markdown", "communication",
           "engines", "headlines", "markdown"]

#: The rows of the table: the four fixes, then the BN-free alternative; FedAvg+BN is the baseline.
METHODS: tuple[str, ...] = ("fedtan", "hbn", "fixbn", "fedbn", "fedavg+gn")


@dataclass(frozen=True)
class Profile:
    """What a method is for, in words (the computed columns are not here)."""

    shift: str
    how: str
    models: str
    leaves_client: str
    overhead: str
    assumptions: str


PROFILES: dict[str, Profile] = {
    "fedtan": Profile(
        shift="label skew",
        how="exchanges layer-wise statistics so the aggregated gradient equals the centralized one",
        models="one global",
        leaves_client="weights, BN statistics; at each coupled step each layer's batch means, variances and "
                      "their gradients",
        overhead="3L+1 synchronous exchanges per coupled step (L BN layers): clients online together",
        assumptions="every client takes part in each coupled step (bnfl couples the first local step of a round)"),
    "hbn": Profile(
        shift="label skew, small batches",
        how="mixes batch and global statistics with a learned per-client weight",
        models="one global (alpha stays on the client)",
        leaves_client="weights and the eq. 7 moments (per-layer means and variances of the client's data)",
        overhead="one pass over the client's data per round for eq. 7; a statistics-only round T+1",
        assumptions="the global statistics' EMA (lambda) had rounds enough to forget the initial model"),
    "fixbn": Profile(
        shift="label skew",
        how="FedAvg+BN, then the global statistics frozen from round T* on",
        models="one global",
        leaves_client="weights and BN running statistics (as FedAvg+BN)",
        overhead="none beyond FedAvg+BN",
        assumptions="the averaged statistics at T* suit every client's data"),
    "fedbn": Profile(
        shift="feature shift",
        how="keeps every BN layer (statistics, scale, shift) on its client",
        models="one per client",
        leaves_client="weights except the BN layers: no statistics",
        overhead="none (less traffic than FedAvg+BN)",
        assumptions="each client is scored on its own data; a new client has no BN layers of its own"),
    "fedavg+gn": Profile(
        shift="any (no BN)",
        how="GroupNorm normalises each sample on its own: no batch statistics at all",
        models="one global",
        leaves_client="weights only",
        overhead="none (GN costs a little more per sample than BN)",
        assumptions="the architecture tolerates GN instead of BN"),
}


def _label(method: str) -> str:
    return ALL[method].label


_COMM_SPEC: dict[str, Any] = {"data": {"name": "digits", "form": "flat"}, "model": {"name": "q_mlp_bn"},
                              "partition": {"kind": "iid", "num_clients": 5}, "rounds": 2,
                              "train": {"local_steps": 1, "batch_size": 16, "eval_every": 1}}


def communication(methods: tuple[str, ...] = ("fedavg+bn", *METHODS)) -> dict[str, dict[str, float]]:
    """Bytes and communication rounds of one training round of each method, counted by the engine.

    Two rounds of each method train on the benchmark's model (Q-MLP-BN, digits, 5 clients, all
    taking part); the second round's traffic is the difference of the channel's running totals
    (HBN's statistics-only round ``T+1`` comes after it and is not counted).
    Returns ``{method: {"bytes": ..., "rounds": ..., "vs_bn": bytes / FedAvg+BN's bytes}}``.
    """
    torch.set_num_threads(1)
    out: dict[str, dict[str, float]] = {}
    for m in methods:
        run = training.train(Context(profile="smoke"), {**_COMM_SPEC, "method": m})
        b, r = run["bytes_total"], run["comm_rounds"]
        out[m] = {"bytes": float(b[1] - b[0]), "rounds": float(r[1] - r[0])}
    base = out.get("fedavg+bn", {}).get("bytes")
    for v in out.values():
        v["vs_bn"] = v["bytes"] / base if base else math.nan
    return out


def engines(method: str) -> list[str]:
    """The engines ``method`` runs on: ``sequential`` (always), ``batched`` (its clients as one
    computation, :mod:`bnfl.fl.batched`), ``torch.distributed`` and ``Flower`` (no coupled step:
    a Flower node keeps no autograd graph between messages)."""
    m = get(method)
    alg = m.algorithm()
    out = ["sequential"]
    model = build("q_mlp_bn", norm=m.norm)
    if alg.batching_obstacle() is None and batching_obstacle(model) is None:
        out.append("batched")
    if alg.communicates and not alg.centralized:
        out.append("torch.distributed")
        if all(alg.coupled_step(r) is None for r in (1, 2)):
            out.append("Flower")
    return out


@dataclass(frozen=True)
class Headline:
    """Where a method's headline number lives: entry, the rows' key column and values, the columns."""

    entry: str
    key: str
    row: str
    baseline: str
    paper_col: str
    ours_col: str
    paper_key: str
    paper_row: str
    paper_baseline: str
    setting: str
    #: How the baseline is shown (default: ``baseline``); a paper's own spelling (FixBN's
    #: "FEDAVG +BN") is only the key its table is read by.
    shown_baseline: str = ""


HEADLINES: dict[str, Headline] = {
    "fedtan": Headline("fedtan-tab1", "FL scheme", "FedTAN", "FedAvg+BN", "Non-i.i.d. (%)", "non-i.i.d. ours",
                       "FL scheme", "FedTAN", "FedAvg+BN", "non-iid, with momentum (paper: CIFAR-10, ResNet-20)"),
    "hbn": Headline("hbn-tab1", "method", "HBN", "BN", "CIFAR-10 phi=0.1", "Q-DIG phi=0.1",
                    "method", "HBN", "BN", "Dirichlet phi = 0.1 (paper: CIFAR-10, Simple-CNN)", "FedAvg+BN"),
    "fixbn": Headline("fixbn-tab4", "FL scheme", "FEDAVG +FIXBN (Ours)", "FEDAVG +BN", "Non-IID", "Non-IID ours",
                      "FL scheme", "FEDAVG +FIXBN (Ours)", "FEDAVG +BN", "non-iid (FedTAN's Table 1 setting)",
                      "FedAvg+BN"),
    "fedbn": Headline("fedbn-tab11", "method", "FedBN", "FedAvg", "mean", "mean",
                      "method", "FedBN", "FedAvg", "digits, 5 domains (paper: Digit-5)"),
    "fedavg+gn": Headline("fedtan-tab2", "FL scheme", "FedAvg+GN", "FedTAN", "with mom. Non-i.i.d.",
                          "with mom. Non-i.i.d. ours", "FL scheme", "FedAvg+GN", "FedTAN",
                          "non-iid, with momentum, against FedTAN (paper: CIFAR-10)"),
}


def _load(figures: Path, eid: str) -> dict[str, Any] | None:
    path = Path(figures) / eid / "result.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _cell(rows: list[Mapping[str, Any]], key: str, value: str, col: str) -> str:
    for r in rows:
        if str(r.get(key)) == value and r.get(col) not in (None, ""):
            return re.sub(r"\s*±\s*", " ± ", str(r[col]).strip())  # "82.66±1.48" -> "82.66 ± 1.48", as ours
    return "–"


def headlines(figures: str | Path) -> dict[str, dict[str, str]]:
    """``{method: {"entry", "setting", "paper", "ours", "profile", "verdict"}}`` from the committed results:
    the method's number and its baseline's, in the paper and in our run (``"–"`` where absent)."""
    out = {}
    for m, h in HEADLINES.items():
        res = _load(Path(figures), h.entry)
        if res is None:
            out[m] = {"entry": h.entry, "setting": h.setting, "paper": "–", "ours": "not computed",
                      "profile": "", "verdict": ""}
            continue
        shown = h.shown_baseline or h.baseline
        paper = (f"{_cell(res['paper'], h.paper_key, h.paper_row, h.paper_col)} vs "
                 f"{shown} {_cell(res['paper'], h.paper_key, h.paper_baseline, h.paper_col)}")
        ours = (f"{_cell(res['rows'], h.key, h.row, h.ours_col)} vs "
                f"{shown} {_cell(res['rows'], h.key, h.baseline, h.ours_col)}")
        out[m] = {"entry": h.entry, "setting": h.setting, "paper": paper, "ours": ours,
                  "profile": str(res.get("profile", "")), "verdict": _entry_verdict(res)}
    return out


def _result(res: Mapping[str, Any]) -> Any:
    defaults = {"title": "", "profile": "", "seeds": [], "rows": [], "paper": []}
    return Result.from_dict({**defaults, **res})


def _entry_verdict(res: Mapping[str, Any]) -> str:
    """The entry's verdict as every report reads it (:func:`bnfl.experiments.counting.entry_verdict`)."""
    return entry_verdict(_result(res))


def _words(res: Mapping[str, Any]) -> dict[str, Any]:
    """``{claim name: Verdict}`` of the result's reproduction claims (:func:`bnfl.experiments.counting.claim_word`)."""
    r = _result(res)
    return {c.name: w for c in r.claims for w in [claim_word(r, c)] if w is not None}


def benchmark(figures: str | Path) -> dict[str, Any] | None:
    """The common benchmark's per-setting numbers (``None`` before ``figures/bench-bn-fixes`` exists):
    ``{"settings": [...], "scales": {...}, "cells": {method: {setting: text}}, "seeds": n}``."""
    res = _load(Path(figures), "bench-bn-fixes")
    if res is None:
        return None
    settings = list(res["series"]["settings"])
    claims = {c["name"]: c for c in res["claims"]}
    words = _words(res)
    cells: dict[str, dict[str, str]] = {}
    for m in ("fedavg+bn", *METHODS):
        label = _label(m)
        for s in settings:
            row = next((r for r in res["rows"] if r["setting"] == s and r["method"] == label), None)
            acc = "–" if row is None or row.get("acc (%)") is None else f"{row['acc (%)']:.2f}"
            slug = s.replace(" + ", "-").replace(" ", "-")
            c = claims.get(f"{slug}-{m}")
            text = acc
            if c is not None:
                iv = c.get("interval")
                diff = (f"{iv['estimate']:+.2f} [{iv['low']:+.2f}, {iv['high']:+.2f}]" if iv and "low" in iv
                        else "diverged" if c.get("measured") is None else f"{c['measured']:+.2f}")
                text += f" ({diff}: {words[c['name']].word if c['name'] in words else c['verdict']})"
            cells.setdefault(m, {})[s] = text
    control = {s: next((f"{r['acc (%)']:.2f}" for r in res["rows"] if r["setting"] == s
                        and r["method"].startswith("FedAvg+BN, iid") and r.get("acc (%)") is not None), "–")
               for s in settings}
    scales = {s: res["series"]["panels"][s]["scale"] for s in settings}
    return {"settings": settings, "scales": scales, "cells": cells, "control": control,
            "seeds": len(res.get("seeds", [])), "profile": res.get("profile", "")}


def _md(rows: list[list[str]]) -> str:
    def esc(t: str) -> str:
        return str(t).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines) + "\n"


def markdown(figures: str | Path, *, comm: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """The which-fix tables as markdown: the decision table, privacy, cost and assumptions, and the
    headline numbers (paper vs ours); the benchmark's table is :func:`benchmark_markdown`.
    ``comm``: :func:`communication`'s output (computed when not given)."""
    comm = communication() if comm is None else comm
    bn = comm["fedavg+bn"]
    table = [["method", "shift", "how", "models", "extra communication per round", "engines"]]
    costs = [["method", "what leaves the client", "compute overhead", "assumes"]]
    for m in METHODS:
        p, c = PROFILES[m], comm[m]
        extra = (f"{c['bytes'] - bn['bytes']:+,.0f} bytes ({100 * (c['vs_bn'] - 1):+.1f}%), "
                 f"{c['rounds']:.0f} exchange{'s' if c['rounds'] != 1 else ''}")
        table.append([f"**{_label(m)}**", p.shift, p.how, p.models, extra, ", ".join(engines(m))])
        costs.append([f"**{_label(m)}**", p.leaves_client, p.overhead, p.assumptions])
    out = ["### The decision table", "",
           f"Extra communication: one training round on the benchmark's model (Q-MLP-BN, 2 BN layers, 5 clients), "
           f"against FedAvg+BN's {bn['bytes']:,.0f} bytes in 1 exchange, counted by the engine.", "", _md(table),
           "### Privacy, cost and assumptions", "", _md(costs)]
    heads = headlines(figures)
    rows = [["method", "headline (setting)", "paper", "ours", "entry (profile, verdict)"]]
    for m in METHODS:
        h = heads[m]
        rows.append([_label(m), h["setting"], h["paper"], h["ours"],
                     f"`{h['entry']}` ({h['profile']}, {h['verdict']})"])
    out += ["### Headline numbers: the paper's and ours", "",
            "Accuracy (%) of the method against its paper's baseline; ours on the quick profile's stand-in data "
            "(the 8x8 digits), so the levels differ from the paper's and the gap is what to compare.", "", _md(rows)]
    return "\n".join(out)


def fixbn_feature_shift(figures: str | Path) -> str:
    """The short answer's sentence on FixBN under feature shift, from the stored benchmark: its
    difference from FedAvg+BN with the verdict word, the rate it was tuned to and the rates that
    diverged in its tuning (read from the row's ``lr tuning``)."""
    res = _load(Path(figures), "bench-bn-fixes")
    if res is None:
        return ("FixBN assumes the averaged statistics suit every client; `figures/bench-bn-fixes` is not computed "
                "yet to say how it fares under feature shift.\n")
    c = next((c for c in res["claims"] if c["name"] == "feature-shift-fixbn"), None)
    row = next((r for r in res["rows"] if r["setting"] == "feature shift" and r["method"] == _label("fixbn")), None)
    if c is None or row is None:
        return "FixBN assumes the averaged statistics suit every client; the stored benchmark has no FixBN row.\n"
    iv, word = c.get("interval") or {}, _words(res).get("feature-shift-fixbn")
    diff = (f"{iv['estimate']:+.2f} [{iv['low']:.2f}, {iv['high']:.2f}] points over FedAvg+BN (95% t-interval, "
            f"{iv.get('n')} seeds)" if "low" in iv else "no interval (a run diverged)")
    grid = str(row.get("lr tuning", ""))
    bad = re.findall(r"([\d.]+): diverged", grid)
    text = (f"FixBN assumes the averaged statistics suit every client. In the committed run of the common benchmark "
            f"below, under feature shift at its tuned rate {row.get('lr')}: {diff}, "
            f"**{word.word if word is not None else c['verdict']}** (\"repairs FedAvg+BN's whole damage\": the "
            f"difference at least the measured damage, {c['threshold']:.2f} points)")
    if bad:
        text += f"; in its tuning, the rate{'s' if len(bad) > 1 else ''} {', '.join(bad)} diverged there"
    return text + ".\n"


def benchmark_markdown(figures: str | Path) -> str:
    """The common benchmark's table as markdown (:func:`benchmark`), or a line saying how to compute it."""
    bench = benchmark(figures)
    if bench is None:
        return ("*`figures/bench-bn-fixes` is not computed yet: run "
                "`bnfl run bench-bn-fixes --profile quick --out figures`.*\n")
    rows = [["method"] + [f"{s} ({bench['scales'][s]})" for s in bench["settings"]]]
    rows.append(["FedAvg+BN, iid split (what BN reaches without the shift)"]
                + [bench["control"][s] for s in bench["settings"]])
    for m in ("fedavg+bn", *METHODS):
        rows.append([_label(m)] + [bench["cells"][m][s] for s in bench["settings"]])
    return "\n".join([
        f"Accuracy (%), mean over {bench['seeds']} seeds ({bench['profile']} profile); in brackets the paired "
        "difference from FedAvg+BN with its 95% t-interval, and the verdict of \"repairs FedAvg+BN's whole damage\" "
        "(the interval above the setting's damage: iid split minus skewed, FedAvg+BN; the benchmark's rule).", "",
        _md(rows)])

