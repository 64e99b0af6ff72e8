"""A config names only what a slot takes (issue 40, item 2): an import string in ``method``,
``[model] name``, ``[data] name`` or ``[partition] kind`` resolves only to an object of that slot's
kind, checked before anything calls it; ``os:system``, ``shutil:rmtree`` and unmarked functions
are refused in one line under ``bnfl train`` and ``bnfl diagnose``, with marker files showing that
nothing ran. ``python -m bnfl`` imports plug-ins from where the ``bnfl`` script does (not from the
current folder).

On bnfl at de45014 the payloads ran (``touch`` created its marker, ``rmtree`` deleted the victim
folder) and ``python -m bnfl`` imported ``evilmod.py`` from the current folder.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnfl import cli

BASE = 'rounds = 1\n[train]\nprogress = false\nbatch_size = 8\n[partition]\nkind = "iid"\nnum_clients = 2\n'


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue().strip()


def _config(tmp_path: Path, slot: str, spec: str, **options: str) -> Path:
    extra = "".join(f'{k} = "{v}"\n' for k, v in options.items())
    if slot == "method":
        text = f'method = "{spec}"\n' + BASE
    elif slot == "partition":
        text = BASE.replace('kind = "iid"', f'kind = "{spec}"') + extra
    else:
        text = BASE + f'[{slot}]\n{"name"} = "{spec}"\n' + extra
    p = tmp_path / f"{slot}.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("command", ["train", "diagnose"])
@pytest.mark.parametrize(("slot", "field", "kind"), [("method", "method", "method"), ("model", "model.name", "model"),
                                                      ("data", "data.name", "data set"),
                                                      ("partition", "partition.kind", "partition kind")])
def test_os_system_in_any_slot_is_refused_before_it_runs(tmp_path, command, slot, field, kind):
    marker = tmp_path / "marker"
    cfg = _config(tmp_path, slot, "os:system", **({"command": f"touch {marker}"} if slot in ("data", "model") else {}))
    code, err = _run([command, "--config", str(cfg), "--out", str(tmp_path / "run")] if command == "train"
                     else [command, "--config", str(cfg), "--quiet"])
    assert code == 2 and not marker.exists()
    want = f"{kind} 'os:system' is built-in function {os.system.__module__}.system, not "
    assert len(err.splitlines()) == 1 and want in err and "refused, nothing was called" in err, err
    assert err.startswith(f"bnfl {command}: error: {field}: " if slot != "method" else f"bnfl {command}: error: ")


@pytest.mark.parametrize("command", ["train", "diagnose"])
def test_shutil_rmtree_as_data_set_deletes_nothing(tmp_path, command):
    victim = tmp_path / "victim"
    (victim / "inside").mkdir(parents=True)
    cfg = _config(tmp_path, "data", "shutil:rmtree", path=str(victim))
    code, err = _run([command, "--config", str(cfg)])
    assert code == 2 and (victim / "inside").is_dir()
    assert err == (f"bnfl {command}: error: data.name: data set 'shutil:rmtree' is function shutil.rmtree, not a "
                   f"function marked @plugin('data set') or a bnfl.data.Dataset (bnfl.registry.plugin); refused, "
                   f"nothing was called")


def test_the_refusal_docs_own_fix_quotes_is_the_real_one(tmp_path):
    page = (Path(__file__).resolve().parents[1] / "docs" / "own-fix.md").read_text()
    code, err = _run(["train", "--config", str(_config(tmp_path, "data", "shutil:rmtree"))])
    assert code == 2 and f"`{err}`" in " ".join(page.split())


def test_the_method_flag_refuses_a_function_too(tmp_path):
    code, err = _run(["train", "--method", "subprocess:run", "--rounds", "1", "--quiet"])
    assert code == 2 and err.startswith("bnfl train: error: method 'subprocess:run' is function subprocess.run, not a "
                                        "subclass of bnfl.fl.Algorithm or a bnfl.methods.Method")


SLOTS = st.sampled_from([("method", "method"), ("model", "model"), ("data", "data set"),
                         ("partition", "partition kind")])
TARGETS = st.tuples(st.sampled_from(["os", "shutil", "subprocess", "builtins", "sys", "pathlib", "functools",
                                     "bnfl.fl", "bnfl.models", "bnfl.data", "torch", "no_such_module"]),
                    st.sampled_from(["system", "rmtree", "run", "exec", "eval", "exit", "Path", "partial", "load",
                                     "build", "FedAvg", "MLP", "digits", "save", "nope"]))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(SLOTS, TARGETS)
def test_fuzzed_import_strings_run_only_what_the_slot_takes(tmp_path, slot, target):
    """Any module:attribute in any slot either is of the slot's kind (and then may run) or is
    refused in one line naming the field; nothing that is not of the kind is ever called."""
    (where, kind), (module, attr) = slot, target
    spec = f"{module}:{attr}"
    cfg = _config(tmp_path, where, spec)
    code, err = _run(["diagnose", "--config", str(cfg), "--quiet", "--stat-samples", "16"])
    assert "Traceback" not in err
    if code == 0:  # only an object of the kind gets this far
        assert (where, spec) in {("method", "bnfl.fl:FedAvg"), ("model", "bnfl.models:MLP")}, (spec, err)
        return
    assert code == 2 and len(err.splitlines()) == 1, (spec, err)
    assert (f"{kind} {spec!r}" in err or f"unknown {spec!r}" in err), (spec, err)
    assert ("refused, nothing was called" in err or "cannot import module" in err or "has no attribute" in err
            or "is not a subclass" in err or "model:" in err), (spec, err)


def test_python_m_bnfl_does_not_import_from_the_current_folder(tmp_path):
    (tmp_path / "evilmod.py").write_text(f"open({str(tmp_path / 'marker')!r}, 'w').write('ran')\n")
    (tmp_path / "c.toml").write_text('method = "evilmod:X"\nrounds = 1\n')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "bnfl", "train", "--config", "c.toml", "--quiet"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "marker").exists(), proc.stderr
    assert proc.stderr.strip() == ("bnfl train: error: method 'evilmod:X': cannot import module 'evilmod' "
                                   "(ModuleNotFoundError: No module named 'evilmod')")
