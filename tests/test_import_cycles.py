"""No import cycle among bnfl's modules, counting imports inside functions (read with ``ast``).

An import inside a function hides a cycle from Python's import machinery but not from a reader:
the two modules still depend on each other. Imports under ``if TYPE_CHECKING:`` are left out (they
never run). A module's edges go to the modules it names (``from bnfl.fl import engine`` names
``bnfl.fl.engine``; ``from bnfl.fl import Simulation`` names the package ``bnfl.fl``).

There is none. The last one, ``bnfl.fl.config`` <-> ``bnfl.fl.flower`` (``run(cfg, engine="flower")``
runs Flower, and Flower's ``setup_from_config`` built from a run config), went with issue 26's
split of config.py into a schema (:mod:`bnfl.fl.config_schema`) and a builder
(:mod:`bnfl.fl.builder`) that Flower imports instead. The test fails on any cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                skip |= {id(n) for n in ast.walk(node)}
    return skip


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out |= {f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names}
    return {m for m in out if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(frozenset(comp))
    return found


def import_cycles(root: Path, package: str) -> list[frozenset[str]]:
    known = modules(root, package)
    return cycles({m: imports(m, p, known) for m, p in known.items()})


def test_the_detector_sees_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n    return g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n"
                              "def g():\n    import pkg.a\n")
    (pkg / "d.py").write_text("import pkg.c\n")
    assert import_cycles(tmp_path, "pkg") == [frozenset({"pkg.a", "pkg.sub.b", "pkg.c"})]  # not pkg.d


def test_bnfl_has_no_import_cycle():
    found = import_cycles(ROOT, "bnfl")
    assert not found, "import cycles (imports inside functions count): " + "; ".join(
        " <-> ".join(sorted(c)) for c in found)


def test_config_and_flower_import_one_way():
    """``bnfl.fl.config`` runs Flower; Flower builds through the builder and the schema, never
    through ``bnfl.fl.config`` (the cycle issue 26 named)."""
    known = modules(ROOT, "bnfl")
    for flower in ("bnfl.fl.flower", "bnfl.fl.flower_setup", "bnfl.fl.flower_client"):
        assert "bnfl.fl.config" not in imports(flower, known[flower], known), flower
    assert "bnfl.fl.flower" in imports("bnfl.fl.config", known["bnfl.fl.config"], known)
    assert "bnfl.fl.builder" in imports("bnfl.fl.flower", known["bnfl.fl.flower"], known)  # setup_from_config
