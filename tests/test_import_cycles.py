"""No import cycle among bnfl's modules, counting every import a reader sees (read with ``ast``).

An import inside a function, or under ``if TYPE_CHECKING:``, hides a cycle from Python's import
machinery but not from a reader: the two modules still depend on each other (a type named in a
signature is a dependency too). So every ``import`` statement in a module's file counts, wherever it
stands. A module's edges go to the modules it names (``from bnfl.fl import engine`` names
``bnfl.fl.engine``; ``from bnfl.fl import Simulation`` names the package ``bnfl.fl``).

Issue 37 made the test see ``TYPE_CHECKING`` imports. That found ``bnfl._run_groups`` <->
``bnfl.fl._run`` (a ``History`` annotation; ``_run_groups`` now names the two fields it reads as a
protocol) and ``bnfl.diagnosis._core`` <-> ``bnfl.diagnosis.report`` (``Diagnosis`` now lives with
its formatting in ``report``), and the five-module circle inside ``bnfl.fl`` (engine, engine_choice,
batched, batched_together, augment), which the engine's refactor in the same issue removed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
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
    assert import_cycles(tmp_path, "pkg") == [frozenset({"pkg.a", "pkg.sub.b", "pkg.c", "pkg.d"})]


def test_bnfl_has_no_import_cycle():
    found = import_cycles(ROOT, "bnfl")
    assert not found, "import cycles (imports inside functions and under TYPE_CHECKING count): " + "; ".join(
        " <-> ".join(sorted(c)) for c in found)


def test_config_and_flower_import_one_way():
    """``bnfl.train.config`` runs Flower and builds its setup from a run config
    (:func:`bnfl.train.config.setup_from_config`); Flower never imports ``bnfl.train.config`` (the cycle
    issue 26 named) nor the builder (issue 37: the engines sit below the builder, 7 floors)."""
    known = modules(ROOT, "bnfl")
    for flower in ("bnfl.fl.flower", "bnfl.fl.flower_setup", "bnfl.fl.flower_client"):
        assert "bnfl.train.config" not in imports(flower, known[flower], known), flower
    assert "bnfl.fl.flower" in imports("bnfl.train.config", known["bnfl.train.config"], known)
    assert "bnfl.train.builder" in imports("bnfl.train.config", known["bnfl.train.config"], known)  # setup_from_config
    assert "bnfl.train.builder" not in imports("bnfl.fl.flower", known["bnfl.fl.flower"], known)


@pytest.mark.parametrize("module", ["bnfl.runs", "bnfl._run_groups", "bnfl.plots", "bnfl.methods", "bnfl.train",
                                    "bnfl.data"])
def test_each_entry_module_imports_first_in_a_fresh_interpreter(module):
    """A package's ``__init__`` runs before its submodule, an edge the graph above does not draw:
    ``bnfl.plots`` reads the method table in ``bnfl.fl``, whose ``__init__`` reaches ``bnfl.fl._run``,
    which draws with ``bnfl._run_groups``. Each entry point must import first, on its own."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
