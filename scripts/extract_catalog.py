"""Snapshot the reproduction catalog's ids and titles into ``docs/_data/catalog.json``.

The docs' "not yet reproduced" lists need every catalog id, but ``CATALOG.md`` lives beside the
papers, outside the repository. Run this after the catalog changes::

    .venv/bin/python scripts/extract_catalog.py /path/to/papers/CATALOG.md

Each entry of the catalog starts with a line ``**<id>**: <title>``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from bnfl.experiments.vocabulary import PAPER_NAMES

ENTRY = re.compile(
    r"^\*\*([a-z]+-(?:fig|tab)[0-9A-Za-z]+)(?:\s*…\s*([a-z]+-tab\d+))?\*\*\s*(?:\(([^)]*)\))?:?\s*(.*)$"
)


def extract(text: str) -> list[dict[str, str]]:
    """Return ``[{"id", "paper", "title"}, ...]`` in catalog order."""
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        m = ENTRY.match(line.strip())
        if not m:
            continue
        first, last = m.group(1), m.group(2)
        rest, aside = (m.group(4) or "").strip(), (m.group(3) or "").strip()
        title = rest if rest and not rest.startswith(".") else aside
        title = re.sub(r"\s+", " ", title.replace("**", "")).rstrip(" .:")
        ids = [first]
        if last:  # a block such as "fedbn-tab4 … fedbn-tab8"
            stem, a = first.rsplit("tab", 1)
            b = last.rsplit("tab", 1)[1]
            ids = [f"{stem}tab{k}" for k in range(int(a), int(b) + 1)]
        for entry_id in ids:
            entries.append({"id": entry_id, "paper": PAPER_NAMES[entry_id.split("-")[0]], "title": title})
    return entries


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    entries = extract(Path(argv[1]).read_text(encoding="utf-8"))
    out = Path(__file__).resolve().parents[1] / "docs" / "_data" / "catalog.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(entries)} catalog entries -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
