"""The few calls a reproduction notebook makes, and the notebook's source from the registry.

A notebook ``notebooks/<paper>/<id>.py`` is written by ``scripts/make_notebooks.py`` from
:func:`source`: the entry's title, summary, what to look for and deviations as prose (they live
once, in the registry entry), and these calls::

    from bnfl.experiments import notebook

    ID = "fedtan-fig4"
    result = notebook.result(ID)      # the committed quick result, or computed now (says which)
    notebook.figure(ID, result)       # the figure as an inline PNG image
    notebook.tables(result)           # our numbers beside the paper's, as HTML tables
    notebook.claims(result)           # the claim checks, as an HTML table
    notebook.provenance(result)       # notes, then provenance folded in a <details> dropdown

Computing and showing stay apart: :func:`result` never plots, and the display functions never
compute. Each display function shows what a pure function builds (:func:`png`,
:func:`tables_html`, :func:`claims_html`, :func:`provenance_html`), so tests read the same HTML
the notebook shows.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

import torch

from bnfl.display import cell_text, html_table, image, png
from bnfl.display import show_html as _show_html
from bnfl.experiments.core import labels_first
from bnfl.experiments.counting import entry_verdict, standing
from bnfl.experiments.dashboard import data_names, stand_in_title, stand_ins_of, why_lines
from bnfl.experiments.registry import get
from bnfl.experiments.report import claim_rows
from bnfl.experiments.runner import load_result, plot, result_path, run
from bnfl.experiments.vocabulary import PAPER_NAMES, VERDICT_COLOURS, VERDICT_MARKS, WORD_COLOURS
from bnfl.plots import figures_dir

__all__ = [
    "claims",
    "claims_html",
    "figure",
    "html_table",
    "image",
    "png",
    "profile",
    "provenance",
    "provenance_html",
    "result",
    "tables",
    "tables_html",
]

def profile() -> str:
    """The profile a notebook runs at: ``$BNFL_PROFILE``, default ``"quick"``."""
    return os.environ.get("BNFL_PROFILE", "").strip() or "quick"


def _shown(path: Path) -> str:
    """``path`` relative to the checkout bnfl is imported from, when it lies inside it."""
    root = Path(__file__).resolve().parents[2]
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def result(experiment_id: str, *, profile_name: str | None = None,
           out: str | os.PathLike[str] | None = None, device: str | None = None) -> Any:
    """The result a notebook shows: the stored one when its profile matches, else computed now.

    Prints one line saying which, and where it came from.

    Parameters
    ----------
    experiment_id : str
        Catalog id, e.g. ``"fedtan-fig4"``.
    profile_name : str, optional
        ``"smoke"``, ``"quick"`` or ``"paper"``; default :func:`profile` (``$BNFL_PROFILE``,
        else ``"quick"``).
    out : path, optional
        Folder of stored results (``<out>/<id>/result.json``); default
        :func:`bnfl.plots.figures_dir` (``$BNFL_FIGURES_DIR``, else the checkout's
        ``figures/``, which holds the committed quick results).
    device : str, optional
        Torch device when the result is computed; default ``"cuda"`` at the paper profile when
        one is available, else ``"cpu"``.

    Returns
    -------
    Result
        Nothing is written: a computed result lives in the notebook. To keep one, run
        ``bnfl run <id> --profile <profile> --out DIR`` and set ``BNFL_FIGURES_DIR=DIR``.
    """
    name = profile_name or profile()
    folder = Path(out) if out is not None else figures_dir()
    stored = load_result(folder, experiment_id)
    if stored is not None and stored.profile == name:
        print(f"Loaded the stored {name} result {_shown(result_path(folder, experiment_id))} "
              f"(commit {stored.git_commit or 'unknown'}).")
        return stored
    if device is None:
        device = "cpu"
        if name == "paper":
            device = "cuda" if torch.cuda.is_available() else "cpu"
    why = (f"the stored one in {_shown(folder)} is at profile {stored.profile!r}" if stored is not None
           else f"no stored result in {_shown(folder)}")
    progress = os.environ.get("TQDM_DISABLE", "").lower() in ("", "0", "false")
    computed = run(experiment_id, profile=name, device=device, progress=progress)
    print(f"Computed {experiment_id} now at profile {name!r} on {device} in "
          f"{computed.duration_s:.1f} s ({why}); not saved.")
    return computed


def figure(experiment_id: str, result: Any) -> None:
    """Plot ``result`` with its entry's plot function and show it as a PNG (see :func:`image`)."""
    image(plot(experiment_id, result))


def tables_html(result: Any) -> str:
    """Our rows and, below them, the paper's numbers (verbatim) as HTML tables."""
    parts = [html_table(labels_first(result.rows), caption=f"Ours ({result.profile} profile)")]
    if result.paper:
        parts.append(html_table(labels_first(result.paper), caption="The paper (verbatim)"))
    elif str(result.id).startswith("bench-"):
        parts.append("<p>No paper has this benchmark: there are no paper numbers to set beside ours.</p>")
    else:
        parts.append("<p>The paper reports no numbers for this entry beyond its figure.</p>")
    return "\n".join(parts)


