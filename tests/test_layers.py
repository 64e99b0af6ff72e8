"""bnfl's layers hold: no module imports from a layer above its own (:data:`bnfl._layers.LAYERS`).

Every import statement counts, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``): a deferred import still makes the lower module depend on the higher one. The
import graph is the one ``tests/test_import_cycles.py`` reads.
"""

from __future__ import annotations

from pathlib import Path

from test_import_cycles import ROOT, imports, modules

from bnfl._layers import LAYERS


def layer_of(module: str, layers=LAYERS) -> tuple[str, int] | None:
    """The unit (longest listed name containing ``module``) and its layer's index; ``None`` if none."""
    best: tuple[str, int] | None = None
    for i, layer in enumerate(layers):
        for unit in layer:
            if (module == unit or module.startswith(unit + ".")) and (best is None or len(unit) > len(best[0])):
                best = (unit, i)
    return best


def upward_imports(root: Path, package: str, layers=LAYERS) -> list[str]:
    """``"low -> high"`` for every import from a module to one in a higher layer."""
    known = modules(root, package)
    out = []
    for name, path in known.items():
        here = layer_of(name, layers)
        for target in sorted(imports(name, path, known)):
            there = layer_of(target, layers)
            if here is not None and there is not None and there[1] > here[1]:
                out.append(f"{name} ({here[0]}) -> {target} ({there[0]})")
    return out


def test_every_module_has_a_layer():
    unplaced = [m for m in modules(ROOT, "bnfl") if layer_of(m) is None]
    assert not unplaced, f"modules no layer in bnfl/_layers.py names (place them there): {unplaced}"


def test_each_unit_is_named_once():
    units = [u for layer in LAYERS for u in layer]
    assert len(units) == len(set(units))


def test_the_checker_sees_an_import_up_through_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from pkg.high import b\n")
    (pkg / "high.py").write_text("from pkg.low import a\n")
    layers = (("pkg.low",), ("pkg.high", "pkg"))
    assert upward_imports(tmp_path, "pkg", layers) == ["pkg.low.a (pkg.low) -> pkg.high (pkg.high)"]


def test_no_layer_imports_from_a_layer_above_it():
    up = upward_imports(ROOT, "bnfl")
    assert not up, "imports that reach up a layer (bnfl/_layers.py gives the order):\n" + "\n".join(up)
