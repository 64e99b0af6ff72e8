"""A user's own runs: history meta says what ran, `bnfl plot` / `bnfl.load_run(...).plot()` draw and
compare them, `bnfl evaluate` scores a run's checkpoint on new data (FedBN's two BN choices)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import bnfl
from bnfl import cli, fl
from bnfl.experiments.intervals import t_interval
from bnfl.runs import compare, find_runs, format_comparison, load_run, plot_runs

TINY = {"method": "fedavg+bn", "rounds": 3, "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
        "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 4},
        "train": {"local_steps": 1, "batch_size": 16, "progress": False}}


def _train(out: Path, **over) -> Path:
    fl.run({**TINY, **over, "out": str(out)})
    return out


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for s in (0, 1, 2):
        _train(root / "bn" / f"seed{s}", seed=s)
    _train(root / "tan", method="fedtan")
    return root


def test_history_meta_says_what_ran(seeds):
    meta = json.loads((seeds / "bn" / "seed1" / "history.json").read_text())["meta"]
    run = meta["run"]
    assert run["method"] == "fedavg+bn" and run["seed"] == 1 and run["model"] == {"name": "q_mlp_bn"}
    assert run["data"] == {"name": "digits", "form": "flat"} and run["partition"]["kind"] == "classes_per_client"
    assert run["engine"] == "simulation" and run["train"]["batch_size"] == 16
    m = meta["machine"]
    assert m["bnfl"] == bnfl.__version__ and m["python"] and m["torch"] and m["cpu"] and "git_commit" in m


def test_load_run_plot_and_band_is_the_reports_interval(seeds):
    runs = find_runs([seeds / "bn", seeds / "tan"])
    assert len(runs) == 4
    h = bnfl.load_run(seeds / "bn" / "seed0")
    assert isinstance(h, fl.History) and len(h) == 3
    fig = h.plot()
    assert [ax.get_xlabel() for ax in fig.axes] == ["round", "round"]
    fig = plot_runs(runs)
    band = fig.axes[0].collections[0]  # the seeds' band of fedavg+bn
    finals = [100 * r.rows[-1]["test_acc"] for r in runs[:3]]
    iv = t_interval(finals)
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(min(iv.low, *(
        t_interval([100 * r.rows[i]["test_acc"] for r in runs[:3]]).low for i in range(3))), abs=1e-9)
    assert len(fig.axes[0].collections) == 1  # one seed of fedtan: a line, no band
    rows = compare(runs)
    assert [r["run"] for r in rows] == ["fedavg+bn", "fedtan"] and rows[0]["seeds"] == [0, 1, 2]
    assert rows[0]["accuracy"] == pytest.approx(iv.estimate) and rows[0]["accuracy_low"] == pytest.approx(iv.low)
    assert rows[1]["accuracy_low"] is None and rows[1]["bytes"] > rows[0]["bytes"]
    text = format_comparison(rows)
    assert f"{iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}]" in text and "KiB" in text


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_bnfl_plot_writes_the_figure_and_prints_the_table(seeds, tmp_path, capsys, fmt):
    out = tmp_path / f"c.{fmt}"
    assert cli.main(["plot", str(seeds / "bn"), str(seeds / "tan"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fedavg+bn" in text and "fedtan" in text and f"wrote {out}" in text
    assert out.stat().st_size > 1000


def test_bnfl_plot_a_folder_without_a_run_is_one_line(tmp_path, capsys):
    assert cli.main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no run" in err and "--out folder" in err
    with pytest.raises(ValueError, match="format comes from its suffix"):
        cli.build_parser()  # the parser builds; a bad suffix is the command's error
        from bnfl.runs_cli import _plot

        _plot(cli.build_parser().parse_args(["plot", str(tmp_path), "--out", "x.jpg"]))


def test_load_run_of_a_history_cut_short(seeds, tmp_path):
    text = (seeds / "tan" / "history.json").read_text()
    (tmp_path / "history.json").write_text(text[: text.rindex("\n]}") - 40])  # the last row cut mid-way
    h = load_run(tmp_path)
    assert len(h) == 2 and h.meta["run"]["method"] == "fedtan"


@pytest.fixture(scope="module")
def fedbn(tmp_path_factory):
    out = tmp_path_factory.mktemp("fedbn") / "run"
    fl.run({"method": "fedbn", "rounds": 3, "model": {"name": "q_lenet"},
            "data": {"name": "digit_domains", "domains": ["clean", "contrast", "blur"]},
            "partition": {"kind": "by_domain", "num_clients": 3},
            "train": {"local_steps": 1, "local_unit": "epochs", "batch_size": 32, "lr": 0.05, "progress": False},
            "out": str(out)})
    return out


def test_evaluate_fedbn_on_an_unseen_domain_with_both_statistics(fedbn, capsys):
    from bnfl.train.evaluate_run import evaluate_run

    opts = {"domains": ["thin"]}
    own = evaluate_run(fedbn, data="digit_domains", data_options=opts, client_stats="own")
    glob = evaluate_run(fedbn, data="digit_domains", data_options=opts, client_stats="global")
    c0 = evaluate_run(fedbn, data="digit_domains", data_options=opts, client_stats="client:0")
    assert own["per_client_bn"] and own["samples"] == glob["samples"] > 0
    assert len({own["accuracy"], glob["accuracy"], c0["accuracy"]}) == 3  # three different BN layers
    assert all(0 <= r["accuracy"] <= 1 and math.isfinite(r["loss"]) for r in (own, glob, c0))
    assert cli.main(["evaluate", str(fedbn), "--data", "digit_domains", "--data-option", 'domains=["thin"]',
                     "--client-stats", "own", "global"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and "BN statistics own: accuracy" in lines[0] and "global" in lines[1]
    assert f"{100 * own['accuracy']:.2f}%" in lines[0]


def test_own_statistics_are_the_new_datas(fedbn):
    """'own' sets every BN layer's running statistics to its input's on the new training samples."""
    import torch

    from bnfl import models
    from bnfl.data import load
    from bnfl.diagnosis.measure import bn_inputs
    from bnfl.train.evaluate_run import recompute_bn_statistics

    split = load("digit_domains", domains=["thin"])
    torch.manual_seed(0)
    model = models.build_for("q_lenet", split.input_shape, norm="bn", num_classes=10)
    x = split.x_train[:200]
    recompute_bn_statistics(model, x)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m, h in zip(bns, bn_inputs(model, x), strict=True):
        flat = h.transpose(0, 1).reshape(h.shape[1], -1)  # (N, C, H, W) -> (C, N*H*W)
        assert torch.allclose(m.running_mean, flat.mean(1), atol=1e-5)
        assert torch.allclose(m.running_var, flat.var(1, correction=1), rtol=1e-4, atol=1e-6)
    assert not model.training


def test_evaluate_a_method_that_shares_bn(seeds, capsys):
    """FedAvg+BN keeps no BN layers per client: global is the server's model, own recomputes its
    statistics on the new data, client:K is refused."""
    from bnfl.train.evaluate_run import evaluate_run

    run = seeds / "bn" / "seed0"
    glob = evaluate_run(run, data="digits", client_stats="global")
    assert not glob["per_client_bn"]
    assert glob["accuracy"] == pytest.approx(load_run(run).rows[-1]["test_acc"])  # the run's own test score
    assert evaluate_run(run, data="digits", client_stats="own")["accuracy"] != glob["accuracy"]
    assert cli.main(["evaluate", str(run), "--data", "digits", "--client-stats", "client:0"]) == 2
    assert "fedavg+bn shares its BN layers: use own or global" in capsys.readouterr().err


def test_evaluate_bad_input_is_one_line(fedbn, tmp_path, capsys):
    assert cli.main(["evaluate", str(fedbn), "--data", "digit_domains", "--client-stats", "client:9"]) == 2
    assert "no BN layers of client 9" in capsys.readouterr().err
    assert cli.main(["evaluate", str(fedbn), "--data", "digit_domains", "--client-stats", "mine"]) == 2
    assert "own, global or client:K" in capsys.readouterr().err
    assert cli.main(["evaluate", str(tmp_path), "--data", "digits"]) == 2
    assert "holds no run" in capsys.readouterr().err


def test_docs_page_error_line_is_what_bnfl_plot_prints(capsys, monkeypatch):
    """docs/runs.md shows the one-line error of `bnfl plot examples`, run from the repository root."""
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    page = (root / "docs" / "runs.md").read_text(encoding="utf-8")
    assert cli.main(["plot", "examples"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"$ bnfl plot examples\n{err}\n" in page
    assert "bnfl.load_run(" in page and "runs.find_runs(" in page and "--client-stats own global" in page
