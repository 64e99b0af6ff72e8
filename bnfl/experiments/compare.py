"""``bnfl compare A B``: did my run agree with yours?

Two results folders (``<folder>/<id>/result.json``, e.g. a fresh ``make run`` against the committed
``figures/``) are compared claim by claim, for the entries and claims both hold.

**Method.** For a claim that stores a 95% interval in both folders (its estimate, standard error
``se`` and seed count ``n``), the difference of the estimates ``d = est_A - est_B`` is compared with
its combined interval ``d +- t_{0.975, df} sqrt(se_A^2 + se_B^2)``, ``df`` by Welch-Satterthwaite
from the two seed counts: the two runs agree when that interval contains 0. The combination treats
the two runs as independent; runs of the same seeds on two machines are strongly correlated, so the
interval is wide (conservative): a difference beyond it is not rounding noise.

**Verdicts.** Each claim's stored verdict (pass / fail / inconclusive) and, where it stores an
interval, its verdict word (:mod:`bnfl.experiments.verdicts`) are compared. A verdict that differs
is *borderline* when the estimates agree within their combined interval (the claim sits near its
threshold and rounding moved it across), *not borderline* when they differ beyond it.

A claim without an interval in either folder is compared by its measured number (equal or not) and
its verdict; the folders' machines (``Result.machine``) are printed first.

**Exit code.** 0 when every shared claim agrees (no estimate beyond its combined interval, no
verdict differs); 1 when some claim does not; 2 when a folder is missing or holds no results.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnfl.experiments._result_file import read_result
from bnfl.experiments.core import Result
from bnfl.experiments.dashboard import entry_order
from bnfl.experiments.verdicts import judge_claim_record
from bnfl.intervals import t_quantile

__all__ = ["ClaimDiff", "compare_folders", "compare_results", "load_folder", "main", "register", "summary_line"]


def load_folder(folder: str | Path) -> dict[str, Result]:
    """``{entry id: Result}`` of every ``<folder>/<id>/result.json`` (one clear error when there is none)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder; give a results folder such as figures/ (it holds "
                                "<id>/result.json)")
    out: dict[str, Result] = {}
    for path in sorted(root.glob("*/result.json")):
        try:
            out[path.parent.name] = read_result(path)  # a damaged file: one line naming it and the field
        except OSError as err:
            raise ValueError(f"{path} is not a readable result ({err}); remove it or rerun that entry") from err
    if not out:
        raise ValueError(f"{folder} holds no <id>/result.json; give the --out folder of a bnfl reproduce run")
    return out


@dataclass(frozen=True)
class ClaimDiff:
    """One claim in both folders.

    Attributes
    ----------
    entry, claim : str
    a, b : float or None
        The two estimates (the interval's estimate, else the measured number).
    diff : float or None
        ``a - b``.
    half : float or None
        Half width of the combined 95% interval of ``diff`` (``None`` without intervals in both).
    agree : bool
        ``|diff| <= half`` (with intervals), else the measured numbers are equal.
    verdict_a, verdict_b : str
        The stored verdicts, with the verdict word in brackets where an interval is stored.
    borderline : bool or None
        For a differing verdict: the estimates agree within their interval (``None`` without one).
    """

    entry: str
    claim: str
    a: float | None
    b: float | None
    diff: float | None
    half: float | None
    agree: bool
    verdict_a: str
    verdict_b: str
    borderline: bool | None

    @property
    def verdict_differs(self) -> bool:
        return self.verdict_a != self.verdict_b


def _word(claim: Any) -> str:
    iv = getattr(claim, "interval", None) or {}
    if iv.get("low") is None:
        return claim.verdict
    try:
        return f"{claim.verdict} ({judge_claim_record(iv).word})"
    except (ValueError, KeyError):
        return claim.verdict


def _combined(ia: Mapping[str, Any], ib: Mapping[str, Any]) -> float | None:
    """``t_{0.975, df} sqrt(se_a^2 + se_b^2)`` (Welch-Satterthwaite ``df``), or None."""
    try:
        sa, sb = float(ia["se"]), float(ib["se"])
        na, nb = int(ia["n"]), int(ib["n"])
    except (KeyError, TypeError, ValueError):
        return None
    if na < 2 or nb < 2 or not (math.isfinite(sa) and math.isfinite(sb)):
        return None
    var = sa**2 + sb**2
    if var == 0.0:
        return 0.0
    df = var**2 / (sa**4 / (na - 1) + sb**4 / (nb - 1))
    level = float(ia.get("level", 0.95))
    return t_quantile((1.0 + level) / 2.0, df) * math.sqrt(var)


