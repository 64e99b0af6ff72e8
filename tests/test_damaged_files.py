"""A damaged or hostile file is one line that names the file, the field and the fix (exit 2, no
traceback), as the CLI reads it: ``bnfl compare`` and ``bnfl reproduce --report-only`` on
``result.json``, ``bnfl plot`` on ``history.json``, ``bnfl train`` on its config and ``--seed``,
and a cross-silo ``.npz`` (:mod:`bnfl._input_checks`).

Before (bnfl at e5220bf): the first five cases ended in a traceback (``AttributeError: 'list'
object has no attribute 'items'``, ``TypeError: unsupported operand type(s) for +: 'int' and
'str'``, ...); a negative round was drawn without a word; the others printed a line naming
neither the file nor the fix ("Exceeds the limit (4300 digits) for integer string conversion ...
use sys.set_int_max_str_digits()", "Overflow when unpacking long long", "nested too deeply (a
config's tables ...)" for a history, "verdict must be one of ..., got ['pass']", numpy's
"Object arrays cannot be loaded when allow_pickle=False").
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bnfl import cli

FIGURES = Path(__file__).resolve().parents[1] / "figures"
ENTRY = "fedtan-fig4"
TINY = ('rounds = 1\n[model]\nname = "q_mlp1"\n[data]\nname = "digits"\nform = "flat"\n[partition]\n'
        'kind = "iid"\nnum_clients = 3\n[train]\nbatch_size = 8\nprogress = false\n')


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue().strip()


def _one_line(argv: list[str], *names: str) -> str:
    code, err = _main(argv)
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"bnfl {argv[0]}: error: "), err
    for name in names:
        assert name in err, (name, err)
    return err


def _result_folders(tmp_path: Path, text: str) -> tuple[Path, Path]:
    bad, good = tmp_path / "bad", tmp_path / "good"
    (bad / ENTRY).mkdir(parents=True)
    (good / ENTRY).mkdir(parents=True)
    shutil.copy(FIGURES / ENTRY / "result.json", good / ENTRY / "result.json")
    (bad / ENTRY / "result.json").write_text(text)
    return bad, good


def _with_verdict(verdict: object) -> str:
    d = json.loads((FIGURES / ENTRY / "result.json").read_text())
    d["claims"][0]["verdict"] = verdict
    return json.dumps(d)


RESULTS = {  # result.json text -> what the line must name besides the file
    "a list": ("[]", "a result is a JSON object"),
    "a verdict list": (_with_verdict(["pass"]), "claims[0].verdict"),
    "claims an object": ('{"id": "x", "claims": {"a": 1}}', "'claims'"),
    "a 5,000-digit integer": ('{"id": ' + "9" * 5000 + "}", "5000 digits"),
    "nesting 200,000 deep": ('{"id": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested too deeply"),
}


@pytest.mark.parametrize("case", list(RESULTS))
def test_bnfl_compare_names_a_damaged_result_file_and_the_fix(tmp_path: Path, case: str) -> None:
    text, field = RESULTS[case]
    bad, good = _result_folders(tmp_path, text)
    err = _one_line(["compare", str(bad), str(good)], str(bad / ENTRY / "result.json"), field)
    assert f"bnfl run {ENTRY}" in err and "set_int_max_str_digits" not in err


def test_report_only_names_a_result_file_that_holds_a_list(tmp_path: Path) -> None:
    bad, _ = _result_folders(tmp_path, "[1, 2]")
    _one_line(["reproduce", "--paper", "fedtan", "--report-only", "--out", str(bad)],
              str(bad / ENTRY / "result.json"), "a result is a JSON object")
    assert not (bad / "REPORT.md").exists()


HISTORIES = {  # history.json text -> the field the line must name
    "a string accuracy": ('{"meta": {}, "rows": [{"round": 1, "test_acc": "high"}]}', "rows[0].test_acc"),
    "a dict of rows": ('{"meta": {}, "rows": {"1": {"round": 1, "test_acc": 0.5}}}', "'rows'"),
    "a null row": ('{"meta": {}, "rows": [null]}', "rows[0]"),
    "a negative round": ('{"meta": {}, "rows": [{"round": -3, "test_acc": 0.5}]}', "rows[0].round"),
    "a boolean loss": ('{"meta": {}, "rows": [{"round": 1, "test_loss": true}]}', "rows[0].test_loss"),
    "one deep row": ('{"meta": {}, "rows": [' + "[" * 200_000 + "]" * 200_000 + "]}", "nested too deeply"),
    "a 5,000-digit round": ('{"meta": {}, "rows": [{"round": ' + "9" * 5000 + "}]}", "5000 digits"),
}


@pytest.mark.parametrize("case", list(HISTORIES))
def test_bnfl_plot_names_a_damaged_history_file_and_the_fix(tmp_path: Path, case: str) -> None:
    text, field = HISTORIES[case]
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.json").write_text(text)
    out = tmp_path / "fig.png"
    err = _one_line(["plot", str(run), "--out", str(out)], str(run / "history.json"), field, "--overwrite")
    assert "finished round" not in err and "config" not in err
    assert not out.exists()


def test_a_config_with_a_5000_digit_integer_names_the_file_not_python_limits(tmp_path: Path) -> None:
    cfg = tmp_path / "big.toml"
    cfg.write_text("rounds = " + "9" * 5000 + "\n")
    err = _one_line(["train", "--config", str(cfg), "--out", str(tmp_path / "o")], str(cfg), "5000 digits")
    assert "set_int_max_str_digits" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["flag", "file"])
def test_a_seed_too_large_for_the_generators_names_the_seed(tmp_path: Path, where: str) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(TINY if where == "flag" else f"seed = {2**70}\n{TINY}")
    argv = ["train", "--config", str(cfg), "--out", str(tmp_path / "o")] + (["--seed", str(2**70)] if where == "flag"
                                                                           else [])
    err = _one_line(argv, "seed", "below 2**32")
    assert "Overflow" not in err
    assert not (tmp_path / "o").exists()


def test_an_empty_config_says_every_field_takes_its_default(tmp_path: Path) -> None:
    from bnfl.train.config_schema import load_config

    cfg = tmp_path / "empty.toml"
    cfg.write_text("\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        load_config(cfg)
    assert len(err.getvalue().splitlines()) == 1 and str(cfg) in err.getvalue() and "default" in err.getvalue()


def test_a_silo_npz_with_an_object_array_names_the_file_and_the_array(tmp_path: Path) -> None:
    from bnfl.train.cross_silo import load_silo

    np.savez(tmp_path / "train.npz", x=np.array([[1.0], "a"], dtype=object), y=np.zeros(2))
    np.savez(tmp_path / "test.npz", x=np.zeros((2, 1)), y=np.zeros(2))
    with pytest.raises(ValueError) as info:
        load_silo(tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "train.npz") in msg and "'x'" in msg and "dtype=object" in msg and "allow_pickle" not in msg


# -- fuzz: result.json and history.json as the CLI reads them ----------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
                    | st.text(max_size=5), lambda kids: st.lists(kids, max_size=3)
                    | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=8)
ROW = st.fixed_dictionaries({}, optional={"round": JSON | st.integers(-3, 5), "test_acc": JSON | st.floats(0, 1),
                                          "test_loss": JSON, "train_loss": JSON, "bytes_total": JSON,
                                          "wall_time": JSON})
HISTORY = st.fixed_dictionaries({"meta": JSON, "rows": JSON | st.lists(ROW, max_size=3)})
RESULT = st.lists(JSON, max_size=2) | st.fixed_dictionaries({}, optional={"id": JSON, "claims": JSON | st.lists(
    st.fixed_dictionaries({}, optional={"verdict": JSON, "id": JSON, "statement": JSON, "interval": JSON}),
    max_size=2), "rows": JSON, "seeds": JSON, "profile": JSON})


def _no_traceback(argv: list[str]) -> None:
    code, err = _main(argv)
    assert code in (0, 1) or (code == 2 and len(err.splitlines()) == 1 and "error: " in err), err
    assert "Traceback" not in err, err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=HISTORY)
def test_fuzz_bnfl_plot_on_history_json_is_a_figure_or_one_line(tmp_path_factory, doc) -> None:
    run = tmp_path_factory.mktemp("h")
    (run / "history.json").write_text(json.dumps(doc))
    _no_traceback(["plot", str(run), "--out", str(run / "c.png")])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=RESULT)
def test_fuzz_bnfl_compare_on_result_json_is_an_answer_or_one_line(tmp_path_factory, doc) -> None:
    root = tmp_path_factory.mktemp("r")
    bad, good = _result_folders(root, json.dumps(doc))
    _no_traceback(["compare", str(bad), str(good)])
