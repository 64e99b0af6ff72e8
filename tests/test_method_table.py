"""Issue 37, item 3: one place defines a method id, and every reader asks it.

Read with ``ast`` over every module of ``bnfl``:

* a method is *defined* where a :class:`~bnfl.methods.Method` row is built from an id literal or
  registered under one, and *served* where a table is adapted or installed for another layer
  (a class with ``get``/``available``/``values``, a slot with ``install``, a ``get_method`` or
  ``method_table`` accessor, a module-level call at import). Every id has exactly one such site,
  :mod:`bnfl.methods`, the table under its public name;
* ``import bnfl`` fills nothing (the package's top level only imports and defines);
* the experiments outside ``papers/`` ask the table (:attr:`Method.iid_pool`,
  :meth:`Method.for_rounds`) instead of comparing a run's method with an id.

On 4f21679 each id had three sites (bnfl/methods.py's row, the ``_Methods`` adapter and its
``install`` in bnfl/__init__.py, the slot bnfl/method_table.py), ``bnfl/__init__.py`` called
``method_table.install`` at import, and training.py:73, 75 and dryrun.py:361 compared ids: every
test of the first group failed there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bnfl.methods import METHODS, Method

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "bnfl"
TABLE = "bnfl/methods.py"
#: what serves a method table to another layer: accessor functions and the slot's filler
SERVERS = {"get_method", "method_table", "install"}
#: comparisons with an id that are an experiment's own choice of row, not a question to the table
CHOSEN_ROWS = {"bnfl/experiments/benchmarks/bn_fixes.py": "fedavg+bn"}  # its baseline row ("vs FedAvg+BN")


def _modules() -> list[Path]:
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 200
    return files


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _definition_sites(path: Path, ids: set[str]) -> tuple[set[str], list[str]]:
    """(ids whose row ``path`` builds or registers, the table adapters/slots/fills it holds)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rows, serves = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = _literal(node.args[0]) if node.args else None
            first = first or next((_literal(k.value) for k in node.keywords if k.arg == "id"), None)
            if first is not None and first.lower() in ids and (
                    name in ("Method", "_m") or name == "register" and "METHODS" in ast.unparse(node.func)):
                rows.add(first.lower())
            if name == "install":
                serves.append(f"{_rel(path)}:{node.lineno} calls install()")
        elif isinstance(node, ast.ClassDef):
            defs = {b.name for b in node.body if isinstance(b, ast.FunctionDef)}
            if {"get", "available", "values"} <= defs:
                serves.append(f"{_rel(path)}:{node.lineno} class {node.name} adapts a table")
        elif isinstance(node, ast.FunctionDef) and node.name in SERVERS:
            serves.append(f"{_rel(path)}:{node.lineno} def {node.name}")
    return rows, serves


def test_one_definition_site_per_method_id():
    ids = set(METHODS.available())
    assert len(ids) >= 30
    sites: dict[str, set[str]] = {i: set() for i in ids}
    serving = []
    for path in _modules():
        rows, serves = _definition_sites(path, ids)
        for i in rows:
            sites[i].add(_rel(path))
        serving += serves
        for _ in serves:
            for i in ids:
                sites[i].add(_rel(path))
    assert serving == []
    assert {i: sorted(s) for i, s in sites.items() if s != {TABLE}} == {}


def test_the_site_scan_sees_a_second_table(tmp_path):
    """The scan above can fail: it sees a row, a registration, an adapter and its install."""
    p = tmp_path / "shadow.py"
    p.write_text('ROW = Method(id="fedavg+bn", label="x")\nMETHODS.register("FedBN", ROW)\n'
                 "class T:\n    def get(self, n): ...\n    def available(self): ...\n    def values(self): ...\n"
                 "slot.install(T())\n")
    rows, serves = _definition_sites(p, {"fedavg+bn", "fedbn"})
    assert rows == {"fedavg+bn", "fedbn"} and len(serves) == 2


def test_the_public_name_is_the_table():
    """The table is defined in :mod:`bnfl.methods` itself (no second module under the engine), and
    ``bnfl.fl.comm_volume`` is the run layer's, handed on lazily."""
    from bnfl import fl, methods

    assert methods.Method.__module__ == "bnfl.methods" and methods.get.__module__ == "bnfl.methods"
    assert not (PKG / "fl" / "methods.py").exists() and not (PKG / "method_table.py").exists()
    assert fl.comm_volume.__module__ == "bnfl.train.accounting"  # reads bnfl.methods directly


def test_import_bnfl_fills_nothing():
    """The package's top level only imports, defines and lists: no table is installed at import."""
    tree = ast.parse((PKG / "__init__.py").read_text(encoding="utf-8"))
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    loose = [f"{n.lineno}: {ast.unparse(n)[:60]}" for n in tree.body[1:] if not isinstance(n, kinds)]
    assert loose == []


def _id_comparisons(path: Path, ids: set[str]) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for c in [node.left, *node.comparators]:
                vals = [c] if isinstance(c, ast.Constant) else list(getattr(c, "elts", []))
                out += [(node.lineno, v) for v in map(_literal, vals) if v is not None and v.lower() in ids]
    return out


def test_the_experiments_ask_the_table_instead_of_comparing_ids():
    ids = set(METHODS.available())
    found, chosen = [], set()
    for path in sorted((PKG / "experiments").rglob("*.py")):
        if "papers" in path.parts:
            continue
        for line, value in _id_comparisons(path, ids):
            if CHOSEN_ROWS.get(_rel(path)) == value:
                chosen.add(_rel(path))
            else:
                found.append(f"{_rel(path)}:{line} compares with {value!r}")
    assert found == []
    assert chosen == set(CHOSEN_ROWS)  # the allowance is still needed, so it cannot hide a new comparison


def test_the_id_comparison_scan_finds_what_it_looks_for(tmp_path):
    p = tmp_path / "old.py"
    p.write_text('if out["method"] == "centralized":\n    pass\nif m in ("FedTAN2", "x"):\n    pass\n')
    assert _id_comparisons(p, {"centralized", "fedtan2"}) == [(1, "centralized"), (3, "FedTAN2")]


def test_what_the_experiments_ask():
    assert [m.id for m in METHODS.values() if m.iid_pool] == ["centralized"]
    assert [(m.id, m.before_switch) for m in METHODS.values() if m.before_switch] == [("fedtan2", "fedtan")]
    t2 = METHODS["fedtan2"]
    assert t2.for_rounds(1, {}) == ("fedtan", {})  # switch defaults to 1, as FedTAN2's does
    assert t2.for_rounds(2, {}) == ("fedtan2", {})
    assert t2.for_rounds(4, {"switch": 4}) == ("fedtan", {})
    assert t2.for_rounds(5, {"switch": 4}) == ("fedtan2", {"switch": 4})
    assert METHODS["fedtan"].for_rounds(1, {"x": 1}) == ("fedtan", {"x": 1})


def test_a_row_with_an_unknown_norm_kind_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^method 'x': unknown norm kind 'bnn'; valid kinds: bn, .*NORM_KINDS") as e:
        Method(id="x", label="X", color="#000000", marker="o", algorithm_name="fedavg", norm="bnn", comm="model")
    assert "\n" not in str(e.value)
    assert Method(id="y", label="Y", color="#000000", marker="o", algorithm_name="fedavg",
                  norm="mypkg.norms:median_norm", comm="model").norm == "mypkg.norms:median_norm"