def claims_html(result: Any) -> str:
    """The claim checks as an HTML table (verdict, measured, threshold, margin, numbers), each
    check's why under it, one line each (:func:`bnfl.experiments.dashboard.why_lines`).

    ``margin >= 0`` passes; ``info`` rows are reported, not asserted. A claim that re-reads a
    measurement another entry counts (``Claim.counted_in``) says so and stays out of the caption's
    counts.
    """
    if not result.claims:
        return "<p>This entry checks no claim.</p>"

    rows = []
    for i, (row, c) in enumerate(zip(claim_rows(result), result.claims, strict=True), 1):
        s = standing(result, c)
        check = f"{i}. {c.statement}" + {"consistency": " (consistency check)",
                                          "structural": " (structural check)"}.get(s.kind, "")
        if c.counted_in:
            check += f" (re-reads {c.counted_in}; counted there)"
        elif s.note:
            check += f" ({'' if s.counted else 'reported only: '}{s.note})"
        rows.append({**{k: v for k, v in row.items() if k != "why"}, "check": check})  # verdict: claim_rows' word
    colour = {VERDICT_MARKS[v]: VERDICT_COLOURS[v] for v in VERDICT_MARKS}
    colour.update({w.upper(): c for w, c in WORD_COLOURS.items()})
    elsewhere = sum(not standing(result, c).counted for c in result.claims)
    caption = (f"verdict: {entry_verdict(result)}"
               + (f" ({elsewhere} more reported only, counted where their measurement is)" if elsewhere else ""))

    def style(v: str) -> str:
        word = next((k for k in colour if str(v).startswith(k)), None)
        return f"color:{colour.get(word, 'inherit')};font-weight:bold;"

    table = html_table(rows, caption=caption, styles={"verdict": style})
    lines = why_lines([c.why for c in result.claims])
    if lines:
        table += ("\n<p><strong>Why, by check</strong></p><ul class=\"bnfl-whys\">"
                  + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
    return table


def provenance_html(result: Any) -> str:
    """The notes, then the run's provenance folded in a collapsed ``<details>`` dropdown."""
    parts = []
    if result.notes:
        parts.append("<p><strong>Notes</strong></p><ul>"
                     + "".join(f"<li>{html.escape(cell_text(str(n)))}</li>" for n in result.notes) + "</ul>")
    facts = [
        ("profile", result.profile),
        ("seeds", ", ".join(str(s) for s in result.seeds)),
        ("device", result.device),
        ("compute time (s)", f"{result.duration_s:.1f}"),
        ("git commit", result.git_commit or "unknown"),
        ("machine", ", ".join(f"{k} {v}" for k, v in (getattr(result, "machine", None) or {}).items()) or "not recorded"),
        ("config hash", result.config_hash),
        ("command", result.command),
    ]
    body = "".join(f"<tr><th style=\"text-align:left\">{html.escape(k)}</th>"
                   f"<td><code>{html.escape(str(v))}</code></td></tr>" for k, v in facts)
    body += "".join(f"<tr><th style=\"text-align:left\">deviation</th><td>{html.escape(cell_text(str(d)))}</td></tr>"
                    for d in result.deviations)
    parts.append(f'<details class="bnfl-provenance"><summary>Provenance: how this result was '
                 f"made</summary><table>{body}</table></details>")
    return "\n".join(parts)


def tables(result: Any) -> None:
    """Show :func:`tables_html`."""
    _show_html(tables_html(result))


def claims(result: Any) -> None:
    """Show :func:`claims_html`."""
    _show_html(claims_html(result))


def provenance(result: Any) -> None:
    """Show :func:`provenance_html`."""
    _show_html(provenance_html(result))


# --------------------------------------------------------------------------------------------
# The notebook's source, generated from the registry (scripts/make_notebooks.py writes it)
# --------------------------------------------------------------------------------------------

#: First line of every generated notebook's markdown; ``make_notebooks.py`` recognises its files by it.
GENERATED_MARK = "Generated by `scripts/make_notebooks.py` from the registry"

_HEADER = """\
# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
"""


def label(experiment_id: str) -> str:
    """``"fedtan-fig4"`` -> ``"FedTAN Fig. 4"``, ``"fedtan-tabD"`` -> ``"FedTAN Table D"``."""
    import re

    paper, _, rest = experiment_id.partition("-")
    name = PAPER_NAMES.get(paper, paper.upper())
    m = re.fullmatch(r"(fig|tab)(\w+)", rest)
    if not m:
        return f"{name} {rest}".strip()
    return f"{name} {'Fig.' if m.group(1) == 'fig' else 'Table'} {m.group(2)}"


def _datasets(config: Any) -> list[str]:
    """Names of the data sets a configuration trains on (:func:`bnfl.experiments.dashboard.data_names`)."""
    return data_names(config)


def _comment(text: str) -> list[str]:
    """Markdown prose as ``# `` comment lines wrapped at 100 characters (blank lines kept); a heading
    stays on one line (wrapped, its tail would become a paragraph)."""
    import textwrap

    lines: list[str] = []
    for para in text.strip().split("\n\n"):
        flat = " ".join(para.split())
        wrapped = [flat] if flat.startswith("#") else textwrap.wrap(
            flat, width=98, break_long_words=False, break_on_hyphens=False)
        lines += [f"# {w}" for w in wrapped] + ["#"]
    return lines[:-1]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def prose(experiment_id: str) -> str:
    """The notebook's introduction (markdown), from the registry entry alone.

    Title, summary and ``look_for`` come from the entry (the title names the quick profile's
    stand-in data, :func:`bnfl.experiments.dashboard.stand_in_title`); the quick profile's deviations and
    the paper profile's data sets, seeds and deviations come from its configurations.
    """
    entry = get(experiment_id)
    parts = [f"# {label(entry.id)}: {stand_in_title(entry.title, stand_ins_of(entry))}", _sentence(entry.summary)]
    look_for = str(getattr(entry, "look_for", "") or "").strip()
    if look_for:
        parts.append(f"**What to look for.** {_sentence(look_for)}")
    quick = entry.config("quick").get("deviations") or []
    paper_cfg = entry.config("paper")
    seeds = dict(getattr(entry, "default_seeds", {}) or {})
    package = entry.compute.__module__.rsplit(".", 1)[0].replace(".", "/")
    if entry.paper == "bench":
        nq = seeds.get("quick", 1)
        parts.append(
            f"**Profiles.** No paper has this benchmark. This page shows the `quick` profile, the embedded data "
            f"on a CPU ({nq} seed{'s' if nq != 1 else ''}), whose result is committed in "
            f"`figures/{entry.id}/result.json`; rerun it with `bnfl run {entry.id} --profile quick --out OUT`.")
    elif entry.kind != "training":
        parts.append(
            "**Profiles.** This entry needs no training: it is computed from the real models and "
            "tables of bnfl, so every profile gives the same numbers in well under a second.")
    else:
        nq = seeds.get("quick", 1)
        text = (f"**Profiles.** This page shows the `quick` profile, the embedded proxy data on a CPU "
                f"({nq} seed{'s' if nq != 1 else ''}), whose result is committed in "
                f"`figures/{entry.id}/result.json`")
        text += (". Its deviations from the catalog's recipe: " + "; ".join(quick) + ".") if quick else "."
        data = ", ".join(f"`{d}`" for d in _datasets(paper_cfg)) or "the paper's data"
        n = seeds.get("paper", 1)
        text += (f" The paper's setup trains on {data} read from a local folder, with {n} "
                 f"seed{'s' if n != 1 else ''}: `bnfl run {entry.id} --profile paper --data-root DIR "
                 f"--device cuda --out OUT`, then set `BNFL_PROFILE=paper` and `BNFL_FIGURES_DIR=OUT` "
                 "to show it here.")
        paper_dev = paper_cfg.get("deviations") or []
        if paper_dev:
            text += " Its own assumptions: " + "; ".join(paper_dev) + "."
        parts.append(text)
    parts.append(
        f"*{GENERATED_MARK} entry `{entry.id}`: edit the entry under "
        f"`{package}/`, then run `python scripts/make_notebooks.py`.*")
    return "\n\n".join(parts)


def source(experiment_id: str) -> str:
    """The jupytext percent-format source of ``notebooks/<paper>/<id>.py``."""
    lines = [_HEADER, "# %% [markdown]", *_comment(prose(experiment_id)), "",
             '# %% tags=["parameters"]', "from bnfl.experiments import notebook", "",
             f"ID = {json.dumps(experiment_id)}", "",
             "# %%", "result = notebook.result(ID)", ""]
    sections = [
        ("## The figure", "notebook.figure(ID, result)"),
        ("## Our numbers beside the paper's", "notebook.tables(result)"),
        ("## Claim checks\n\nEach check encodes one \"Check\" line of the catalog; `margin >= 0` "
         "passes. A margin no larger than the noise (the seed spread, or one test sample) is "
         "*inconclusive*. A failing check is a finding about the proxy (or about the paper), "
         "reported with its numbers and a one-line why, never tuned away; `info` rows are reported, "
         "not asserted; *consistency checks* compare with values inferred from the same paper.",
         "notebook.claims(result)\n\n# %%\nnotebook.provenance(result)"),
    ]
    for heading, code in sections:
        lines += ["# %% [markdown]", *_comment(heading), "", "# %%", code, ""]
    return "\n".join(lines)
