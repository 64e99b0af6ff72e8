"""The documentation site: it builds with warnings as errors, offline, and works in a browser.

The site is built once per session (``sphinx-build -W --keep-going``, as ``make docs``) into
``docs/_build/html``. The ``browser`` tests serve it from a local ``http.server`` and open pages in
headless Debian Chromium; they are skipped, with the reason, when ``chromium`` is not installed
(``.ci/run`` installs it). A screenshot is kept in ``docs/_build/screenshots/``.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SITE = DOCS / "_build" / "html"
SCREENSHOTS = DOCS / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's `chromium` is not installed (apt-get install chromium; .ci/run does it)",
)


# ---------------------------------------------------------------------------------------------
# Build once
# ---------------------------------------------------------------------------------------------


_FIGURES_CHANGED: list[tuple[str, float]] = []


def _snapshot(folder: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in folder.glob("*")} if folder.is_dir() else {}


_BUILT: dict[str, Path | str] = {}


def build_site() -> Path:
    """Build the site once per session with ``-E -W --keep-going`` (shared with
    ``tests/test_notebooks.py``, which asserts on the notebooks this build executed); fail with
    Sphinx's warnings if it does not build."""
    if "failed" in _BUILT:
        pytest.fail(_BUILT["failed"])  # built once already, and it failed: do not build again
    if "site" in _BUILT:
        return _BUILT["site"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    env.pop("BNFL_DOCS_EXECUTE", None)  # the notebooks must run: their outputs are under test
    # -E: re-read every page (a saved environment would hide warnings of unchanged pages);
    # executed notebooks still come from the jupyter cache when their code and inputs did not change.
    cmd = [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-j", "auto", "-b", "html", str(DOCS), str(SITE)]
    before = _snapshot(ROOT / "figures")
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    _FIGURES_CHANGED.extend(sorted(set(_snapshot(ROOT / "figures").items()) ^ set(before.items())))
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        problems = [
            line for line in (proc.stdout + proc.stderr).splitlines()
            if "WARNING" in line or "ERROR" in line or "Error" in line
        ]
        problems = [line for line in problems if "Kernel is running over TCP" not in line]
        _BUILT["failed"] = (
            f"docs build failed (rc={proc.returncode}, {seconds:.0f} s); fix these:\n"
            + "\n".join(problems[-60:] or (proc.stdout + proc.stderr).splitlines()[-60:])
        )
        pytest.fail(_BUILT["failed"])
    _BUILT["site"] = SITE
    return SITE


@pytest.fixture(scope="session")
def site() -> Path:
    return build_site()


def test_docs_build_leaves_figures_folder_alone(site: Path) -> None:
    """Notebooks run while building (reading figures/); they must write nothing into it."""
    assert not _FIGURES_CHANGED, f"the docs build changed figures/: {_FIGURES_CHANGED}"


def test_no_doctree_carries_the_build_environment(site: Path) -> None:
    """A page's saved doctree holds that page only: autodoc's signature nodes kept the document they
    were parsed in, whose settings pointed at Sphinx's build environment, and every one of the ~480
    doctrees pickled it (about 3 MB each; a third of the build's CPU time)."""
    heavy = [p.relative_to(site) for p in (site / ".doctrees").rglob("*.doctree")
             if b"BuildEnvironment" in p.read_bytes()]
    assert not heavy, f"{len(heavy)} doctrees pickle the build environment, e.g. {heavy[:3]}"


def test_docs_build_with_warnings_as_errors(site: Path) -> None:
    for page in ("index.html", "getting-started.html", "theory.html", "algorithms.html", "recipes.html",
                 "_generated/api/index.html", "_generated/ledger.html",
                 "_generated/reproductions/index.html", "_generated/notebooks/index.html"):
        assert (site / page).is_file(), f"{page} missing from the built site"


# ---------------------------------------------------------------------------------------------
# Static checks on the built HTML
# ---------------------------------------------------------------------------------------------


class _Assets(HTMLParser):
    """Collect the URLs a page loads (scripts, stylesheets, icons, images, frames) and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if "name" in a and tag == "a":
            self.ids.add(a["name"])
        if tag in {"script", "img", "iframe", "source", "video", "audio", "embed"} and a.get("src"):
            self.loads.append(a["src"])
        elif tag == "link" and a.get("href"):
            rel = a.get("rel", "").lower()
            if any(r in rel for r in ("stylesheet", "icon", "preload", "modulepreload", "manifest")):
                self.loads.append(a["href"])
        elif tag == "a" and "href" in a:
            self.links.append(a["href"])


def _is_external(url: str) -> bool:
    return bool(re.match(r"^(https?:)?//", url.strip(), re.IGNORECASE))


def broken_links(site: Path) -> list[str]:
    """Every internal link of every built page whose target file is missing, or whose anchor
    (``#id``) is not an ``id`` (or ``<a name>``) of the target page. Links to a folder mean its
    ``index.html``; external links, ``mailto:`` and ``javascript:`` are not checked."""
    ids: dict[Path, set[str]] = {}

    def anchors(path: Path) -> set[str]:
        if path not in ids:
            found = _Assets()
            found.feed(path.read_text(encoding="utf-8", errors="replace"))
            ids[path] = found.ids
        return ids[path]

    problems = []
    for page in sorted(site.rglob("*.html")):
        links = _Assets()
        links.feed(page.read_text(encoding="utf-8", errors="replace"))
        for href in sorted(set(links.links)):
            if not href or href.startswith(("mailto:", "javascript:", "data:")) or _is_external(href):
                continue
            parsed = urlparse(href)
            if parsed.scheme:
                continue
            target = page if not parsed.path else (page.parent / unquote(parsed.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = page.relative_to(site)
            if not target.is_file():
                problems.append(f"{where}: broken link {href}")
            elif parsed.fragment and target.suffix == ".html" and unquote(parsed.fragment) not in anchors(target):
                problems.append(f"{where}: link {href}: no #{unquote(parsed.fragment)} in {target.name}")
    return problems


def test_internal_links_and_anchors_resolve(site: Path) -> None:
    """Every internal link of the built site resolves to a page, and every anchor to an id on it
    (no browser needed; the browser test below also checks what JavaScript adds)."""
    problems = broken_links(site)
    assert not problems, f"{len(problems)} broken links:\n" + "\n".join(problems[:60])


def test_every_module_has_a_source_page() -> None:
    """Sphinx's viewcode reads each module with its own parser; a module it cannot parse gets no
    source page while the module index still links it (a broken link of the built site). Its
    parser refused a ``**`` dict unpacking inside a decorator's arguments."""
    import pkgutil

    from sphinx.pycode import ModuleAnalyzer

    import bnfl

    refused = []
    for mod in pkgutil.walk_packages(bnfl.__path__, "bnfl.", onerror=lambda name: None):
        if mod.name.endswith("__main__"):
            continue
        try:
            ModuleAnalyzer.for_module(mod.name).find_tags()
        except Exception as err:  # noqa: BLE001 - whatever the parser raises
            refused.append(f"{mod.name}: {str(err)[:120]}")
    assert not refused, "Sphinx cannot read these modules' source:\n" + "\n".join(refused)


def test_link_check_finds_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<a href="b.html#there">ok</a> <a href="b.html#gone">x</a> '
                                     '<a href="missing.html">y</a> <a href="https://example.org/">ext</a>')
    (tmp_path / "b.html").write_text('<h1 id="there">B</h1> <a href="#there">self</a>')
    assert broken_links(tmp_path) == ["a.html: link b.html#gone: no #gone in b.html", "a.html: broken link missing.html"]


def test_site_loads_no_external_asset(site: Path) -> None:
    offenders: list[str] = []
    for page in site.rglob("*.html"):
        parser = _Assets()
        parser.feed(page.read_text(encoding="utf-8"))
        offenders += [f"{page.relative_to(site)}: {u}" for u in parser.loads if _is_external(u)]
    for css in (site / "_static").rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css.read_text(encoding="utf-8", errors="ignore")):
            if _is_external(url):
                offenders.append(f"{css.relative_to(site)}: {url}")
        for url in re.findall(r"@import\s+['\"]([^'\"]+)", css.read_text(encoding="utf-8", errors="ignore")):
            if _is_external(url):
                offenders.append(f"{css.relative_to(site)}: @import {url}")
    assert not offenders, "the site must build and run offline; external assets:\n" + "\n".join(offenders)


def test_mathjax_is_the_vendored_copy(site: Path) -> None:
    text = (site / "theory.html").read_text(encoding="utf-8")
    assert "_static/mathjax/tex-svg-full.js" in text
    assert (site / "_static" / "mathjax" / "tex-svg-full.js").stat().st_size > 1_000_000


#: Text a rendered page must never show: a Figure repr instead of the image, a markdown table left
#: as raw pipes, tqdm's fallback warning, an execution error.
FORBIDDEN = {
    "<Figure size": "a matplotlib Figure repr (show the figure as an image)",
    "| --- |": "a raw markdown table",
    "|---|": "a raw markdown table",
    "TqdmWarning": "a tqdm warning",
    "Traceback (most recent call last)": "a traceback",
}


def visible_text(page_html: str) -> str:
    """The text a reader sees on a built page: outside scripts, styles and inline ``<code>``
    (where the docs may quote a repr), but with the ``<pre>`` blocks cell outputs are shown in."""
    parser = _Text()
    parser.SKIP = {"script", "style", "code", "mjx-container", "svg", "math"}  # <pre> outputs stay
    parser.feed(page_html)
    return "".join(parser.parts)


def test_no_page_shows_a_figure_repr_raw_table_or_warning(site: Path) -> None:
    problems = []
    for page in sorted(site.rglob("*.html")):
        rel = page.relative_to(site).as_posix()
        if rel.startswith(("_generated/proofs/", "_modules/", "_generated/api/")):
            continue  # source listings may quote anything
        text = visible_text(page.read_text(encoding="utf-8"))
        problems += [f"{rel}: {why} ({bad!r})" for bad, why in FORBIDDEN.items() if bad in text]
    assert not problems, "\n".join(problems)


def test_reproduction_pages_show_committed_quick_results_with_provenance_folded(site: Path) -> None:
    shown = sorted(p.parent.name for p in (ROOT / "figures").glob("*/result.json"))
    assert shown, "figures/ holds no committed result"
    pages: dict[str, str] = {}
    for eid in shown:
        paper = eid.split("-", 1)[0]
        if paper not in pages:
            pages[paper] = (site / "_generated" / "reproductions" / f"{paper}.html").read_text(encoding="utf-8")
        page = pages[paper]
        result = json.loads((ROOT / "figures" / eid / "result.json").read_text())
        assert result["profile"] != "smoke", f"figures/{eid}/result.json is a smoke result"
        assert re.search(rf'<img[^>]+src="[^"]*/{re.escape(eid)}\.png"', page), (
            f"{eid}: figure missing from the {paper} reproduction page")
    for paper, page in pages.items():
        # provenance is folded away, after the figure and the numbers
        here = [e for e in shown if e.startswith(f"{paper}-")]
        assert page.count('<details class="bnfl-provenance">') >= len(here), paper
        assert not re.search(r'<details class="bnfl-provenance"[^>]*\bopen', page), paper
        assert page.index("<img") < page.index('<details class="bnfl-provenance">'), paper


def test_every_public_module_has_an_api_page(site: Path) -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    modules = bnfl_docs.public_modules()
    assert "bnfl" in modules and "bnfl.plots" in modules
    missing = [m for m in modules if not (site / "_generated" / "api" / f"{m}.html").is_file()]
    assert not missing, f"modules without an API page: {missing}"
    index = (site / "_generated" / "api" / "index.html").read_text(encoding="utf-8")
    assert all(f"{m}.html" in index for m in modules)


def test_api_pages_are_written_before_autosummary_reads_the_sources() -> None:
    """A module removed since the last build left its API page behind, and autosummary (registered
    by numpydoc, priority 500) read it before the generator removed it: "Failed to import", an
    error under -W, once per developer build after a module moved."""
    import types

    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    connected: dict[str, int] = {}
    app = types.SimpleNamespace(add_directive=lambda *a, **k: None,
                                connect=lambda event, handler, priority=500: connected.setdefault(handler.__name__,
                                                                                                  priority))
    bnfl_docs.setup(app)
    assert connected["generate"] < 500, "bnfl_docs.generate must run before autosummary's builder-inited handler"


def test_ledger_page_lists_every_row_with_links(site: Path) -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    _, sections = bnfl_docs.parse_ledger(DOCS / "equations.md")
    rows = [r for _, sec in sections for r in sec]
    page = (site / "_generated" / "ledger.html").read_text(encoding="utf-8")
    for row in rows:
        for f in row.functions:
            # every function is a link into the API reference
            resolved = bnfl_docs.resolve(f)
            assert resolved, f"{f} cannot be imported"
            target = re.escape(resolved[1])
            assert re.search(rf'href="[^"]*api/[^"]*#{target}"', page), f"{f} is not linked"
        for t in row.tests:
            assert bnfl_docs.test_label(t) in page, f"{t} is not linked to its source"


def test_equation_keys_normalise_the_ways_rows_are_written() -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    keys = bnfl_docs.equation_keys
    assert {"39", "40", "41"} <= keys("eqs. (39)-(41)")
    assert "8" in keys("eq. 8") and "8" in keys("(8)")
    assert "property 3" in keys("Property 3") and "3" not in keys("Property 3")
    assert "corollary 4.6" in keys("Cor. 4.6")
    assert "2" in keys("(2b)") and "2b" in keys("(2b)")
    assert {"39", "40", "41"} <= keys("eqs. 39, 40 and 41") and keys("39-41") == {"39", "40", "41"}
    # descriptions and formulas after the reference add no false keys
    assert keys("eq. 9: mu = (1-s) mu_b (biased var, eq. 1)") == {"9"}
    assert keys("Supplement D class tables (k = 2/4/6/8/10 classes per client, N=5)") == set()
    assert keys("App. F two-client Gaussians (AR(1) form)") == set()
    assert keys("Sec. 4.2 Stage II: frozen") == {"section 4.2"}


def test_getting_started_snippets_run_and_fedtan_matches_centralized() -> None:
    """The page's code is executed, so it cannot drift from the library's API."""
    pytest.importorskip("bnfl.stats", reason="bnfl.stats not written yet")
    pytest.importorskip("bnfl.fedtan", reason="bnfl.fedtan not written yet")
    import torch

    text = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 2
    ns: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "getting-started.md", "exec"), ns)  # noqa: S102
    union, fedavg, between = ns["union"], ns["fedavg"], ns["between"]
    torch.testing.assert_close(union.var - fedavg.var, between, rtol=1e-5, atol=1e-5)
    avg, reference = ns["avg"], ns["reference"]  # the loop ends with aggregate="fedtan"
    assert set(avg) == set(reference)
    for name in reference:
        torch.testing.assert_close(avg[name], reference[name], rtol=1e-4, atol=1e-5)


