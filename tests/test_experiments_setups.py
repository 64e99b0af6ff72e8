"""The toolkit every paper's setups module builds on (bnfl.experiments.setups), and the papers'
use of it: helpers declared once, imports at module level."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bnfl.experiments import setups as K
from bnfl.experiments.augmentation import QUICK_NOTE
from bnfl.methods import METHODS

PAPERS = Path(K.__file__).resolve().parent / "papers"
#: The helpers the toolkit declares (bnfl.experiments.setups; the per-seed claims of .evidence and
#: .claims; the figure helpers of .drawing): no paper module declares them again.
SHARED = {"spec", "acc_noise", "method_row", "method_label", "seeds", "smoke_on_bases", "profile_set", "accs",
          "Seeds", "finals", "per_seed", "rounds_to_each", "finite_or", "mean_of", "paired_at_least", "count_of",
          "rounded", "per_seed_claim", "curve_panels", "bars_vs_paper", "ours_beside_paper", "drawn_by"}


def test_label_prefers_the_papers_row_name_then_bnfls_label_then_the_key():
    rows = {"FedAvg": "fedavg+bn", "FedBN": "fedbn"}
    assert K.label("fedavg+bn", rows) == "FedAvg"
    assert K.label("fedprox", rows) == METHODS["fedprox"].label
    assert K.label("fedprox") == METHODS["fedprox"].label
    assert K.label("not-a-method", rows) == "not-a-method"


def test_papers_keep_their_own_row_names():
    from bnfl.experiments.papers.fedbn import setups as fedbn
    from bnfl.experiments.papers.fedtan import setups as fedtan
    from bnfl.experiments.papers.fixbn import setups as fixbn
    from bnfl.experiments.papers.hbn import setups as hbn

    assert fedbn.label("fedavg+bn") == "FedAvg" and fedbn.label("singlenet") == "SingleSet"
    assert hbn.label("fedavg+bn") == "BN" and hbn.label("fedavg+gn") == "GN"
    assert fixbn.label("fedavg+bn") == fedtan.method_label("fedavg+bn") == METHODS["fedavg+bn"].label


def test_seeds_and_spec():
    assert K.seeds(quick=3, paper=5) == {"smoke": 1, "quick": 3, "paper": 5}
    a, b = {"train": {"lr": 0.1, "batch_size": 8}}, {"train": {"lr": 0.5}, "rounds": 2}
    assert K.spec(a, b) == {"train": {"lr": 0.5, "batch_size": 8}, "rounds": 2}
    assert a == {"train": {"lr": 0.1, "batch_size": 8}}  # parts are not changed


def test_smoke_on_bases_merges_only_base_keys():
    quick = {"base": {"rounds": 300, "train": {"lr": 0.1}}, "base_b": {"rounds": 50}, "other": {"rounds": 9}}
    out = K.smoke_on_bases(quick, {"rounds": 2})
    assert out == {"base": {"rounds": 2, "train": {"lr": 0.1}}, "base_b": {"rounds": 2}, "other": {"rounds": 9}}
    assert quick["base"]["rounds"] == 300


@pytest.mark.parametrize("declare_quick", [True, False])
def test_profile_set(declare_quick):
    quick = {"base": {"rounds": 3}}
    paper = {"base": {"train": {"augment": "cifar"}}}
    out = K.profile_set({"base": {"rounds": 1}, "deviations": ["x"]}, quick, paper, note="smoke note",
                        paper_deviations=["paper note"], declare_quick=declare_quick)
    assert set(out) == {"smoke", "quick", "paper"}
    assert out["smoke"] == {"base": {"rounds": 1}, "deviations": ["smoke note"]}
    assert out["paper"]["deviations"] == ["paper note"] and "deviations" not in paper
    assert (QUICK_NOTE in out["quick"].get("deviations", [])) is declare_quick
    kept = K.profile_set({}, quick, {"deviations": ["own"]}, note="n", paper_deviations=["default"])
    assert kept["paper"]["deviations"] == ["own"]


def _modules():
    return sorted(p for p in PAPERS.rglob("*.py"))


def test_no_paper_module_declares_a_shared_helper_again():
    """``spec``, ``acc_noise``, ``method_row`` ... are the toolkit's; a paper module that needs its
    own variant names it for what differs (fedbn's and hbn's ``label`` keep their row names)."""
    again = []
    for path in _modules():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in SHARED:
                again.append(f"{path.relative_to(PAPERS)}: def {node.name}")
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                         if isinstance(t, ast.Name)]
                keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
                if keys == {"smoke", "quick", "paper"} and all(isinstance(v, ast.Constant) for v in node.value.values):
                    again.append(f"{path.relative_to(PAPERS)}: {names} = a seeds dict (use setups.seeds)")
    assert not again, "declared again in papers/: " + "; ".join(again)


def test_paper_modules_import_at_module_level():
    """A function-level import in papers/ says why (a comment with "function-level" on the line
    above it); everything else is imported once at the top of the module."""
    bare = []
    for path in _modules():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for st in ast.walk(node):
                if isinstance(st, (ast.Import, ast.ImportFrom)) and "function-level" not in lines[st.lineno - 2]:
                    bare.append(f"{path.relative_to(PAPERS)}:{st.lineno}: {lines[st.lineno - 1].strip()}")
    assert not bare, "function-level imports without a reason:\n" + "\n".join(bare)
