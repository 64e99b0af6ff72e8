"""Sphinx extension that keeps the bnfl docs in step with the repository.

At ``builder-inited`` it (re)generates, under ``docs/_generated/`` (git-ignored):

* ``api/``: one page per public module of :mod:`bnfl`, found by walking the package, so a new
  module appears in the API reference without editing the docs;
* ``ledger.md``: the equation ledger ``docs/equations.md`` rendered with every function linked to
  its API entry and every test linked to its source;
* ``proofs/``: the source of every test the ledger names (one page per test file);
* ``reproductions/``: one page per paper from ``figures/*.png`` + ``*.json`` provenance
  (and ``figures/REPORT.md``), with the catalog ids that have no figure yet;
* ``notebooks/``: the jupytext notebooks under ``notebooks/`` for myst-nb; the generated
  reproduction notebooks are executed here, in shared kernels, and written as ``.ipynb`` with
  their outputs (see :func:`generate_notebooks`).

It also adds the ``ledger`` directive, used on the theory pages under a displayed equation::

    ```{ledger} FedTAN 39
    ```

which renders links to the function(s) implementing that equation and the test(s) proving it,
looked up in ``docs/equations.md`` (the mapping is kept in one place only).

Ledger rows that name a function that cannot be imported, or a test that does not exist, are
reported as Sphinx warnings, so ``sphinx-build -W`` fails until the ledger is right.
"""

from __future__ import annotations

import ast
import hashlib
import html
import importlib
import json
import pkgutil
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging

from bnfl.experiments.vocabulary import PAPER_NAMES, PAPER_ORDER, paper_title

logger = logging.getLogger(__name__)

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
GEN = DOCS / "_generated"
PAPER_PREFIX = {**PAPER_NAMES, "bench": "Benchmarks"}  # the docs' section of the benchmark entries is plural
PAPER_TITLE = {
    "FedTAN": "FedTAN: Why Batch Normalization Damage Federated Learning on Non-IID Data?",
    "HBN": "HBN: Hybrid Batch Normalisation",
    "FixBN": "FixBN: Making Batch Normalization Great in Federated Deep Learning",
    "FedBN": "FedBN: Local Batch Normalization for Non-IID Features",
    "Benchmarks": "Common benchmarks (no paper has them)",
}


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def write_if_changed(path: Path, text: str, written: set[Path]) -> None:
    """Write ``text`` to ``path`` unless it already holds it (keeps incremental builds fast)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written.add(path.resolve())
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.write_text(text, encoding="utf-8")


def copy_if_changed(src: Path, dst: Path, written: set[Path]) -> None:
    """Copy a file unless an identical copy is already there."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    written.add(dst.resolve())
    if dst.exists() and dst.read_bytes() == src.read_bytes():
        return
    shutil.copyfile(src, dst)