def _hrefs(page: Path) -> list[str]:
    parser = _Assets()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.links


def test_landing_page_has_three_paths_a_run_first_line_and_a_headline_figure(site: Path) -> None:
    page = site / "index.html"
    body = page.read_text(encoding="utf-8")
    body = body[body.find('<article'):] if '<article' in body else body
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", "", body, flags=re.S))).split())
    for path in ("Learn why", "Reproduce and compare", "Use it in my code"):
        assert path in text, f"the landing page has no '{path}' path"
    # run first, with measured times
    assert re.search(r"Run this first.*bnfl demo.*\d+ s.*make test.*\d+ min.*make run.*74.*\d+ min", text, re.S)
    # the headline figure: a committed result showing BN breaking FL and a fix repairing it
    assert re.search(r'<img[^>]+src="[^"]*fedtan-fig4\.png"', page.read_text(encoding="utf-8"))
    links = " ".join(_hrefs(page))
    for target in ("theory.html", "_generated/notebooks/theory/", "_generated/reproductions/index.html",
                   "recipes.html", "flower.html", "distributed.html", "which-fix.html", "diagnose.html",
                   "own-fix.html", "bn-safe.html"):
        assert target in links, f"the landing page does not link {target}"


def test_own_fix_page_ran_its_layer_cells(site: Path) -> None:
    """docs/own-fix.md's section 9 (a normalisation layer of one's own) is executed by the build:
    the line its run prints is on the page."""
    text = visible_text((site / "own-fix.html").read_text(encoding="utf-8"))
    assert re.search(r"a layer of your own, batched vs sequential: largest difference \d\.\de[+-]\d\d", text)


