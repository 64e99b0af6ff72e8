"""The notebooks: generated from the registry, executed once (by the docs build), shown right.

* ``notebooks/<paper>/<id>.py`` must be exactly what ``scripts/make_notebooks.py`` writes from the
  registry (``--check``), so their prose cannot drift from the entries.
* Every notebook under ``notebooks/`` is executed once per test session, by the docs build of
  ``tests/test_docs.py`` (the reproduction notebooks in the docs extension's shared kernels, the
  theory walkthroughs by myst-nb; either way a cell error fails the build);
  ``tests/test_docs.py`` reads the executed pages (beside the build, so that ``make test``'s
  workers, one test file each, build the site once) instead of running the notebooks again. The
  reproduction notebooks load the committed quick results (seconds each); smoke runs of every
  entry are the job of the experiments tests.
* :mod:`bnfl.experiments.notebook` is tested directly: which result it picks, and the HTML and
  PNG it shows.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "make_notebooks.py"


def _script():
    """``scripts/make_notebooks.py`` as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_notebooks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Generated from the registry
# ---------------------------------------------------------------------------------------------


def test_committed_notebooks_are_what_the_generator_writes():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (
        "notebooks differ from the registry; run `python scripts/make_notebooks.py`:\n"
        + proc.stdout + proc.stderr
    )


def test_generator_writes_checks_and_removes_stale(tmp_path: Path):
    from bnfl import experiments

    mod = _script()
    assert mod.differences(tmp_path)  # nothing there yet: every notebook is missing
    mod.write(tmp_path)
    assert mod.differences(tmp_path) == []
    eid = experiments.ids()[0]
    path = tmp_path / "notebooks" / experiments.get(eid).paper / f"{eid}.py"
    path.write_text(path.read_text() + "\nprint('edited by hand')\n")
    stale = path.with_name("fedtan-fig999.py")
    stale.write_text(path.read_text())
    hand = tmp_path / "notebooks" / "theory" / "walkthrough.py"
    hand.parent.mkdir(parents=True)
    hand.write_text("# %%\nprint(1)\n")
    diff = mod.differences(tmp_path)
    assert any("differs" in d and eid in d for d in diff)
    assert any("stale" in d and "fedtan-fig999" in d for d in diff)
    mod.write(tmp_path)
    assert mod.differences(tmp_path) == [] and not stale.exists() and hand.exists()


@pytest.mark.parametrize("eid", ["fedtan-fig8", "fedtan-tab3"])
def test_generated_notebook_is_the_entry_prose_plus_library_calls(eid: str):
    from bnfl import experiments
    from bnfl.experiments import notebook

    entry = experiments.get(eid)
    text = notebook.source(eid)
    flat = " ".join(line.removeprefix("#").strip() for line in text.splitlines())
    assert entry.title in flat
    assert " ".join(entry.summary.split())[:60] in flat
    look_for = getattr(entry, "look_for", "")
    if look_for:
        assert " ".join(look_for.split())[:60] in flat
    for deviation in entry.config("quick").get("deviations") or []:
        assert " ".join(deviation.split()) in flat
    # the code: one import and calls of bnfl.experiments.notebook, nothing defined here
    code = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert code[0] == "from bnfl.experiments import notebook"
    assert all(re.fullmatch(r'(result = )?notebook\.\w+\(ID(, result)?\)|notebook\.\w+\(result\)|ID = ".+"', line)
               for line in code[1:]), code
    compile(text, f"{eid}.py", "exec")


def test_label_names_the_paper_and_the_figure():
    from bnfl.experiments import notebook

    assert notebook.label("fedtan-fig4") == "FedTAN Fig. 4"
    assert notebook.label("fedtan-tabD") == "FedTAN Table D"
    assert notebook.label("hbn-tab6") == "HBN Table 6"


# ---------------------------------------------------------------------------------------------
# The library calls a notebook makes
# ---------------------------------------------------------------------------------------------


def _result(profile: str = "quick"):
    from bnfl import experiments

    return experiments.Result(
        id="fedtan-tab3", title="t", profile=profile, seeds=[0], rows=[{"method": "a<b", "MB": 1.23456}],
        paper=[{"method": "a<b", "MB": 1.2}],
        claims=[experiments.Claim(name="x", statement="x >= 1", verdict="fail", measured=0.5,
                                  threshold=1.0, margin=-0.5, detail="0.5 < 1")],
        notes=["a note"], deviations=["a deviation"], config_hash="abc", git_commit="1234567",
        command="bnfl run fedtan-tab3", duration_s=2.0,
    )


def test_result_loads_the_stored_result_of_the_same_profile(tmp_path: Path, capsys):
    from bnfl.experiments import notebook

    stored = _result("quick")
    (tmp_path / "fedtan-tab3").mkdir()
    (tmp_path / "fedtan-tab3" / "result.json").write_text(stored.to_json())
    got = notebook.result("fedtan-tab3", profile_name="quick", out=tmp_path)
    assert got.rows == json.loads(stored.to_json())["rows"] and got.config_hash == "abc"
    line = capsys.readouterr().out
    assert "Loaded the stored quick result" in line and "1234567" in line and line.count("\n") == 1