def remove_stale(root: Path, written: set[Path]) -> None:
    """Delete generated files that this run did not produce (e.g. a removed module)."""
    if not root.exists():
        return
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file() and path.resolve() not in written:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def slug(text: str) -> str:
    """A label-safe lower-case slug."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --------------------------------------------------------------------------------------------
# API reference: every public module of bnfl
# --------------------------------------------------------------------------------------------


def public_modules() -> list[str]:
    """Names of the public modules of ``bnfl`` (no ``_private`` part, no ``__main__``)."""
    import bnfl

    names = ["bnfl"]
    def onerror(pkg: str) -> None:
        logger.warning("bnfl docs: cannot import package %s while listing modules", pkg)

    for info in pkgutil.walk_packages(bnfl.__path__, prefix="bnfl.", onerror=onerror):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts[1:]):
            continue
        names.append(info.name)
    return sorted(names)


def api_page_body(name: str, module: object, public: set[str]) -> str:
    """automodule for what ``name`` defines, plus its ``__all__`` re-exports.

    A name re-exported from a public submodule is documented on that submodule's page and only
    linked here (documenting it twice would be a duplicate description, an error under ``-W``);
    one re-exported from a private module (``bnfl.x._impl``) is documented on the page of the
    nearest public module above that private module (``bnfl.x``) and linked from the others.
    """
    rst = [f".. automodule:: {name}", "   :members:", "   :show-inheritance:", "   :ignore-module-all:", ""]
    links: list[tuple[str, str]] = []
    for attr in getattr(module, "__all__", []) or []:
        try:
            obj = getattr(module, attr, None)
        except Exception as err:  # a lazy __getattr__ that fails: reported, -W fails the build
            logger.warning("bnfl docs: %s.__all__ names %r, which fails to load: %s", name, attr, err)
            continue
        home = getattr(obj, "__module__", None)
        if obj is None or home is None or home == name or type(obj).__name__ == "module":
            continue
        if home not in public and home.startswith("bnfl."):
            # A private home (bnfl.fl._run): documented once, on the page of the nearest public module
            # above it (bnfl.fl), and linked from every other page that re-exports it.
            owner = max((m for m in public if home.startswith(m + ".")), key=len, default=name)
            if owner == name:
                kind = "autoclass" if isinstance(obj, type) else "autofunction" if callable(obj) else "autodata"
                rst += [f".. {kind}:: {name}.{attr}", ""]
                continue
            home = owner
        if home in public:
            r = resolve(f"{home}.{attr}")
            links.append((attr, f"{{py:{r[0] if r else 'obj'}}}`{home}.{attr}`"))
    text = "```{eval-rst}\n" + "\n".join(rst) + "```\n"
    if links:
        text += "\n## Re-exported here\n\n| name | documented at |\n|---|---|\n"
        text += "".join(f"| `{a}` | {link} |\n" for a, link in links)
    return text


def api_ledger_rows(module: str) -> str:
    """The ledger rows whose functions are defined in ``module``, linked to their tests."""
    _, sections = parse_ledger(DOCS / "equations.md")
    lines: list[str] = []
    for _, rows in sections:
        for row in rows:
            here = []
            for f in row.functions:
                r = resolve(f)
                if r and r[1].rsplit(".", 1)[0] == module or (r and r[1].startswith(module + ".")
                                                              and r[0] == "meth"
                                                              and r[1].count(".") == module.count(".") + 2):
                    here.append(f"{{py:{r[0]}}}`{r[1].removeprefix(module + '.')} <{r[1]}>`")
            if here:
                tests = ", ".join(f"[`{t.split('::')[-1]}`](#{test_label(t)})" for t in row.tests)
                eq = row.equation.replace("|", "\\|")
                lines.append(f"| {row.paper} | {eq} | {', '.join(here)} | {tests} |")
    if not lines:
        return ""
    return (
        "\n## Equations implemented here\n\n"
        "From the [equation ledger](../ledger.md); each test compares the code with an independent "
        "reference.\n\n| paper | equation | function | test |\n|---|---|---|---|\n"
        + "\n".join(lines) + "\n"
    )


def generate_api(written: set[Path]) -> None:
    modules = public_modules()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as err:  # reported, and -W turns it into a failure
            logger.warning("bnfl docs: cannot import %s for the API reference: %s", name, err)
            continue
        summary = (module.__doc__ or "").strip().splitlines()
        summary_line = summary[0] if summary else ""
        text = f"# `{name}`\n\n" + api_page_body(name, module, set(modules)) + api_ledger_rows(name)
        write_if_changed(GEN / "api" / f"{name}.md", text, written)
        if not summary_line:
            logger.warning("bnfl docs: module %s has no docstring", name)
    lines = [
        "# API reference\n",
        "Generated from the numpydoc docstrings of every public module of `bnfl` "
        "(the package is walked at build time, so a new module appears here by itself).\n",
        "| module | summary |",
        "|---|---|",
    ]
    for name in modules:
        try:
            doc = (importlib.import_module(name).__doc__ or "").strip().splitlines()
        except Exception:
            continue
        first = doc[0].replace("|", "\\|") if doc else ""
        lines.append(f"| [`{name}`]({name}.md) | {first} |")
    lines += ["", "```{toctree}", ":hidden:", ""] + modules + ["```", ""]
    write_if_changed(GEN / "api" / "index.md", "\n".join(lines), written)


# --------------------------------------------------------------------------------------------
# The equation ledger
# --------------------------------------------------------------------------------------------

NAMED = re.compile(
    r"(property|prop|assumption|assump|theorem|thm|lemma|corollary|cor|algorithm|alg|"
    r"definition|def|table|tab|section|sec)\.?\s*([0-9]+(?:\.[0-9]+)?[a-z]?)",
    re.IGNORECASE,
)
CANON = {
    "prop": "property", "assump": "assumption", "thm": "theorem", "cor": "corollary",
    "alg": "algorithm", "def": "definition", "tab": "table", "sec": "section",
}


def equation_keys(text: str) -> set[str]:
    """Normalise an equation cell to lookup keys.

    ``"eq. (39)"``, ``"eqs. 39-41"``, ``"(2b)"``, ``"39"`` give equation numbers; ``"Property 1"``,
    ``"Cor. 4.6"``, ``"Alg. 1"``, ``"Sec. 4.2"`` give named keys. Only the part before a colon is
    read (``"eq. 9: mu = ..."``), and bare numbers count only when the cell is nothing but
    numbers, so a formula or ``"k = 2/4/6"`` in the description adds no false key.
    """
    head = text.replace("`", "").replace("–", "-").replace("—", "-").split(":")[0]
    keys: set[str] = set()

    def add_numbers(chunk: str) -> None:
        chunk = chunk.replace("(", " ").replace(")", " ")
        for a, b in re.findall(r"(\d+)\s*-\s*(\d+)", chunk):
            if int(a) < int(b) <= int(a) + 30:
                keys.update(str(k) for k in range(int(a), int(b) + 1))
        for num in re.findall(r"\d+[a-z]?\b", chunk):
            keys.add(num)
            keys.add(re.sub(r"[a-z]$", "", num))

    def named(m: re.Match[str]) -> str:
        kind = m.group(1).lower()
        keys.add(f"{CANON.get(kind, kind)} {m.group(2).lower()}")
        return " "

    rest = NAMED.sub(named, head)
    eq = r"\(?\d+[a-z]?\)?"
    for m in re.finditer(rf"\beqs?\.?\s*({eq}(?:\s*(?:-|,|/|and|&)\s*{eq})*)", rest, re.IGNORECASE):
        add_numbers(m.group(1))
    rest = re.sub(r"\beqs?\.?", " ", rest, flags=re.IGNORECASE)
    for m in re.finditer(r"(?<![A-Za-z_])\((\d+[a-z]?)\)", rest):
        add_numbers(m.group(1))
    if re.fullmatch(r"[\s\d()a-z,/&-]*\d[\s\d()a-z,/&-]*", rest.strip()) and not re.search(r"[a-z]{2,}", rest):
        add_numbers(rest)
    return keys


@dataclass
class LedgerRow:
    section: str
    module: str | None
    paper: str
    equation: str
    functions: list[str] = field(default_factory=list)  # fully qualified, importable
    tests: list[str] = field(default_factory=list)  # pytest node ids
    keys: set[str] = field(default_factory=set)


def split_cell(cell: str) -> list[str]:
    """Items of a cell: backticked names, or comma/semicolon/`<br>` separated text."""
    ticked = re.findall(r"`([^`]+)`", cell)
    items = ticked if ticked else re.split(r"[,;]|<br\s*/?>", cell)
    return [i.strip() for i in items if i.strip()]


def qualify(name: str, module: str | None) -> str:
    name = name.strip().removesuffix("()").split("(")[0].strip()
    if name.startswith("bnfl.") or name == "bnfl":
        return name
    if module and not name.startswith(module.split(".", 1)[1] + ".") and "." not in name:
        return f"{module}.{name}"
    return f"bnfl.{name}"


def expand_functions(items: list[str], module: str | None) -> list[str]:
    """Qualify function names; ``X1d/2d`` means ``X1d, X2d``; a bare name after a qualified one
    lives in the same module as that one (``bnfl.data.partition.a``, ``b``)."""
    out: list[str] = []
    previous_module: str | None = None
    for item in items:
        m = re.fullmatch(r"(.*?)(\d)d/(\d)d", item)
        names = [f"{m.group(1)}{m.group(2)}d", f"{m.group(1)}{m.group(3)}d"] if m else [item]
        for name in names:
            bare = name.strip().removesuffix("()")
            if "." not in bare and previous_module and resolve(f"{previous_module}.{bare}"):
                out.append(f"{previous_module}.{bare}")
                continue
            full = qualify(name, module)
            out.append(full)
            r = resolve(full)
            if r and r[0] in ("func", "class", "data"):
                previous_module = full.rsplit(".", 1)[0]
    return out


def expand_tests(items: list[str]) -> list[str]:
    """Test node ids; ``::test_b`` after ``tests/x.py::test_a`` means ``tests/x.py::test_b``."""
    out: list[str] = []
    last_file: str | None = None
    for item in items:
        if item.startswith("::") and last_file:
            item = last_file + item
        if "::" in item or item.endswith(".py"):
            out.append(item)
            last_file = item.split("::")[0]
    return out


def canonical(obj: object, qualname: str) -> str:
    """Where the API reference documents ``obj``: its defining public module, else ``qualname``.

    ``bnfl.nn.hybrid_batch_norm`` (a re-export) is documented as
    ``bnfl.nn.hybrid.hybrid_batch_norm``; a name defined in a private module is documented on the
    public module above it (``bnfl.fl.algorithms._fedavg.FedAvg`` as ``bnfl.fl.algorithms.FedAvg``,
    see :func:`api_page_body`).
    """
    home = getattr(obj, "__module__", None)
    inner = getattr(obj, "__qualname__", None)
    if not home or not inner or "<" in inner or not home.startswith("bnfl"):
        return qualname
    parts = home.split(".")
    private = next((i for i, p in enumerate(parts) if i > 0 and p.startswith("_")), None)
    if private is not None:
        return f"{'.'.join(parts[:private])}.{inner}"
    return f"{home}.{inner}"


def resolve(qualname: str) -> tuple[str, str] | None:
    """``(role, target)`` for an importable dotted name, else ``None``."""
    parts = qualname.split(".")
    for cut in range(len(parts), 0, -1):
        modname = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(modname)
        except Exception:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        if cut == len(parts):
            return "mod", qualname
        target = canonical(obj, qualname)
        if isinstance(obj, type):
            return "class", target
        if callable(obj):
            return ("meth" if "." in getattr(obj, "__qualname__", "") else "func"), target
        return "data" if cut == len(parts) - 1 else "attr", target
    return None


def test_exists(node_id: str) -> bool:
    """Whether ``tests/x.py::[Class::]test_name[param]`` names a function in that file."""
    path, _, rest = node_id.partition("::")
    file = ROOT / path
    if not rest or not file.is_file():
        return False
    names = [re.sub(r"\[.*\]$", "", n) for n in rest.split("::")]
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except SyntaxError:
        return False
    body = tree.body
    for name in names:
        found = [
            n for n in body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
        ]
        if not found:
            return False
        body = getattr(found[0], "body", [])
    return True


def parse_ledger(path: Path) -> tuple[str, list[tuple[str, list[LedgerRow]]]]:
    """``(intro markdown, [(section title, rows), ...])`` from ``docs/equations.md``."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    intro: list[str] = []
    sections: list[tuple[str, list[LedgerRow]]] = []
    current: list[LedgerRow] | None = None
    module: str | None = None
    title = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("## "):
            title = line[3:].strip()
            m = re.search(r"`(bnfl(?:\.[A-Za-z_][\w]*)*)`", title)
            module = m.group(1) if m else None
            current = []
            sections.append((title, current))
            continue
        if line.startswith("# "):
            continue
        if current is None:
            intro.append(raw)
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 4 or set("".join(cells)) <= set("-: ") or cells[0].lower() == "paper":
            continue
        paper, equation, func_cell, test_cell = cells[:4]
        row = LedgerRow(title, module, paper.replace("*", "").strip(), equation)
        row.functions = expand_functions(split_cell(func_cell), module)
        row.tests = expand_tests(split_cell(test_cell))
        row.keys = {f"{row.paper.lower()} {k}" for k in equation_keys(equation)}
        current.append(row)
    return "\n".join(intro).strip(), sections


