"""The CPU side of the GPU check (scripts/gpu_check.sh): the script parses, its benchmark runs in its
tiny form, and the paper-profile plans it budgets from enumerate an entry's runs without training."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_script_parses():
    script = ROOT / "scripts" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "tests/test_gpu.py -m gpu" in text and "benchmarks/bench_gpu.py" in text
    assert 'OUT="${OUT:-$PWD/gpu-check-out}"' in text


def test_bench_gpu_tiny_runs_on_the_cpu(tmp_path):
    from bench_gpu import main

    assert main(["--tiny", "--device", "cpu", "--out", str(tmp_path), "--entries", "fixbn-tab2,fedtan-tab3"]) == 0
    md = (tmp_path / "bench_gpu.md").read_text()
    assert "TINY" in md and "| fedtan round, batched |" in md and "plain PyTorch loop, union batch 8" in md
    got = json.loads((tmp_path / "bench_gpu.json").read_text())
    rows = {r["what"]: r for r in got["resnet20"]["rows"]}
    assert len(rows) == 4 and all(r["images_per_s"] > 0 and r["efficiency"] > 0 for r in rows.values())
    entries = {e["id"]: e for e in got["budget"]["entries"]}
    assert list(entries) == ["fixbn-tab2"]  # fedtan-tab3 trains nothing (an exact table)
    assert entries["fixbn-tab2"]["runs"] == 9 and entries["fixbn-tab2"]["complete"] and entries["fixbn-tab2"]["hours"] > 0
    # stacked: FedAvg+BN and FedTAN at every depth (eager on the CPU), priced with stacking
    stacked = got["stacked"]
    assert {(r["method"], r["depth"], r["graphs"]) for r in stacked["rows"]} == {
        (m, d, False) for m in ("fedavg+bn", "fedtan") for d in (1, 2)}
    assert all(r["images_per_s"] > 0 and r["graph_error"] is None for r in stacked["rows"])
    assert set(stacked["plain_at_depth"]) == {"1", "2"} and stacked["flops_per_image"] > 0
    assert [r["option"] for r in got["options"]] == ["none", "channels_last", "tf32", "bf16", "graphs+all"]
    assert got["options"][0]["max_loss_diff"] == 0 and got["options"][2]["max_loss_diff"] == 0  # TF32: CUDA only
    e = entries["fixbn-tab2"]
    assert 0 < e["stacked_hours"] and e["depths"] and "| hours, stacked |" in md
    assert "(c) S runs stacked" in md and "(d) The options" in md


def test_stacked_pricing_interpolates_in_log_depth():
    from paper_plan import interpolate

    pts = {1: 0.5, 5: 1.0, 25: 2.0}
    assert interpolate(pts, 1) == 0.5 and interpolate(pts, 25) == 2.0 and interpolate(pts, 100) == 2.0
    assert interpolate(pts, 5) == pytest.approx(1.0)
    assert interpolate(pts, 3) == pytest.approx(0.5 + 0.5 * (math.log(3) / math.log(5)))


def test_paper_plan_counts_an_entrys_runs_without_training():
    from paper_plan import paper_plan, run_work

    plan = paper_plan("fixbn-tab2")  # 3 methods x 3 seeds at the paper profile
    assert plan.complete and plan.seeds == 3 and len(plan.specs) == 9
    assert sorted({s["seed"] for s in plan.specs}) == [0, 1, 2]
    spec = plan.specs[0]  # ImageNet (stored at 224x224), 100 clients, 10 a round, 2 local epochs of B = 20
    assert spec["data"]["name"] == "imagenet" and spec["train"]["local_unit"] == "epochs"
    w = run_work(spec)
    assert w.shape == (3, 224, 224) and w.classes == 1000 and w.batch == 20 and w.union == 10 * 20
    assert w.images == pytest.approx(spec["rounds"] * 10 * 2 * 1_281_167 / 100)
    assert w.eval_images == (spec["rounds"] // spec["train"]["eval_every"]) * 50_000
    assert paper_plan("fedtan-tab3").specs == []  # an exact entry: no training run


def test_every_data_set_has_a_size_row_or_is_named_without_one():
    """The GPU benchmark's plan sizes each run by its data set (benchmarks/paper_plan.DATA); a data
    set registered without a row stopped it twice on the GPU (digit_domains, then mnist5k)."""
    from paper_plan import DATA, NO_SIZE_ROW  # benchmarks/ is on sys.path (above)

    from bnfl.data import DATASETS

    assert not set(DATASETS) - set(DATA) - NO_SIZE_ROW, "add a size row to paper_plan.DATA or name it in NO_SIZE_ROW"


def test_a_stack_group_is_priced_from_its_plain_rates_and_efficiencies(capsys):
    from paper_plan import RunWork, main, price_group

    w = RunWork(model="m", model_options=(), shape=(3,), classes=2, batch=4, union=8, images=3600.0 * 100,
                eval_images=3 * 3600.0 * 10, fedtan=False)
    one, stacked = price_group([w, w], plain=100.0, plain_stacked=400.0, depth=2, efficiency={"fedavg+bn": 0.5},
                               stacked_efficiency={"fedavg+bn": {1: 0.5, 4: 0.25}})
    # one after another: 2 x (100 h / 0.5 + 0.1 h); stacked: 2 x (100 h / (4 x 0.375) + 0.1 h)
    assert one == pytest.approx(2 * (2.0 + 0.1)) and stacked == pytest.approx(2 * (1 / 1.5 + 0.1))
    assert main(["--entries", "fixbn-tab2,fedtan-tab3"]) == 0
    out = capsys.readouterr().out
    assert "| fixbn-tab2 | 9 |" in out and "fedtan-tab3" not in out