def compare_results(a: Mapping[str, Result], b: Mapping[str, Result]) -> list[ClaimDiff]:
    """Every claim of an entry both ``a`` and ``b`` hold, in entry order (see the module docstring)."""
    out: list[ClaimDiff] = []
    for eid in sorted(set(a) & set(b), key=entry_order):
        claims_b = {c.name: c for c in b[eid].claims}
        for ca in a[eid].claims:
            cb = claims_b.get(ca.name)
            if cb is None:
                continue
            ia, ib = getattr(ca, "interval", None) or {}, getattr(cb, "interval", None) or {}
            if ia.get("low") is not None and ib.get("low") is not None:
                va, vb = _word(ca), _word(cb)
                x, y = float(ia["estimate"]), float(ib["estimate"])
                half = _combined(ia, ib)
                diff = x - y
                agree = half is not None and abs(diff) <= half
                out.append(ClaimDiff(eid, ca.name, x, y, diff, half, agree, va, vb,
                                     (agree if va != vb else None) if half is not None else None))
                continue
            # one side without an interval (a diverged run stores none): its verdict has no word, so
            # the stored verdicts are compared as they are, not "pass" against "pass (reproduced)"
            va, vb = ca.verdict, cb.verdict
            x, y = ca.measured, cb.measured
            same = x == y or (x is not None and y is not None and math.isclose(x, y, rel_tol=0, abs_tol=1e-12))
            diff = None if x is None or y is None else float(x) - float(y)
            out.append(ClaimDiff(eid, ca.name, x, y, diff, None, bool(same), va, vb, None))
    return out


def summary_line(diffs: list[ClaimDiff], a: Mapping[str, Result], b: Mapping[str, Result]) -> str:
    """The one-line summary ``bnfl compare`` ends with."""
    beyond = [d for d in diffs if not d.agree]
    flips = [d for d in diffs if d.verdict_differs]
    border = sum(d.borderline is True for d in flips)
    loose = sum(d.borderline is None for d in flips)
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    text = (f"{len(diffs)} claims in {len(set(a) & set(b))} shared entries: {len(diffs) - len(beyond)} agree, "
            f"{len(beyond)} differ beyond their combined 95% interval (or, without one, in the number); "
            f"{len(flips)} verdicts differ ({border} borderline, {len(flips) - border - loose} not"
            + (f", {loose} without an interval" if loose else "") + ")")
    if only_a or only_b:
        text += f"; entries only in A: {len(only_a)}, only in B: {len(only_b)}"
    return text + "."


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _machines(results: Mapping[str, Result]) -> str:
    seen: dict[str, int] = {}
    for r in results.values():
        m = r.machine or {}
        key = (", ".join(f"{m[k]}" for k in ("cpu", "torch_cpu_capability", "python", "torch") if k in m)
               or "not recorded")
        seen[key] = seen.get(key, 0) + 1
    return "; ".join(f"{k} ({n})" for k, n in seen.items())


def compare_folders(folder_a: str | Path, folder_b: str | Path, *, show_all: bool = False,
                    stream: Any = None) -> int:
    """Print the comparison of two results folders; return the exit code (module docstring)."""
    stream = stream or sys.stdout
    a, b = load_folder(folder_a), load_folder(folder_b)
    diffs = compare_results(a, b)
    print(f"A: {folder_a} ({len(a)} entries; machine: {_machines(a)})", file=stream)
    print(f"B: {folder_b} ({len(b)} entries; machine: {_machines(b)})", file=stream)
    print("method: d = est_A - est_B against t_0.975(Welch df) * sqrt(se_A^2 + se_B^2) from the stored intervals "
          "and seeds (runs taken as independent: conservative)", file=stream)
    shown = diffs if show_all else [d for d in diffs if not d.agree or d.verdict_differs]
    for d in shown:
        within = ("no interval" if d.half is None else
                  f"{'within' if d.agree else 'BEYOND'} ±{d.half:.2f}")
        line = (f"{d.entry} | {d.claim}: A {_fmt(d.a)} B {_fmt(d.b)} d {_fmt(d.diff)} ({within})")
        if d.verdict_differs:
            tag = {True: "borderline", False: "not borderline", None: "no interval"}[d.borderline]
            line += f"; verdict {d.verdict_a} -> {d.verdict_b} ({tag})"
        print(line, file=stream)
    print(summary_line(diffs, a, b), file=stream)
    return 0 if all(d.agree and not d.verdict_differs for d in diffs) else 1


def main(args: argparse.Namespace) -> int:
    try:
        return compare_folders(args.a, args.b, show_all=args.all)
    except (FileNotFoundError, ValueError) as err:
        print(f"bnfl compare: error: {err}", file=sys.stderr)
        return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare`` to the ``bnfl`` command line."""
    p = subparsers.add_parser(
        "compare", help="compare two results folders claim by claim (did my run agree with yours?)",
        description="Per claim: the difference of the two estimates against their combined 95% interval, "
                    "and every verdict that differs (borderline when the estimates agree). Exit code: 0 all "
                    "agree, 1 some claim differs, 2 a folder is missing or empty.")
    p.add_argument("a", help="a results folder (e.g. the --out of your bnfl reproduce)")
    p.add_argument("b", help="the results folder to compare with (e.g. figures)")
    p.add_argument("--all", action="store_true", help="list every shared claim, not only those that differ")
    p.set_defaults(func=main)
