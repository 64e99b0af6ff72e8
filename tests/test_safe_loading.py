"""Every file bnfl reads is data (issue 40, item 1): one torch loader (``bnfl._safe_torch``,
weights_only) and one restricted unpickler (``bnfl.data._safe_pickle``), used everywhere.

The source walk fails on any other ``torch.load``, ``pickle.load(s)``, ``pickle.Unpickler``,
``np.load(allow_pickle=True)`` or ``weights_only=False`` in bnfl; the payload tests write files that
call ``os.system`` (a marker file) and check that nothing ran. On bnfl at de45014 the walk found
``bnfl/diagnosis/cli.py`` (``weights_only=False``) and ``bnfl/data/fedbn_folders.py``
(``pickle.load``), and both payloads ran.
"""

from __future__ import annotations

import ast
import os
import pickle
import random
import sys
from pathlib import Path

import pytest
import torch

from bnfl import cli

ROOT = Path(__file__).resolve().parents[1] / "bnfl"
#: the one place each reader may live
ALLOWED = {"torch.load": {"_safe_torch.py"}, "pickle": {"data/_safe_pickle.py"}}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _offences(path: Path, rel: str | None = None) -> list[str]:
    rel = rel or path.relative_to(ROOT).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "_pickle", "dill", "cloudpickle", "joblib"):
            if rel not in ALLOWED["pickle"]:
                out.append(f"{rel}:{node.lineno}: from {node.module} import ...")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        kw = {k.arg: k.value for k in node.keywords}
        if name == "torch.load" and rel not in ALLOWED["torch.load"]:
            out.append(f"{rel}:{node.lineno}: torch.load (use bnfl._safe_torch.load)")
        if name in ("pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.load", "_pickle.loads",
                    "joblib.load", "dill.load", "cloudpickle.load") and rel not in ALLOWED["pickle"]:
            out.append(f"{rel}:{node.lineno}: {name} (use bnfl.data._safe_pickle)")
        if name in ("np.load", "numpy.load") and isinstance(kw.get("allow_pickle"), ast.Constant) \
                and kw["allow_pickle"].value is not False:
            out.append(f"{rel}:{node.lineno}: {name}(allow_pickle=True)")
        if name in ("np.load", "numpy.load") and "allow_pickle" in kw and not isinstance(kw["allow_pickle"], ast.Constant):
            out.append(f"{rel}:{node.lineno}: {name}(allow_pickle=<expression>)")
        if "weights_only" in kw and not (isinstance(kw["weights_only"], ast.Constant) and kw["weights_only"].value is True):
            out.append(f"{rel}:{node.lineno}: weights_only other than True")
    return out


def test_no_reader_of_files_but_the_two_safe_ones():
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 100
    offences = [o for f in files for o in _offences(f)]
    assert offences == []


def test_the_walk_finds_what_it_looks_for(tmp_path):
    """The walk is not vacuous: each forbidden form is found in a file outside the allowed ones."""
    bad = tmp_path / "probe.py"
    bad.write_text("import pickle, torch, numpy as np\n"
                   "torch.load('a', weights_only=False)\npickle.loads(b'')\nnp.load('a', allow_pickle=True)\n")
    assert len(_offences(bad, "diagnosis/probe.py")) == 4


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"{sys.executable} -c \"open({str(self.marker)!r}, 'w').write('ran')\"",))


def _config(tmp_path: Path) -> Path:
    p = tmp_path / "c.toml"
    p.write_text('rounds = 2\n[train]\nprogress = false\n')
    return p


def test_diagnose_checkpoint_that_calls_os_system_is_refused_in_one_line(tmp_path, capsys):
    marker = tmp_path / "marker"
    torch.save({"round": 1, "global_state": {}, "x": _Evil(marker)}, tmp_path / "evil.pt")
    code = cli.main(["diagnose", "--config", str(_config(tmp_path)), "--checkpoint", str(tmp_path / "evil.pt"),
                     "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not marker.exists()
    assert err == (f"bnfl diagnose: error: checkpoint {tmp_path / 'evil.pt'} is unreadable (it asks to run "
                   f"{os.system.__module__}.system, and a checkpoint never runs code)")


@pytest.mark.parametrize(("content", "why"), [
    (random.Random(0).randbytes(3000), "not a torch file: garbage or truncated bytes"),  # seeded: the same bytes every run
    (b"", "not a torch file: garbage or truncated bytes"),
])
def test_diagnose_garbage_checkpoint_says_garbage(tmp_path, capsys, content, why):
    (tmp_path / "junk.pt").write_bytes(content)
    code = cli.main(["diagnose", "--config", str(_config(tmp_path)), "--checkpoint", str(tmp_path / "junk.pt")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"bnfl diagnose: error: checkpoint {tmp_path / 'junk.pt'} is unreadable ({why})"


def test_diagnose_truncated_checkpoint_is_one_line(tmp_path, capsys):
    assert cli.main(["train", "--config", str(_config(tmp_path)), "--out", str(tmp_path / "run")]) == 0
    ck = tmp_path / "run" / "checkpoint.pt"
    (tmp_path / "cut.pt").write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    capsys.readouterr()
    code = cli.main(["diagnose", "--config", str(_config(tmp_path)), "--checkpoint", str(tmp_path / "cut.pt")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"bnfl diagnose: error: checkpoint {tmp_path / 'cut.pt'} is unreadable "
                                 f"(not a complete zip archive: truncated or corrupt)")


def test_diagnose_checkpoint_of_another_run_is_refused_naming_the_field(tmp_path, capsys):
    assert cli.main(["train", "--config", str(_config(tmp_path)), "--out", str(tmp_path / "run"),
                     "--method", "fedtan"]) == 0
    other = tmp_path / "seed7.toml"
    other.write_text('rounds = 2\nseed = 7\n[partition]\nkind = "iid"\n')
    capsys.readouterr()
    code = cli.main(["diagnose", "--config", str(other), "--checkpoint", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"bnfl diagnose: error: {tmp_path / 'run' / 'checkpoint.pt'} is of another run than the "
                          f"config: partition: ")
    assert "seed: 0 (checkpoint) vs 7 (this run)" in err and "pass the config the run was trained with" in err


def test_fedbn_split_pickle_that_calls_os_system_is_refused(tmp_path):
    from bnfl.data.fedbn_folders import fedbn_split

    marker = tmp_path / "marker"
    for part in ("train", "test"):
        with open(tmp_path / f"amazon_{part}.pkl", "wb") as f:
            pickle.dump(([_Evil(marker)], ["bike"]), f)
    with pytest.raises(ValueError, match="refused to load: the pickle asks for (posix|nt).system"):
        fedbn_split(tmp_path, "amazon", ["bike"])
    assert not marker.exists()


def test_fedbn_split_pickle_of_plain_lists_still_loads(tmp_path):
    from bnfl.data.fedbn_folders import fedbn_split

    (tmp_path / "amazon" / "bike").mkdir(parents=True)
    (tmp_path / "amazon" / "bike" / "a.jpg").write_bytes(b"")
    for part in ("train", "test"):
        with open(tmp_path / f"amazon_{part}.pkl", "wb") as f:
            pickle.dump((["amazon/bike/a.jpg"], ["bike"]), f)
    train, test = fedbn_split(tmp_path, "amazon", ["bike"])
    assert train == test == [(tmp_path / "amazon" / "bike" / "a.jpg", 0)]