def test_result_computes_when_the_stored_profile_differs(tmp_path: Path, capsys, monkeypatch):
    from bnfl.experiments import notebook

    monkeypatch.setenv("BNFL_PROFILE", "smoke")
    (tmp_path / "fedtan-tab3").mkdir()
    (tmp_path / "fedtan-tab3" / "result.json").write_text(_result("quick").to_json())
    got = notebook.result("fedtan-tab3", out=tmp_path)
    assert got.profile == "smoke" and got.rows and got.config_hash != "abc"
    line = capsys.readouterr().out
    assert "now at profile 'smoke'" in line and "'quick'" in line and line.count("\n") == 1
    # nothing was written: the stored quick result is untouched
    assert json.loads((tmp_path / "fedtan-tab3" / "result.json").read_text())["profile"] == "quick"


def test_html_tables_escape_align_and_mark_verdicts():
    from bnfl.experiments import notebook

    r = _result()
    tables = notebook.tables_html(r)
    assert tables.count("<table") == 2 and "a&lt;b" in tables and "a<b" not in tables
    assert 'style="text-align:right;">1.2346</td>' in tables and "The paper (verbatim)" in tables
    assert "|---" not in tables
    claims = notebook.claims_html(r)
    assert ">FAIL</td>" in claims and "#cf222e" in claims and "verdict: structural checks: 1 fail" in claims
    assert notebook.html_table([]) == "<p><em>(none)</em></p>"


def test_provenance_is_folded_after_the_notes():
    from bnfl.experiments import notebook

    text = notebook.provenance_html(_result())
    assert text.index("a note") < text.index("<details")
    assert "<details class=\"bnfl-provenance\">" in text and "<details open" not in text
    assert "1234567" in text and "a deviation" in text and "bnfl run fedtan-tab3" in text
    long = notebook.provenance_html(dataclasses.replace(_result(), notes=["ratio 1.3333333333"],
                                                        deviations=["lambda 0.012345678"]))
    assert "ratio 1.33<" in long and "lambda 0.0123<" in long


def test_png_is_an_image_and_the_figure_is_closed():
    import matplotlib.pyplot as plt

    from bnfl.experiments import notebook

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    data = notebook.png(fig)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
    fig, _ = plt.subplots()
    assert notebook.image(fig) is None  # outside IPython nothing is printed, the figure is closed
    assert not plt.fignum_exists(fig.number)


def test_claims_table_shows_inconclusive_with_its_why():
    from bnfl import experiments
    from bnfl.experiments import notebook

    claim = experiments.at_least("gap", "gap >= 0", 0.1, 0.0, noise=0.28, noise_label="one test sample")
    result = experiments.Result(id="fedtan-tab2", title="t", profile="quick", seeds=[0], rows=[], paper=[],
                                claims=[claim])
    html = notebook.claims_html(result)
    assert ">INCONCLUSIVE</td>" in html and "1 inconclusive" in html and "one test sample" in html


def test_claims_table_rounds_links_a_re_read_claim_and_lists_whys_under_it():
    import dataclasses

    from bnfl import experiments
    from bnfl.experiments import notebook
    from bnfl.experiments.claims import linked

    shared = "on the quick proxy BN shows little damage (8x8 digits; T = 60)"
    claims = [dataclasses.replace(experiments.at_least(n, f"{n} >= 99", v, 99.0, noise=0.28),
                                  why=f"{n} is short by {99 - v:.6f}; {shared}")
              for n, v in (("a", 97.77766666666666), ("b", 98.1234567))]
    claims.append(linked(claims[1], "hbn-tab1"))
    result = experiments.Result(id="hbn-fig1", title="t", profile="quick", seeds=[0, 1, 2], rows=[], paper=[],
                                claims=claims)
    text = notebook.claims_html(result)
    table, below = text.split("</table>")
    assert "97.78" in table and "97.7776" not in text and "<th>why</th>" not in table
    assert "3. b &gt;= 99 (structural check) (re-reads hbn-tab1; counted there)" in table  # no runs: a check
    assert "verdict: structural checks: 2 fail (1 more reported only, counted where their measurement is)" in table
    items = re.findall(r"<li>(.*?)</li>", below)
    assert items == ["1. a is short by 1.22", f"checks 1-3: {html_escape(shared)}",
                     "checks 2, 3: b is short by 0.877"], items


def html_escape(text: str) -> str:
    import html

    return html.escape(text)


def test_generated_headings_are_titles_naming_the_stand_in_with_no_notes_or_raw_numbers():
    """Every generated notebook's headings: no note about the source text, no long decimals; the
    title names the quick profile's stand-in data wherever the entry trains on a proxy."""
    from bnfl import experiments
    from bnfl.experiments import dashboard, notebook

    for eid in experiments.ids():
        text = notebook.source(eid)
        headings = [line.removeprefix("# ") for line in text.splitlines() if re.match(r"# #+ ", line)]
        assert headings and not [h for h in headings if re.search(r"artifact|in the text|\d\.\d{4}", h)], headings
        names = dashboard.stand_ins_of(experiments.get(eid))
        title = headings[0]
        assert ("stand-in data: " + ", ".join(names) in title) == bool(names), (eid, title)
