"""Issue 49: no module of bnfl is longer than 500 lines; a longer one is split by topic (the
batched engine's step, the norm layers' batched registry and weight-standardised convolutions,
the server-step check, FedTAN's panel layouts, FedBN's unequal sizes, the dashboard's titles,
FixBN's other fixes, HBN's architectures)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "bnfl"
MAX_LINES = 500


def test_no_bnfl_file_is_over_500_lines():
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 100
    long = {str(f.relative_to(ROOT.parent)): n for f in files
            if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