def test_label(node_id: str) -> str:
    return "proof-" + slug(re.sub(r"\[.*\]$", "", node_id))


def generate_ledger(app: Sphinx, written: set[Path]) -> None:
    intro, sections = parse_ledger(DOCS / "equations.md")
    rows = [row for _, sec in sections for row in sec]
    app.env.bnfl_ledger = rows  # type: ignore[attr-defined]
    for row in rows:
        for f in row.functions:
            if resolve(f) is None:
                logger.warning(
                    "docs/equations.md (%s, %s %s): function %r cannot be imported",
                    row.section, row.paper, row.equation, f,
                )
        for t in row.tests:
            if not test_exists(t):
                logger.warning(
                    "docs/equations.md (%s, %s %s): test %r does not exist",
                    row.section, row.paper, row.equation, t,
                )

    out = ["(equation-ledger)=", "# Equation ledger", "", intro, ""]
    out += [
        "Generated from `docs/equations.md` at build time: each function links to its API entry, "
        "each test to its source on the [proofs page](proofs/index.md). The theory pages cite the "
        "same rows under each displayed equation.",
        "",
    ]
    for title, sec in sections:
        out += [f"## {title}", ""]
        if not sec:
            out += ["*No equations recorded in this section yet.*", ""]
            continue
        out += ["| paper | equation | function | test |", "|---|---|---|---|"]
        for row in sec:
            funcs = []
            for f in row.functions:
                r = resolve(f)
                funcs.append(f"{{py:{r[0]}}}`{f} <{r[1]}>`" if r else f"`{f}`")
            tests = [f"[`{t.split('::')[-1]}`](#{test_label(t)})" for t in row.tests]
            eq = row.equation.replace("|", "\\|")
            out.append(f"| {row.paper} | {eq} | {', '.join(funcs)} | {', '.join(tests)} |")
        out.append("")
    write_if_changed(GEN / "ledger.md", "\n".join(out), written)

    # Proof pages: the source of every test named in the ledger, one page per test file.
    by_file: dict[str, list[str]] = {}
    for row in rows:
        for t in row.tests:
            if test_exists(t):
                by_file.setdefault(t.split("::")[0], [])
                if t not in by_file[t.split("::")[0]]:
                    by_file[t.split("::")[0]].append(t)
    index = [
        "# Proofs: the tests behind the ledger",
        "",
        "Each test below is cited in the [equation ledger](../ledger.md); it compares the "
        "implementation with an independent reference (`torch.autograd` in float64, the "
        "concatenated batch, or a hypothesis property over random client splits). Run one with "
        "`.venv/bin/python -m pytest <test id>`.",
        "",
    ]
    if not by_file:
        index += ["*The ledger names no test yet.*", ""]
    pages = []
    for file, tests in sorted(by_file.items()):
        page = slug(file)
        pages.append(page)
        index.append(f"- [`{file}`]({page}.md): {len(tests)} test(s)")
        body = [f"# `{file}`", ""]
        for t in tests:
            name = re.sub(r"\[.*\]$", "", t.split("::")[-1])
            cls = t.split("::")[1] if t.count("::") == 2 else None
            pyobject = f"{cls}.{name}" if cls else name
            depth = "../" * (len((GEN / "proofs").relative_to(DOCS).parts) + 1)
            body += [
                f"({test_label(t)})=",
                f"## `{t.split('::', 1)[1]}`",
                "",
                f"```{{literalinclude}} {depth}{file}",
                ":language: python",
                f":pyobject: {pyobject}",
                "```",
                "",
            ]
        write_if_changed(GEN / "proofs" / f"{page}.md", "\n".join(body), written)
    index += ["", "```{toctree}", ":hidden:", ""] + pages + ["```", ""]
    write_if_changed(GEN / "proofs" / "index.md", "\n".join(index), written)