def test_bn_safe_page_ran_every_check_and_shows_each_report(site: Path) -> None:
    """docs/bn-safe.md is executed by the build: each pattern's report is on the page."""
    text = visible_text((site / "bn-safe.html").read_text(encoding="utf-8"))
    for shown in ("policy: average", "variance bias: up to", "policy: local", "policy: first",
                  "counter_float: returns", "policy: mixed", "name_selection: BN layers of one model",
                  "policy: exact", "expected BN statistics aggregated with policy 'exact', found 'average'",
                  "variance broke at round", "variance positive and finite over 20 rounds"):
        assert shown in text, f"bn-safe.html does not show {shown!r}"


def test_theory_page_has_figures_and_links_each_fix_to_its_notebook(site: Path) -> None:
    page = (site / "theory.html").read_text(encoding="utf-8")
    figures = re.findall(r'<img[^>]+src="([^"]+\.png)"', page)
    assert len(figures) >= 3, f"the theory page shows {len(figures)} figures"
    for src in figures:
        assert (site / unquote(src)).is_file(), src
    notebooks = sorted({m for m in re.findall(r'href="(_generated/notebooks/theory/[^"#]+)', page)})
    books = sorted(p.stem for p in (ROOT / "notebooks" / "theory").glob("*.py"))
    for name in books:
        assert any(name in n for n in notebooks), f"the theory page does not link the notebook {name}"


