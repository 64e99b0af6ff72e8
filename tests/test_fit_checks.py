"""A run that cannot fit is refused before anything is allocated, and a batch larger than a
client is said once (bnfl._fit_checks).

Before (bnfl at e5220bf): an MLP of 10^12 parameters ended in the CPU allocator's traceback
("DefaultCPUAllocator: can't allocate memory"), and ``--batch-size 100000`` on clients of 278
samples trained without a word.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pytest
from torch import nn

from bnfl import _fit_checks, cli, fl

TINY = {"method": "fedavg+bn", "rounds": 1, "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
        "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 4},
        "train": {"local_steps": 1, "batch_size": 16, "progress": False}}


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def test_a_model_too_large_for_memory_is_refused_up_front_with_the_figure(tmp_path: Path) -> None:
    cfg = tmp_path / "big.toml"
    cfg.write_text('method = "fedavg+bn"\nrounds = 1\n[model]\nname = "mlp"\nhidden = [1000000, 1000000]\n'
                   '[data]\nname = "digits"\nform = "flat"\n')
    code, _, err = _main(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "mlp needs at least 8000.6 GB" in err and "1,000,080,000,010 parameters" in err
    assert "GB is free on cpu" in err and "make the model smaller" in err


def test_the_estimate_is_a_lower_bound_and_a_model_that_fits_is_not_refused(monkeypatch) -> None:
    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(64, 30), nn.BatchNorm1d(30), nn.Linear(30, 10))

    need, n = _fit_checks.need_bytes(build, (64,), 16)
    assert n == 64 * 30 + 30 + 2 * 30 + 30 * 10 + 10
    assert need == 2 * 4 * n + 16 * 64 * 4  # weights, their gradients, one float32 batch
    monkeypatch.setattr(_fit_checks, "available_bytes", lambda device: need)
    _fit_checks.refuse_oversized("net", build, (64,), 16, "cpu")  # exactly fits: no refusal
    monkeypatch.setattr(_fit_checks, "available_bytes", lambda device: need - 1)
    with pytest.raises(ValueError, match=r"net needs at least 0\.0 GB .* lower --batch-size"):
        _fit_checks.refuse_oversized("net", build, (64,), 16, "cpu")
    assert _fit_checks.available_bytes("cpu") > 0 and math.isfinite(_fit_checks.available_bytes("cpu"))


def test_a_batch_larger_than_every_client_is_one_warning_line_under_bnfl_train(tmp_path: Path, capsys) -> None:
    code, out, err = _main(["train", "--method", "fedavg+bn", "--rounds", "1", "--batch-size", "100000",
                            "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 0 and out.startswith("fedavg+bn: 1 rounds")
    lines = [line for line in err.splitlines() if "batch size" in line]
    assert lines == [line for line in err.splitlines() if line.startswith("bnfl: warning:")] and len(lines) == 1
    assert "batch size 100000 is larger than every client's training samples (smallest 278)" in lines[0]
    fl.run({**TINY, "train": {**TINY["train"], "batch_size": 100000}})  # Python (experiments, notebooks): silent
    assert "warning" not in capsys.readouterr().err
