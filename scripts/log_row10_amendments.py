"""Write headline row 10's amendments (hbn-tab4 ``gains``, a count over FL solvers) into
figures/PROTOCOL-LOG.json, every number read from ``figures/hbn-tab4/result.json`` at the cited
commits (``git show``); nothing is typed by hand. Row 10 has no single interval: each side of its
amendments holds the per-solver items and the count the claim judges.

    python scripts/log_row10_amendments.py
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "figures" / "PROTOCOL-LOG.json"
ENTRY, CLAIM = "hbn-tab4", "gains"
WORDS = {"pass": "reproduced", "inconclusive": "undecided", "fail": "contradicted"}


def side(commit: str) -> dict:
    """The ``gains`` claim at ``commit`` as an amendment side with its items."""
    res = json.loads(subprocess.run(["git", "show", f"{commit}:figures/{ENTRY}/result.json"], cwd=ROOT, check=True,
                                    capture_output=True, text=True).stdout)
    (c,) = [c for c in res["claims"] if c["name"] == CLAIM]
    iv = c["interval"]
    items = []
    for name, it in iv["items"].items():
        word = ("reproduced" if name in iv["passing"] else "undecided" if name in iv["undecided"] else "contradicted")
        items.append({"claim": name, "verdict": word, "estimate": round(it["estimate"], 2), "low": round(it["low"], 2),
                      "high": round(it["high"], 2), "seeds": int(it["n"])})
    return {"commit": commit, "claim": CLAIM, "verdict": WORDS[c["verdict"]], "stored_verdict": c["verdict"],
            "count": f"{len(iv['passing'])} of {len(items)} solvers' intervals above 0 (needs {iv['need']})",
            "seeds": max(i["seeds"] for i in items), "items": items}


def main() -> int:
    log = json.loads(LOG.read_text())
    ids = {a["id"] for a in log["amendment"]} | {a["id"] for a in log.get("entry_amendment", [])}
    if "A42" in ids:
        raise SystemExit("row 10's amendments are logged already (A42)")
    log["amendment"] += [
        {"id": "A42", "date": "2026-11-28", "commits": ["9365753", "d431886"], "row": 10, "entry": ENTRY,
         "claim": CLAIM,
         "what": ("The entry moved to the stand-in the BN-only calibration chose (Q-GAUSS(10)/Q-MLP-BN), every solver "
                  "and its +HBN twin at a fair rate, 5 seeds, with a BN-damage precondition claim (9365753, issue 36); "
                  "its result was first recomputed in d431886 (9365753 stores de45014's result unchanged)."),
         "why": ("Issue 36 put the headline entries on stand-ins chosen by the BN-only calibration, with fair rates and "
                 "5 seeds; at 3 seeds three of four solvers were undecided. The move came with rows 8, 9 and 11's, "
                 "after this row's result had been seen."),
         "after_seeing": True, "before": side("de45014"), "after": side("d431886")},
        {"id": "A43", "date": "2026-11-29", "commits": ["4003b76", "3216d1a"], "row": 10, "entry": ENTRY,
         "claim": CLAIM,
         "what": ("The tuning rule's edge rule (4003b76): a best rate at the grid's edge grows the grid past it by up "
                  "to 2 rates, the same for every tuned method; FedProx's and FedAdam's items moved (3216d1a)."),
         "why": ("A rate chosen at the grid's edge may not be the method's best; one rule for all 21 tuning entries, "
                 "adopted after this row's tuned result had been seen. No verdict changed."),
         "after_seeing": True, "before": side("d431886"), "after": side("3216d1a")},
    ]
    log.pop("not_yet_logged", None)  # row 10 was the last row it named
    LOG.write_text(json.dumps(log, indent=1, ensure_ascii=False) + "\n")
    print("logged A42, A43")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