class LedgerDirective(Directive):
    """``{ledger} PAPER EQUATION``: links to the code and tests for one equation."""

    required_arguments = 1
    final_argument_whitespace = True
    has_content = False

    def run(self) -> list[nodes.Node]:
        env = self.state.document.settings.env
        if not hasattr(env, "bnfl_ledger_docs"):
            env.bnfl_ledger_docs = set()
        env.bnfl_ledger_docs.add(env.docname)
        arg = self.arguments[0].strip()
        paper, _, eq = arg.partition(" ")
        wanted = {f"{paper.lower()} {k}" for k in equation_keys(eq)}
        rows = [r for r in getattr(env, "bnfl_ledger", []) if wanted & r.keys]
        target_id = "eq-" + slug(arg)
        para = nodes.paragraph(classes=["bnfl-ledger"])
        para["ids"].append(target_id)
        para += nodes.strong(text=f"{paper} {eq}: ")
        if not rows:
            para += nodes.emphasis(text="not implemented in bnfl (no row in the equation ledger).")
            return [para]
        funcs: list[str] = []
        tests: list[str] = []
        for r in rows:
            funcs += [f for f in r.functions if f not in funcs]
            tests += [t for t in r.tests if t not in tests]
        para += nodes.Text("implemented by ")
        for i, f in enumerate(funcs):
            if i:
                para += nodes.Text(", ")
            r = resolve(f)
            ref = addnodes.pending_xref(
                "", refdomain="py", reftype=r[0] if r else "obj", reftarget=r[1] if r else f,
                refexplicit=True, refwarn=False, refdoc=env.docname,
            )
            ref += nodes.literal(text=f.removeprefix("bnfl."))
            para += ref
        para += nodes.Text(".")
        # The tests on demand: a collapsed block under the line, not a box of long names after
        # every equation.
        proofs = nodes.paragraph(classes=["bnfl-ledger-tests"])
        for i, t in enumerate(tests):
            if i:
                proofs += nodes.Text(", ")
            ref = addnodes.pending_xref(
                "", refdomain="std", reftype="ref", reftarget=test_label(t),
                refexplicit=True, refwarn=True, refdoc=env.docname,
            )
            ref += nodes.literal(text=t.split("::")[-1])
            proofs += ref
        n = len(tests)
        opened = nodes.raw("", f'<details class="bnfl-ledger-tests"><summary>proved by {n} test'
                           f'{"s" if n != 1 else ""}</summary>', format="html")
        return [para, opened, proofs, nodes.raw("", "</details>", format="html")]


# --------------------------------------------------------------------------------------------
# Reproductions: generated from figures/
# --------------------------------------------------------------------------------------------


def load_catalog() -> list[dict[str, str]]:
    path = DOCS / "_data" / "catalog.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def figure_id(stem: str, known: list[str]) -> str | None:
    """The catalog id a figure file belongs to (``fedtan-fig4`` or ``fedtan-fig4-loss``)."""
    for cid in sorted(known, key=len, reverse=True):
        if stem == cid or stem.startswith(cid + "-") or stem.startswith(cid + "_"):
            return cid
    return None


def rewrite_report(text: str, figures: Path) -> str:
    """Keep REPORT.md's images and drop links the docs cannot resolve (shown as code)."""

    def link(m: re.Match[str]) -> str:
        bang, label, target = m.group(1), m.group(2), m.group(3)
        if re.match(r"[a-z]+://|#|mailto:", target):
            return m.group(0)
        if (figures / target.split("#")[0]).is_file():
            return m.group(0)
        return label if bang == "" else f"`{target}`"

    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)", link, text)


def registry() -> dict[str, dict[str, str]]:
    """``{id: {"title", "kind", "summary"}}`` of the entries ``bnfl run`` knows (may be empty)."""
    try:
        from bnfl import experiments
    except ImportError:
        return {}
    found: dict[str, dict[str, str]] = {}
    try:
        for eid in experiments.ids():
            entry = experiments.get(eid)
            found[eid] = {
                "title": str(getattr(entry, "title", "")),
                "kind": str(getattr(entry, "kind", "")),
                "summary": str(getattr(entry, "summary", "")),
            }
    except Exception as err:  # reported; -W turns it into a failure
        logger.warning("bnfl docs: cannot list the experiments registry: %s", err)
    return found