# ---------------------------------------------------------------------------------------------
# Real browser
# ---------------------------------------------------------------------------------------------

HARNESS = """<!doctype html><html><body>
<iframe id="f" src="{src}" style="width:1280px;height:1600px"></iframe>
<pre id="result">pending</pre>
<script>
const f = document.getElementById('f');
f.addEventListener('load', () => {{
  const d = f.contentDocument;
  for (const i of d.images) i.loading = 'eager';
  setTimeout(() => {{
    const imgs = [...d.images].map(i => ({{src: i.getAttribute('src'),
                                            ok: i.complete && i.naturalWidth > 0}}));
    document.getElementById('result').textContent = JSON.stringify({{
      imgs: imgs, mjx: d.querySelectorAll('mjx-container').length,
      mjxErrors: d.querySelectorAll('mjx-merror, [data-mjx-error]').length}});
  }}, 4000);
}});
</script></body></html>"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site, plus ``/__check__/<page>``: a same-origin harness that inspects it."""

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/__check__/"):
            body = HARNESS.format(src=html.escape("/" + self.path[len("/__check__/"):])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if str(code).isdigit() and int(code) >= 400:
            self.server.failed.append(f"{code} for {self.path}")  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return  # quiet; failures are collected by log_request


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[tuple[str, list[str]]]:
    handler = functools.partial(_Handler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.failed = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", httpd.failed  # type: ignore[attr-defined]
    finally:
        httpd.shutdown()
        httpd.server_close()


def chromium(url: str, *extra: str) -> str:
    """Run headless Chromium with the project's flags; return stdout (the DOM with --dump-dom).

    A browser killed by a signal (negative return code: once, a segfault on a page that loaded
    fine in the runs before and after it) is tried once more with a fresh profile; any other
    failure, or a second crash, fails the test."""
    assert CHROMIUM is not None
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(prefix="bnfl-chromium-") as profile:
            cmd = [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=8000",
                *extra, url,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        if proc.returncode >= 0 or attempt == 2:
            break
    assert proc.returncode == 0, f"chromium failed on {url} (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


class _Text(HTMLParser):
    """Visible text outside scripts, styles, code and MathJax output."""

    SKIP = {"script", "style", "pre", "code", "textarea", "mjx-container", "svg", "math"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)


def _notebook_page(site: Path) -> str | None:
    pages = sorted((site / "_generated" / "notebooks").rglob("*.html"))
    pages = [p for p in pages if p.name != "index.html"]
    return pages[0].relative_to(site).as_posix() if pages else None


def _pages(site: Path) -> list[str]:
    pages = ["index.html", "theory.html", "recipes.html"]
    nb = _notebook_page(site)
    pages.append(nb if nb else "_generated/notebooks/index.html")
    return pages


def _local_target(site: Path, page_url: str, href: str, base: str) -> tuple[Path, str] | None:
    url = urljoin(page_url, href)
    if not url.startswith(base):
        return None
    parsed = urlparse(url)
    path = site / unquote(parsed.path[len(urlparse(base).path):])
    if path.is_dir():
        path = path / "index.html"
    return path, unquote(parsed.fragment)


@needs_chromium
@pytest.mark.browser
def test_pages_typeset_math_load_images_and_resolve_links(
    site: Path, server: tuple[str, list[str]]
) -> None:
    base, failed = server
    problems: list[str] = []
    for page in _pages(site):
        url = base + page
        dom = chromium(url, "--dump-dom")
        # 1. MathJax ran: every math element became SVG output, no raw TeX is left.
        source = (site / page).read_text(encoding="utf-8")
        n_math = len(re.findall(r'class="math[ "]', source))
        n_mjx = dom.count("<mjx-container")
        if n_math and n_mjx < n_math:
            problems.append(f"{page}: {n_math} math elements but {n_mjx} typeset by MathJax")
        if "mjx-merror" in dom or "data-mjx-error" in dom:
            problems.append(f"{page}: MathJax reported a TeX error")
        text = _Text()
        text.feed(dom)
        visible = "".join(text.parts)
        for raw in re.findall(r"\\\(|\\\[|\$\$|\$[^$\n]*\\[A-Za-z]+[^$\n]*\$", visible):
            problems.append(f"{page}: raw TeX left in the text: {raw[:60]!r}")
        # 2. Every internal link resolves to a built file (and its anchor exists).
        links = _Assets()
        links.feed(dom)
        for href in set(links.links):
            if not href or href.startswith(("mailto:", "javascript:")) or _is_external(href):
                continue
            target = _local_target(site, url, href, base)
            if target is None:
                continue
            path, fragment = target
            if not path.is_file():
                problems.append(f"{page}: broken link {href} -> {path.relative_to(site)}")
            elif fragment and path.suffix == ".html":
                ids = _Assets()
                ids.feed(path.read_text(encoding="utf-8"))
                if fragment not in ids.ids:
                    problems.append(f"{page}: link {href}: no #{fragment} in {path.name}")
        # 3. Images load in the browser (naturalWidth > 0), inspected from a same-origin frame.
        harness = chromium(base + "__check__/" + page, "--dump-dom")
        m = re.search(r'<pre id="result">(.*?)</pre>', harness, re.DOTALL)
        assert m, f"harness produced no result for {page}"
        result = json.loads(html.unescape(m.group(1)))
        problems += [f"{page}: image did not load: {i['src']}" for i in result["imgs"] if not i["ok"]]
        if n_math and result["mjx"] == 0:
            problems.append(f"{page}: no MathJax output inside the frame")
    problems += [f"server answered {f}" for f in failed if "favicon" not in f]
    assert not problems, "\n".join(problems)


@needs_chromium
@pytest.mark.browser
def test_screenshot_of_theory_page(site: Path, server: tuple[str, list[str]]) -> None:
    base, _ = server
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for page, name in (("theory.html", "theory.png"), ("index.html", "index.png"), ("recipes.html", "recipes.png")):
        shot = SCREENSHOTS / name
        shot.unlink(missing_ok=True)
        chromium(base + page, f"--screenshot={shot}", "--window-size=1280,1600")
        assert shot.is_file() and shot.stat().st_size > 20_000, f"no usable screenshot of {page}"
        # a PNG of the requested size
        header = shot.read_bytes()[:24]
        assert header[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(header[16:20], "big") == 1280


#: One Chromium run opens each page of PAGES in turn in a same-origin frame of 1280 px, runs
#: BEFORE at once and PROBE after SETTLE ms (both with the frame's document ``d`` and ``page``;
#: PROBE stores its finding in ``out[page]``), and writes ``out`` as JSON into ``<pre id=result>``.
FRAMES = """<!doctype html><html><body>
<iframe id="f" style="width:1280px;height:1600px"></iframe>
<pre id="result">pending</pre>
<script>
const pages = PAGES;
const f = document.getElementById('f');
const out = {};
let i = 0;
function next() {
  if (i >= pages.length) {
    document.getElementById('result').textContent = JSON.stringify(out);
    return;
  }
  const page = pages[i++];
  f.onload = () => {
    const d = f.contentDocument;
    BEFORE
    setTimeout(() => {
      PROBE
      next();
    }, SETTLE);
  };
  f.src = '/' + page;
}
next();
</script></body></html>"""

#: the math-width probe: every typeset formula's needed width against its column's width
MATH_PROBE = """
      const col = d.querySelector('.bd-article') || d.body;
      const all = col.querySelectorAll('mjx-container');  // the page's own text, not the side TOC
      // the column's width as the layout intends it: a too wide formula widens the column itself
      // (and pushes the page past the window), so measure it with every formula hidden
      for (const m of all) m.style.display = 'none';
      const cs = getComputedStyle(col);
      const room = col.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      for (const m of all) m.style.display = '';
      const wide = [];
      for (const m of all) {
        const svg = m.querySelector('svg');
        if (!svg) continue;
        // a tagged display is an SVG of width 100% whose min-width is what the formula needs
        const need = Math.max(svg.getBoundingClientRect().width * (svg.getAttribute('width') === '100%' ? 0 : 1),
                              parseFloat(getComputedStyle(svg).minWidth) || 0);
        if (need > room + 1) {
          wide.push({width: Math.round(need), room: Math.round(room),
                     tex: (m.getAttribute('aria-label') || m.textContent || '').slice(0, 80)});
        }
      }
      const page_w = d.documentElement.scrollWidth, win_w = d.documentElement.clientWidth;
      if (page_w > win_w + 1) wide.push({width: page_w, room: win_w, tex: '(the page scrolls sideways)'});
      out[page] = {n: all.length, wide: wide};"""

#: the images-and-text probe: every image (loaded or not) and the visible text
MANY_PROBE = """
      out[page] = {imgs: [...d.images].map(im => ({src: im.getAttribute('src'),
                                                   ok: im.complete && im.naturalWidth > 0})),
                   text: d.body ? d.body.innerText : ''};"""


def _in_frames(site: Path, base: str, pages: list[str], probe: str, *, before: str = "", settle_ms: int,
               budget_ms: int) -> dict[str, dict]:
    """Run :data:`FRAMES` over ``pages`` with ``probe``; return what it stored per page."""
    harness = site / "__frames__.html"
    doc = FRAMES.replace("PAGES", json.dumps(pages)).replace("BEFORE", before).replace("PROBE", probe)
    harness.write_text(doc.replace("SETTLE", str(settle_ms)), encoding="utf-8")
    try:
        dom = chromium(base + harness.name, "--dump-dom", f"--virtual-time-budget={budget_ms * len(pages) + 5000}")
    finally:
        harness.unlink()
    m = re.search(r'<pre id="result">(.*?)</pre>', dom, re.DOTALL)
    assert m and m.group(1) != "pending", "the harness did not finish"
    return json.loads(html.unescape(m.group(1)))


@needs_chromium
@pytest.mark.browser
def test_no_math_display_is_wider_than_its_container(site: Path, server: tuple[str, list[str]]) -> None:
    """At a 1280 px window, every typeset formula of the landing, theory and recipe pages and of
    the theory notebooks fits its column: none is cut off at the right edge or needs scrolling."""
    base, _ = server
    pages = ["index.html", "theory.html", "recipes.html"]
    pages += sorted(p.relative_to(site).as_posix() for p in (site / "_generated" / "notebooks" / "theory").glob("*.html"))
    seen = _in_frames(site, base, pages, MATH_PROBE, settle_ms=3000, budget_ms=4000)
    problems = []
    for page in pages:
        info = seen.get(page)
        if info is None:
            problems.append(f"{page}: not inspected")
            continue
        if page in ("index.html", "theory.html"):
            assert info["n"] > 0, f"{page}: no typeset math found (did MathJax run?)"
        problems += [f"{page}: formula {w['width']} px wide in {w['room']} px: {w['tex']!r}" for w in info["wide"]]
    assert not problems, "\n".join(problems)


def _check_many(site: Path, base: str, pages: list[str]) -> dict[str, dict]:
    """Open ``pages`` one after another in a same-origin frame of ONE Chromium run; return, per
    page, its images (loaded or not) and its visible text."""
    return _in_frames(site, base, pages, MANY_PROBE, before="for (const im of d.images) im.loading = 'eager';",
                      settle_ms=1500, budget_ms=2500)


def _notebook_pages(site: Path) -> list[str]:
    pages = sorted((site / "_generated" / "notebooks").rglob("*.html"))
    return [p.relative_to(site).as_posix() for p in pages if p.name != "index.html"]


@needs_chromium
@pytest.mark.browser
def test_every_notebook_page_shows_a_loaded_image_and_no_repr(
    site: Path, server: tuple[str, list[str]]
) -> None:
    """In a real browser: each notebook page shows at least one image that loaded, and no page
    (notebooks, reproductions) shows a Figure repr, a raw markdown table or a tqdm warning."""
    base, _ = server
    books = _notebook_pages(site)
    assert books, "no notebook page was built"
    repro = ["_generated/reproductions/index.html", "_generated/reproductions/fedtan.html"]
    seen = _check_many(site, base, books + repro)
    problems = []
    for page in books + repro:
        info = seen.get(page)
        if info is None:
            problems.append(f"{page}: not inspected")
            continue
        loaded = [i for i in info["imgs"] if i["ok"]]
        problems += [f"{page}: image did not load: {i['src']}" for i in info["imgs"] if not i["ok"]]
        if page in books and not loaded:
            problems.append(f"{page}: no image loaded")
        problems += [f"{page}: shows {why}" for bad, why in FORBIDDEN.items() if bad in info["text"]]
    assert not problems, "\n".join(problems)


@needs_chromium
@pytest.mark.browser
def test_screenshots_of_a_notebook_and_a_reproduction_page(
    site: Path, server: tuple[str, list[str]]
) -> None:
    base, _ = server
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    book = "_generated/notebooks/fedtan/fedtan-fig4.html"
    if not (site / book).is_file():
        book = _notebook_pages(site)[0]
    for page, name in ((book, "notebook.png"), ("_generated/reproductions/fedtan.html", "reproduction.png")):
        shot = SCREENSHOTS / name
        shot.unlink(missing_ok=True)
        chromium(base + page, f"--screenshot={shot}", "--window-size=1280,2400")
        assert shot.is_file() and shot.stat().st_size > 20_000, f"no usable screenshot of {page}"


def test_reproduction_pages_fill_themselves_from_figures(tmp_path: Path, monkeypatch) -> None:
    """A figure + provenance + result.json in figures/ appears on its paper's page; others are
    listed as not yet reproduced; REPORT.md keeps its images and loses links the docs cannot
    resolve."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    figures = tmp_path / "figures"
    (figures / "fedtan-fig4").mkdir(parents=True)
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    (figures / "fedtan-fig4.png").write_bytes(png)
    (figures / "fedtan-fig4.json").write_text(json.dumps({"profile": "quick", "seed": 0}))
    (figures / "fedtan-fig4" / "result.json").write_text(json.dumps({
        "profile": "quick", "seeds": [0, 1],
        "claims": [{"name": "gap", "statement": "FedTAN - FedAvg+BN >= 8 pts", "verdict": "fail",
                    "measured": 3.5, "detail": "a | b"}],
    }))
    (figures / "odd-name.png").write_bytes(png)
    (figures / "REPORT.md").write_text(
        "# Report\n\n![fig](fedtan-fig4.png) see [the runs](../runs/x.md) and [web](https://x.org)\n"
    )
    monkeypatch.setattr(bnfl_docs, "ROOT", tmp_path)
    monkeypatch.setattr(bnfl_docs, "GEN", tmp_path / "gen")
    written: set[Path] = set()
    bnfl_docs.generate_reproductions(written)
    out = tmp_path / "gen" / "reproductions"
    fedtan = (out / "fedtan.md").read_text()
    assert "## `fedtan-fig4`" in fedtan and "![fedtan-fig4](figures/fedtan-fig4.png)" in fedtan
    assert "**FAIL**" in fedtan and "3.5" in fedtan and "a \\| b" in fedtan
    assert '<details class="bnfl-provenance">' in fedtan and "<code>quick</code>" in fedtan
    assert "`fedtan-fig5`" in fedtan.split("## Not yet reproduced")[1]
    assert "`fedtan-fig4`" not in fedtan.split("## Not yet reproduced")[1]
    hbn = (out / "hbn.md").read_text()
    assert "0 of 17 catalog entries" in hbn
    index = (out / "index.md").read_text()
    assert "odd-name" in index and "figures/REPORT" in index
    report = (out / "figures" / "REPORT.md").read_text()
    assert "![fig](fedtan-fig4.png)" in report and "[web](https://x.org)" in report
    assert "../runs/x.md" not in report and "the runs" in report
    assert (out / "figures" / "fedtan-fig4.png").read_bytes() == png


def test_reproduction_notebooks_run_in_shared_kernels_and_a_failing_cell_names_its_notebook(
        tmp_path: Path, monkeypatch) -> None:
    """The generated reproduction notebooks run one after another in long-lived kernels and are
    written as executed ``.ipynb`` that myst-nb renders as they are; ``cache`` keeps an unchanged
    one; a cell error stops the build naming the notebook."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import bnfl_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    monkeypatch.setattr(bnfl_docs, "ROOT", tmp_path)
    monkeypatch.setattr(bnfl_docs, "notebook_inputs_stamp", lambda: "inputs")
    header = "# %% [markdown]\n# A\n\n# %%\n"
    books = {name: tmp_path / f"{name}.py" for name in ("one", "two", "bad")}
    books["one"].write_text(header + "import os\nx = 6 * 7\nx\n")
    books["two"].write_text(header + "print('pid', os.getpid() if 'os' in dir() else None)\n")
    books["bad"].write_text(header + "raise ValueError('broken on purpose')\n")
    jobs = [(books[n], tmp_path / "out" / f"{n}.ipynb") for n in ("one", "two")]
    written: set[Path] = set()
    bnfl_docs.execute_in_shared_kernels(jobs, written, kernels=1)
    one, two = (json.loads(dst.read_text()) for _, dst in jobs)
    assert one["metadata"]["mystnb"] == {"execution_mode": "off"}
    assert "".join(one["cells"][1]["outputs"][0]["data"]["text/plain"]) == "42"
    # the same kernel ran both: `os`, imported by the first, is defined in the second
    printed = "".join(two["cells"][1]["outputs"][0]["text"])
    assert printed.startswith("pid ") and "None" not in printed
    assert {dst.resolve() for _, dst in jobs} == written
    stamp = jobs[0][1].stat().st_mtime_ns
    bnfl_docs.execute_in_shared_kernels(jobs[:1], set(), reuse=True)
    assert jobs[0][1].stat().st_mtime_ns == stamp  # unchanged notebook and inputs: kept
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match=r"notebook bad\.py failed(.|\n)*broken on purpose"):
        bnfl_docs.execute_in_shared_kernels([(books["bad"], tmp_path / "out" / "bad.ipynb")], set(), kernels=2)
    assert not (tmp_path / "out" / "bad.ipynb").exists()


# ---------------------------------------------------------------------------------------------
# Every notebook under notebooks/, executed once by this build. tests/test_notebooks.py tests the
# generator and bnfl.experiments.notebook; the pages are checked here, in the file that builds
# the site, because `make test` runs each test file on one pytest-xdist worker.
# ---------------------------------------------------------------------------------------------


def _is_percent_notebook(path: Path) -> bool:
    """A jupytext percent-format notebook: a ``.py`` file with at least one ``# %%`` cell marker."""
    if ".ipynb_checkpoints" in path.parts:
        return False
    return any(line.startswith("# %%") for line in path.read_text(encoding="utf-8").splitlines())


NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.py") if _is_percent_notebook(p))


def test_notebooks_found():
    assert NOTEBOOKS, "no jupytext notebooks found under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT / "notebooks")) for p in NOTEBOOKS])
def test_notebook_ran_in_the_docs_build_and_shows_its_outputs(path: Path, site: Path):
    rel = path.relative_to(ROOT / "notebooks").with_suffix(".html")
    page = site / "_generated" / "notebooks" / rel
    assert page.is_file(), f"the docs build rendered no page for {path.name}"
    text = page.read_text(encoding="utf-8")
    assert "cell_output" in text, f"{rel}: no cell output (was the notebook executed?)"
    images = re.findall(r'<img[^>]+src="([^"]+)"', text)
    assert images, f"{rel}: shows no image"
    for src in images:
        assert (page.parent / src).resolve().is_file(), f"{rel}: image {src} is not in the site"
    for bad in ("&lt;Figure size", "TqdmWarning", "Traceback", "| --- |", "|---|"):
        assert bad not in text, f"{rel}: shows {bad!r}"
    if path.parent.name != "theory":
        assert "Loaded the stored quick result" in text, f"{rel}: does not show the committed quick result"
        assert "smoke" not in text, f"{rel}: shows a smoke-profile result"
        assert text.count("<table") >= 2 and '<details class="bnfl-provenance">' in text