def one_line(value: object, limit: int = 160) -> str:
    """``value`` (JSON for non-strings) on one line, cut to ``limit`` characters."""
    text = " ".join(str(value if isinstance(value, str) else json.dumps(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def md_cell(value: object, limit: int = 160) -> str:
    """``value`` as the text of one markdown table cell (one line, ``|`` escaped)."""
    return one_line(value, limit).replace("|", "\\|")


def result_section(result_file: Path) -> list[str]:
    """Claim verdicts and provenance of a ``bnfl run``/``bnfl reproduce`` result.json, rendered by
    :func:`bnfl.experiments.report.claim_rows` and :func:`~bnfl.experiments.report.markdown_table`; the
    claims' whys are listed under the table, one line each, numbered by check, with the reasons
    several checks share said once (:func:`bnfl.experiments.dashboard.why_lines`); a claim that
    re-reads another entry's measurement links that entry's section; long decimals are rounded."""
    from bnfl.experiments.core import Result
    from bnfl.experiments.dashboard import round_numbers, why_lines
    from bnfl.experiments.report import claim_rows, markdown_table

    try:
        data = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        logger.warning("bnfl docs: %s is not valid JSON: %s", result_file, err)
        return []
    if not isinstance(data, dict):
        return []
    # fields a partial result.json may leave out; claim_rows reads only the claims
    defaults = {"id": result_file.parent.name, "title": "", "profile": "", "seeds": [], "rows": [], "paper": []}
    try:
        result = Result.from_dict({**defaults, **data})
    except (TypeError, ValueError) as err:
        logger.warning("bnfl docs: %s is not a bnfl result: %s", result_file, err)
        return []
    out: list[str] = []
    if result.rows:
        out += ["**Our numbers** (profile `" + result.profile + "`):", "",
                markdown_table(result.rows).rstrip("\n"), ""]
    if result.paper:
        out += ["**The paper** (verbatim):", "", markdown_table(result.paper).rstrip("\n"), ""]
    if result.claims:
        rows = claim_rows(result, link=lambda eid: f"{{ref}}`{eid} <{entry_label(eid)}>`")
        whys = [row.pop("why") for row in rows]
        for i, row in enumerate(rows, 1):
            row["check"] = f"{i}. {row['check']}"
        out += ["**Claim checks** (`margin >= 0` passes; a margin no larger than the noise, the seed spread or "
                "one test sample, is inconclusive; `info` rows are reported, not asserted):", "",
                markdown_table(rows).rstrip("\n").replace("| FAIL |", "| **FAIL** |"), ""]
        lines = why_lines(whys)
        if lines:
            out += ["Why, by check:", ""] + [f"- {md_cell(line, 2000)}" for line in lines] + [""]
    for key in ("deviations", "notes"):
        items = data.get(key) or []
        if items:
            out += [f"**{key.capitalize()}**:", ""] + [f"- {md_cell(round_numbers(i, digits=3), 400)}" for i in items] + [""]
    return out


def load_results(figures: Path) -> dict[str, object]:
    """``{id: Result}`` of every readable ``figures/<id>/result.json`` (unreadable ones are skipped;
    :func:`result_section` warns about them)."""
    from bnfl.experiments.core import Result

    found: dict[str, object] = {}
    for path in sorted(figures.glob("*/result.json")) if figures.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            defaults = {"id": path.parent.name, "title": "", "profile": "", "seeds": [], "rows": [], "paper": []}
            found[path.parent.name] = Result.from_dict({**defaults, **data})
        except (OSError, json.JSONDecodeError, TypeError, ValueError, AttributeError):
            continue
    return found


def verdict_summary(results: list) -> str:
    """One paragraph: the page's counted reproduction claims by verdict word
    (:mod:`bnfl.experiments.counting`, the words of the headline table and of each entry's verdict),
    then claims by kind: reproduction by word, structural and consistency checks by pass/fail."""
    from bnfl.experiments.dashboard import COUNT_KINDS, kind_counts

    head = ", ".join(f"{n} {w}" for w, n in kind_totals(results).items() if n) or "no reproduction claim"
    totals = {k: {} for k in COUNT_KINDS}
    for per in kind_counts(results).values():
        for k in COUNT_KINDS:
            for v, n in per[k].items():
                totals[k][v] = totals[k].get(v, 0) + n
    parts = [f"{k}: " + ", ".join(f"{n} {v}" for v, n in totals[k].items() if n)
             for k in COUNT_KINDS if sum(totals[k].values())]
    return (f"**{len(results)} entries; counted reproduction claims: {head}.** Claims by kind: " + "; ".join(parts)
            + ".")


def kind_totals(results: list) -> dict[str, int]:
    """``{verdict word: counted reproduction claims}`` summed over ``results``' entry verdicts."""
    from bnfl.experiments.counting import entry_words
    from bnfl.experiments.verdicts import WORDS

    totals = dict.fromkeys(WORDS, 0)
    for r in results:
        for w, n in entry_words(r).items():
            totals[w] += n
    return totals


def entry_title(eid: str, title: str, results: dict[str, object]) -> str:
    """An entry's heading title, naming the stand-in data its quick numbers come from
    (:func:`bnfl.experiments.dashboard.stand_in_title`); as it is for a paper-profile result."""
    from bnfl.experiments import dashboard, registry

    result = results.get(eid)
    if getattr(result, "profile", "quick") == "paper":
        return title
    try:
        entry = registry.get(eid)
    except KeyError:
        return title
    return dashboard.stand_in_title(title, dashboard.stand_ins_of(entry))


def entry_label(eid: str) -> str:
    """The MyST target of an entry's section on its paper page."""
    return f"repro-{eid}"


def provenance_dropdown(facts: dict[str, object]) -> list[str]:
    """``facts`` as a table folded in a collapsed ``<details>`` block (raw HTML in the page)."""
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td><code>{html.escape(one_line(v, 200))}</code></td></tr>"
        for k, v in facts.items()
    )
    return ['<details class="bnfl-provenance"><summary>Provenance: how this result was made</summary>',
            f'<table class="bnfl-table">{rows}</table></details>', ""]


#: The fields of a result.json shown in a reproduction's provenance dropdown.
PROVENANCE_KEYS = ("profile", "seeds", "device", "duration_s", "git_commit", "config_hash", "command")


def page_name(paper: str) -> str:
    """The reproductions page of ``paper`` (a :data:`PAPER_TITLE` key) is ``<id prefix>.md``:
    ``fedtan.md``, ..., ``bench.md`` for the benchmarks."""
    return next((key for key, name in PAPER_PREFIX.items() if name == paper), paper.lower())


def generate_reproductions(written: set[Path]) -> None:
    catalog = load_catalog()
    known = registry()
    listed = {e["id"] for e in catalog}
    for eid, meta in known.items():  # registered entries the snapshot does not list
        if eid not in listed:
            prefix = eid.split("-")[0]
            catalog.append({"id": eid, "paper": PAPER_PREFIX.get(prefix, prefix), "title": meta["title"]})
    ids = [e["id"] for e in catalog]
    figures = ROOT / "figures"
    out_dir = GEN / "reproductions"
    images = sorted(figures.glob("*.png")) if figures.is_dir() else []
    by_id: dict[str, list[Path]] = {}
    for img in images:
        cid = figure_id(img.stem, ids)
        if cid:
            by_id.setdefault(cid, []).append(img)
        else:
            by_id.setdefault("other", []).append(img)
    for img in images:
        copy_if_changed(img, out_dir / "figures" / img.name, written)
    has_report = (figures / "REPORT.md").is_file()
    if has_report:
        report = rewrite_report((figures / "REPORT.md").read_text(encoding="utf-8"), figures)
        if not report.lstrip().startswith("# "):
            report = "# Reproduction report\n\n" + report
        write_if_changed(out_dir / "figures" / "REPORT.md", report, written)

    from bnfl.experiments import dashboard
    from bnfl.experiments.forest import FOREST_ID
    from bnfl.experiments.protocols import paper_protocols_markdown
    from bnfl.experiments.report import (
        COUNTS_KEY,
        HEADLINE_INTRO,
        headline_words_line,
        machine_line,
    )

    others = [img for img in by_id.pop("other", []) if img.stem != FOREST_ID]  # the forest plot opens the page
    if others:
        by_id["other"] = others
    results = load_results(figures)

    def link(eid: str) -> str:
        return f"{{ref}}`{eid} <{entry_label(eid)}>`" if eid in by_id else f"`{eid}`"

    papers = list(PAPER_TITLE)
    index = [
        "# Reproductions",
        "",
    ]
    banner = dashboard.stand_in_banner(results.values())
    if banner:
        index += [":::{note}", banner.rstrip("\n"), ":::", ""]
    index += [
        "## Headline claims",
        "",
        *([f"![Headline effects: 95% intervals over seeds, coloured by verdict](figures/{FOREST_ID}.png)", ""]
          if (figures / f"{FOREST_ID}.png").is_file() else []),
        HEADLINE_INTRO + " Why each verdict came out is listed under the table.",
        "",
        headline_words_line(results),
        "",
        dashboard.headline_markdown(results, why="below", link=link).rstrip("\n"),
        "",
        machine_line(list(results.values())),
        "",
        "## Claims by paper and kind",
        "",
        "*Reproduction*: measured by training; *structural*: constants, counts and arithmetic (in entries "
        "that train nothing, or declared so inside one that trains); *consistency*: the paper compared with "
        "itself.",
        "",
        dashboard.counts_markdown(results.values()).rstrip("\n"),
        "",
        COUNTS_KEY,
        "",
        f"Counted reproduction claims with a verdict but no 95% interval: "
        f"{len(dashboard.missing_intervals(results.values()))}; claims that can have none and say why (a run "
        f"diverged): {len(dashboard.no_interval_claims(results.values()))}.",
        "",
        "## Entries by paper",
        "",
        "In figure order; claims by kind as pass/fail/inconclusive/info; `paper / ours` is the first of "
        "the paper's numbers the entry stores beside ours.",
        "",
        dashboard.entries_markdown(results.values(), link=link).rstrip("\n"),
        "",
        "## Coverage",
        "",
        "Every `figures/<id>.png` with its provenance JSON, next to the catalog entry it reproduces. "
        "Regenerate a figure with `bnfl run <id> --profile quick` and rebuild the docs.",
        "",
        "| paper | catalog entries | registered in `bnfl run` | with a figure | not yet reproduced |",
        "|---|---|---|---|---|",
    ]
    for paper in papers:
        entries = [e for e in catalog if e["paper"] == paper]
        done = [e for e in entries if e["id"] in by_id]
        registered = [e for e in entries if e["id"] in known]
        index.append(
            f"| [{paper}]({page_name(paper)}.md) | {len(entries)} | {len(registered)} | {len(done)} | "
            f"{len(entries) - len(done)} |"
        )
    index.append("")
    toc = [page_name(p) for p in papers]
    if has_report:
        index += ["The reproduction report is [here](figures/REPORT.md).", ""]
        toc.append("figures/REPORT")
    if "other" in by_id:
        index += ["## Other figures", ""]
        for img in by_id["other"]:
            index += [f"### `{img.stem}`", "", f"![{img.stem}](figures/{img.name})", ""]
    index += ["```{toctree}", ":hidden:", ""] + toc + ["```", ""]
    write_if_changed(out_dir / "index.md", "\n".join(index), written)

    for paper in papers:
        entries = [e for e in catalog if e["paper"] == paper]
        page = [f"# {PAPER_TITLE[paper]}", ""]
        done = sorted((e for e in entries if e["id"] in by_id), key=lambda e: dashboard.entry_order(e["id"]))
        missing = [e for e in entries if e["id"] not in by_id]
        mine = [results[e["id"]] for e in done if e["id"] in results]
        if mine:  # the page opens with its verdicts
            page += [verdict_summary(mine), ""]
        page += [
            (f"{len(done)} of {len(entries)} catalog entries have a reproduced figure." if paper != "Benchmarks" else
             "Entries that no paper has, registered and run like the reproductions (`bnfl run <id>`)."),
            "",
        ]
        if mine:
            page += ["## Verdicts", "", dashboard.entries_markdown(mine, link=link, heading=None).rstrip("\n"), "",
                     COUNTS_KEY, ""]
        protocol_lines = paper_protocols_markdown(page_name(paper), results, link)
        if protocol_lines:
            page += [protocol_lines.rstrip("\n"), ""]
        for e in done:
            title = known.get(e["id"], {}).get("title") or e["title"]
            page += [f"({entry_label(e['id'])})=", f"## `{e['id']}`: {entry_title(e['id'], title, results)}", ""]
            if title != e["title"]:
                setting, source_notes = dashboard.split_note(e["title"])
                page += [f"*The paper's setting (catalog):* {md_cell(setting, 2000)}", ""]
                page += [f"*About the paper's text:* {md_cell(n, 2000)}." for n in source_notes] + [""] * bool(source_notes)
            if e["id"] in known and known[e["id"]]["summary"]:
                page += [md_cell(known[e["id"]]["summary"], 2000), ""]
            for img in by_id[e["id"]]:
                page += [f"![{img.stem}](figures/{img.name})", ""]
            result_file = figures / e["id"] / "result.json"
            facts: dict[str, object] = {}
            if result_file.is_file():
                page += result_section(result_file)
                try:
                    data = json.loads(result_file.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    data = {}
                if isinstance(data, dict):
                    facts.update({k: data[k] for k in PROVENANCE_KEYS if k in data})
            for img in by_id[e["id"]]:
                prov = img.with_suffix(".json")
                if prov.is_file():
                    try:
                        data = json.loads(prov.read_text(encoding="utf-8"))
                    except json.JSONDecodeError as err:
                        logger.warning("bnfl docs: %s is not valid JSON: %s", prov, err)
                        continue
                    if isinstance(data, dict):
                        # the figure file's "verdict" is the stored pass/fail aggregate: the page states the
                        # entry's verdict in the words of every report (bnfl.experiments.counting) instead
                        facts.update({f"{img.name}: {k}": v for k, v in data.items() if k != "verdict"})
            book = ROOT / "notebooks" / e["id"].split("-")[0] / f"{e['id']}.py"
            if book.is_file():
                page += [f"Notebook: {{doc}}`{e['id']} <../notebooks/{book.parent.name}/{e['id']}>`", ""]
            if facts:
                page += provenance_dropdown(facts)
        if paper == "Benchmarks":  # no catalog lists them: nothing can be missing
            pass
        elif missing:
            page += ["## Not yet reproduced", ""]
            page += [
                "Registered entries run with `bnfl run <id> --profile quick` (or all of them with "
                "`bnfl reproduce`); the others have no implementation yet.",
                "",
                "| entry | status | what it shows |",
                "|---|---|---|",
            ]
            page += [
                f"| `{e['id']}` | {'registered, no figure yet' if e['id'] in known else 'not implemented'} "
                f"| {md_cell(e['title'])} |"
                for e in missing
            ]
        else:
            page += ["## Not yet reproduced", "", "Every catalog entry of this paper has a figure."]
        page.append("")
        write_if_changed(out_dir / f"{page_name(paper)}.md", "\n".join(page), written)


# --------------------------------------------------------------------------------------------
# Notebooks: jupytext percent scripts under notebooks/
# --------------------------------------------------------------------------------------------


def notebook_groups(entries: list[str]) -> list[tuple[str, list[str]]]:
    """The notebook pages (``"<folder>/<name>"``) grouped by folder: the papers in the dashboard's
    order (FedTAN, HBN, FixBN, FedBN), then other folders (the theory walkthroughs), then the
    non-paper benchmark last; each group in natural order (``fig2`` before ``fig10``)."""
    from bnfl.experiments.dashboard import entry_order, natural_key

    groups: dict[str, list[str]] = {}
    for name in entries:
        folder = name.split("/", 1)[0] if "/" in name else ""
        groups.setdefault(folder, []).append(name)
    papers = [p for p in PAPER_ORDER if p != "bench"]

    def rank(folder: str) -> tuple[int, tuple]:
        if folder in papers:
            return (papers.index(folder), ())
        return (len(papers) + (2 if folder == "bench" else 1), natural_key(folder))

    out = []
    for folder in sorted(groups, key=rank):
        title = (paper_title(folder) if folder in PAPER_ORDER else folder.capitalize()) if folder else "Other"
        names = sorted(groups[folder], key=lambda n: (entry_order(n.rsplit("/", 1)[-1]), natural_key(n)))
        out.append((title, names))
    return out


def generate_notebooks(written: set[Path], mode: str = "off", kernels: int = 1, inputs: str | None = None) -> None:
    """Copy the notebooks for myst-nb; execute the generated reproduction notebooks here.

    The hand-written notebooks (``notebooks/theory/``) are copied as ``.py`` and myst-nb executes
    each in its own kernel. The reproduction notebooks that ``scripts/make_notebooks.py`` writes
    (:data:`bnfl.experiments.notebook.GENERATED_MARK`) all make the same few calls on committed
    results, so they run one after another in ``kernels`` long-lived kernels
    (:func:`execute_in_shared_kernels`): a fresh kernel per notebook spent 4 of its 5 seconds
    starting Python and importing torch. They are written as executed ``.ipynb`` files that tell
    myst-nb not to execute them again. ``mode`` is ``nb_execution_mode``: ``off`` copies them
    unexecuted, ``cache`` keeps an executed copy whose notebook and inputs did not change.
    """
    from bnfl.experiments.notebook import GENERATED_MARK

    src = ROOT / "notebooks"
    out = GEN / "notebooks"
    books = sorted(p for p in src.rglob("*.py") if ".ipynb_checkpoints" not in p.parts) if src.is_dir() else []
    books = [p for p in books if p.read_text(encoding="utf-8").lstrip().startswith(("# ---", "# %%"))]
    entries = []
    shared: list[tuple[Path, Path]] = []
    for nb in books:
        rel = nb.relative_to(src)
        if mode != "off" and GENERATED_MARK in nb.read_text(encoding="utf-8"):
            shared.append((nb, out / rel.with_suffix(".ipynb")))
        else:
            copy_if_changed(nb, out / rel, written)
        entries.append(rel.with_suffix("").as_posix())
    execute_in_shared_kernels(shared, written, reuse=mode == "cache", kernels=kernels, inputs=inputs)
    index = [
        "# Notebooks",
        "",
        "The notebooks under `notebooks/` (jupytext percent `.py` files), executed once while the "
        "docs build and rendered with their outputs. `notebooks/<paper>/<id>.py` shows one "
        "reproduction: generated from the registry by `scripts/make_notebooks.py`, it loads the "
        "committed quick result `figures/<id>/result.json` and shows its figure, its numbers beside "
        "the paper's and its claim checks. `notebooks/theory/` holds hand-written walkthroughs of "
        "the papers' theory. Open them interactively with `make lab` (see "
        "[JupyterLab](../../jupyterlab.md)).",
        "",
    ]
    if not entries:
        index += ["*No notebook has been written yet.*", ""]
    for title, group in notebook_groups(entries):
        index += [f"## {title}", "", "```{toctree}", ":maxdepth: 1", ""] + group + ["```", ""]
    write_if_changed(out / "index.md", "\n".join(index), written)


#: Kernel starts tried before the build stops (see :func:`start_kernel`).
KERNEL_START_ATTEMPTS = 3


async def start_kernel(make_manager, *, cwd: str, attempts: int = KERNEL_START_ATTEMPTS,
                       ready_timeout: float = 120.0):
    """Start a kernel with a manager from ``make_manager()`` and wait until it answers
    ``kernel_info``; return the manager.

    jupyter_client picks free TCP ports and releases them, and the kernel binds them when it
    starts: a process that takes one in between (another test worker's Ray or torchrun) kills the
    kernel at start (``zmq.error.ZMQError: Address already in use``, then "Kernel died before
    replying to kernel_info"). A kernel that dies before it answers is shut down and started again
    by a new manager (new ports), ``attempts`` times in all; then :class:`~sphinx.errors.ExtensionError`
    says so with the last error. A kernel that is alive but does not answer in ``ready_timeout``
    seconds is not retried (another failure): the same error, at once.
    """
    from sphinx.errors import ExtensionError

    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts!r}")
    last = ""
    for attempt in range(1, attempts + 1):
        km = make_manager()
        try:
            await km.start_kernel(cwd=cwd, extra_arguments=["--HistoryManager.hist_file=:memory:"])
            kc = km.client()
            kc.start_channels()
            try:
                await kc.wait_for_ready(timeout=ready_timeout)
            finally:
                kc.stop_channels()
            return km
        except Exception as err:  # noqa: BLE001 - sorted below: a dead kernel is retried, the rest is not
            last = f"{type(err).__name__}: {err}"
            died = not await km.is_alive()
            try:
                await km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - a kernel that never started has nothing to shut down
                pass
            if not died:
                raise ExtensionError(f"the Jupyter kernel for the reproduction notebooks did not start: {last}") from err
            logger.info(f"bnfl_docs: the Jupyter kernel died at start (attempt {attempt} of {attempts}; a port "
                        f"taken by another process?): {last}")
    raise ExtensionError(f"the Jupyter kernel for the reproduction notebooks died at start {attempts} times (each on "
                         f"new ports; a port taken by another process between jupyter_client choosing it and the "
                         f"kernel binding it?); last error: {last}")


def execute_in_shared_kernels(jobs: list[tuple[Path, Path]], written: set[Path], *, reuse: bool = False,
                              kernels: int = 1, inputs: str | None = None) -> None:
    """Execute each ``(notebook.py, out.ipynb)`` in one of ``kernels`` kernels kept running
    across notebooks, and write the executed notebook (with ``mystnb.execution_mode: off``).

    A cell error stops the build with the notebook and the cell's traceback (as myst-nb's
    ``nb_execution_raise_on_error``). The kernels run in a temporary working directory, one
    thread each (``conf.py`` sets the environment they inherit), and are shut down at the end.
    With ``reuse``, an existing output whose stamp (the notebook's text and ``inputs``, by
    default :func:`notebook_inputs_stamp`) matches is kept.
    """
    import asyncio
    import tempfile
    import time

    import jupytext
    import nbformat

    if inputs is None:
        inputs = notebook_inputs_stamp() if jobs else ""
    todo: list[tuple[Path, Path, str]] = []
    for src, dst in jobs:
        written.add(dst.resolve())
        stamp = hashlib.sha256((src.read_text(encoding="utf-8") + inputs).encode()).hexdigest()[:16]
        if reuse and dst.is_file():
            try:
                if json.loads(dst.read_text(encoding="utf-8"))["metadata"].get("bnfl_stamp") == stamp:
                    continue
            except (ValueError, KeyError):
                pass
        todo.append((src, dst, stamp))
    if not todo:
        return

    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from sphinx.errors import ExtensionError

    async def worker(queue: asyncio.Queue, cwd: str) -> None:
        km = await start_kernel(lambda: AsyncKernelManager(kernel_name="python3"), cwd=cwd)
        try:
            while not queue.empty():
                src, dst, stamp = queue.get_nowait()
                nb = jupytext.read(src, fmt="py:percent")
                client = NotebookClient(nb, km=km, timeout=300, record_timing=False, allow_errors=False)
                try:
                    await client.async_execute()
                except CellExecutionError as err:
                    raise ExtensionError(f"notebook {src.relative_to(ROOT)} failed:\n{err}") from None
                finally:
                    if client.kc is not None:
                        client.kc.stop_channels()
                nb.metadata["mystnb"] = {"execution_mode": "off"}  # executed here; render as is
                nb.metadata["bnfl_stamp"] = stamp
                dst.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, dst)
        finally:
            await km.shutdown_kernel(now=True)

    async def run_all(cwd: str) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        for job in todo:
            queue.put_nowait(job)
        await asyncio.gather(*(worker(queue, cwd) for _ in range(max(1, min(kernels, len(todo))))))

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bnfl-notebooks-") as cwd:
        asyncio.run(run_all(cwd))
    logger.info(f"bnfl_docs: executed {len(todo)} reproduction notebooks in {max(1, min(kernels, len(todo)))} "
                f"shared kernel(s) in {time.perf_counter() - start:.1f} s")


# --------------------------------------------------------------------------------------------


def notebook_inputs_stamp() -> str:
    """Hash of what notebook outputs depend on besides their code: the committed results
    (``figures/*/result.json``) and the bnfl source."""
    h = hashlib.sha256()
    paths = sorted((ROOT / "figures").glob("*/result.json")) + sorted((ROOT / "bnfl").rglob("*.py"))
    for path in paths:
        h.update(path.relative_to(ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def refresh_notebook_cache(app: Sphinx, stamp: str) -> None:
    """Empty myst-nb's execution cache when the notebooks' inputs changed since it was filled
    (myst-nb keys the cache by the notebook's code only); ``stamp``: :func:`notebook_inputs_stamp`."""
    cache = Path(app.config.nb_execution_cache_path)
    stamp_file = cache.parent / (cache.name + ".inputs")
    app.env.bnfl_notebook_stamp_new = stamp  # compared in notebooks_outdated
    if stamp_file.is_file() and stamp_file.read_text(encoding="utf-8") == stamp:
        return
    shutil.rmtree(cache, ignore_errors=True)
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp, encoding="utf-8")


def notebooks_outdated(app: Sphinx, env, added, changed, removed) -> list[str]:  # noqa: ANN001
    """Re-read (so re-execute) every notebook page when the notebooks' inputs changed."""
    stamp = getattr(env, "bnfl_notebook_stamp_new", None)
    old = getattr(env, "bnfl_notebook_stamp", None)
    env.bnfl_notebook_stamp = stamp
    if old == stamp:
        return []
    return sorted(d for d in env.found_docs if d.startswith("_generated/notebooks/") and not d.endswith("index"))


def ledger_outdated(app: Sphinx, env, added, changed, removed) -> list[str]:  # noqa: ANN001
    """Re-read the pages that cite the ledger when ``docs/equations.md`` changed."""
    path = DOCS / "equations.md"
    stamp = path.read_text(encoding="utf-8") if path.exists() else ""
    old = getattr(env, "bnfl_ledger_stamp", None)
    env.bnfl_ledger_stamp = stamp
    if old == stamp:
        return []
    return sorted(getattr(env, "bnfl_ledger_docs", set()))


def purge_doc(app: Sphinx, env, docname: str) -> None:  # noqa: ANN001
    getattr(env, "bnfl_ledger_docs", set()).discard(docname)


def merge_info(app: Sphinx, env, docnames, other) -> None:  # noqa: ANN001
    if not hasattr(env, "bnfl_ledger_docs"):
        env.bnfl_ledger_docs = set()
    env.bnfl_ledger_docs |= getattr(other, "bnfl_ledger_docs", set())


def generate_which_fix(written: set[Path]) -> None:
    """``which_fix.inc`` and ``which_fix_benchmark.inc``: the tables of ``docs/which-fix.md``
    (:func:`bnfl.which_fix.markdown`: the communication counted by the engine, the engines, and the
    numbers of the committed results; :func:`bnfl.which_fix.benchmark_markdown`)."""
    from bnfl.which_fix import benchmark_markdown, fixbn_feature_shift, markdown

    write_if_changed(GEN / "which_fix.inc", markdown(ROOT / "figures"), written)
    write_if_changed(GEN / "which_fix_benchmark.inc", benchmark_markdown(ROOT / "figures"), written)
    write_if_changed(GEN / "which_fix_fixbn.inc", fixbn_feature_shift(ROOT / "figures"), written)


def generate(app: Sphinx) -> None:
    written: set[Path] = set()
    generate_api(written)
    generate_ledger(app, written)
    generate_reproductions(written)
    generate_which_fix(written)
    inputs = notebook_inputs_stamp()  # committed results and bnfl source: once per build
    generate_notebooks(written, mode=app.config.nb_execution_mode, kernels=max(1, app.parallel), inputs=inputs)
    remove_stale(GEN, written)
    refresh_notebook_cache(app, inputs)


def one_document(app: Sphinx, doctree: nodes.document) -> None:
    """Point every node of a page at that page's document.

    Some nodes (autodoc's signatures) keep the document they were parsed in, whose settings still
    hold Sphinx's whole build environment; pickling the page's doctree then wrote that environment
    (about 3 MB) into every one of the site's ~480 doctrees, and the parallel readers sent each back
    to the main process. A node with no document of its own asks its parent, up to the page.
    """
    for node in doctree.findall(include_self=False):
        if node._document is not None and node._document is not doctree:
            node._document = None


#: :func:`generate` runs before autosummary's ``builder-inited`` handler (Sphinx's default priority,
#: 500), which reads every source page: otherwise it reads the API pages of the previous build, and
#: a module removed since then fails to import (a warning, an error under ``-W``) until the build after.
GENERATE_PRIORITY = 400


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("builder-inited", generate, priority=GENERATE_PRIORITY)
    app.connect("doctree-read", one_document)
    app.add_directive("ledger", LedgerDirective)
    app.connect("env-get-outdated", ledger_outdated)
    app.connect("env-get-outdated", notebooks_outdated)
    app.connect("env-purge-doc", purge_doc)
    app.connect("env-merge-info", merge_info)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
