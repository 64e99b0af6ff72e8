"""Titles and whys as a reader sees them: a catalog title without its notes about the source text
(:func:`split_note`), the stand-in data an entry's quick profile trains on (:func:`data_names`,
:func:`stand_ins_of`, :func:`stand_in_title`), and numbered checks' whys as short lines
(:func:`why_lines`). Read by the dashboard (:mod:`bnfl.experiments.dashboard`), the notebooks and
the docs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from bnfl.display import round_numbers
from bnfl.experiments.headlines import DATA_STAND_INS

__all__ = ["data_names", "split_note", "stand_in_title", "stand_ins_of", "why_lines"]

#: A clause of a catalog title that speaks about the source text rather than the figure (a
#: conversion artifact, a typo): kept out of titles and headings, shown as a note beside them.
_SOURCE_NOTE = re.compile(r"\b(in the (?:text|pdf|source)|conversion artifact|artefact|typo|misprint|sic)\b", re.I)


def _clauses(text: str, sep: str = ";") -> list[str]:
    """``text`` split at ``sep`` outside brackets (``"a (b; c); d"`` -> ``["a (b; c)", "d"]``)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth <= 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in [*parts, cur] if p.strip()]


def split_note(title: str) -> tuple[str, list[str]]:
    """A catalog title without its notes about the source text, and those notes.

    ``'(a) against the coefficient (B = 16; "16161616" in the text is a conversion artifact)'``
    -> ``("(a) against the coefficient (B = 16)", ['"16161616" in the text is a conversion
    artifact'])``: a bracketed group's clauses that speak about the text (:data:`_SOURCE_NOTE`) leave
    the title; a group left empty goes with them.
    """
    notes: list[str] = []

    def group(m: re.Match[str]) -> str:
        keep = []
        for clause in _clauses(m.group(1)):
            (notes if _SOURCE_NOTE.search(clause) else keep).append(clause)
        return f" ({'; '.join(keep)})" if keep else ""

    clean = re.sub(r"\s*\(([^()]*)\)", group, str(title))
    return " ".join(clean.split()), notes


def data_names(config: Any) -> list[str]:
    """Names of the data sets a configuration trains on (every ``{"data": {"name": ...}}``), in order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            data = node.get("data")
            if isinstance(data, Mapping) and isinstance(data.get("name"), str) and data["name"] not in found:
                found.append(data["name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)

    walk(config)
    return found


def stand_ins_of(entry: Any) -> list[str]:
    """The stand-in data sets (:data:`~bnfl.experiments.headlines.DATA_STAND_INS` names) that an
    entry's quick profile trains on in place of the paper's data: none for an entry that trains
    nothing, for the benchmark (no paper) and for a data set the paper profile reads too; a quick
    data set with no declared stand-in is named as it is."""
    if getattr(entry, "kind", "training") != "training" or getattr(entry, "paper", "") == "bench":
        return []
    paper = set(data_names(entry.config("paper")))
    return [DATA_STAND_INS.get(n, n) for n in data_names(entry.config("quick")) if n not in paper]


def stand_in_title(title: str, stand_ins: Sequence[str]) -> str:
    """``title`` naming the quick profile's stand-in data, where there is some:
    ``"Accuracy by batch size (quick profile on stand-in data: Q-DIG)"``."""
    if not stand_ins:
        return title
    return f"{title} (quick profile on stand-in data: {', '.join(dict.fromkeys(stand_ins))})"


def _numbers(ns: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    out, start = [], None
    for i, n in enumerate(ns):
        start = n if start is None else start
        if i + 1 == len(ns) or ns[i + 1] != n + 1:
            out.append(str(n) if n == start else f"{start}-{n}" if n > start + 1 else f"{start}, {n}")
            start = None
    return ", ".join(out)


def why_lines(whys: Sequence[str | None], *, digits: int = 3) -> list[str]:
    """The whys of numbered checks (1, 2, ...) as short lines to list under their table.

    A why is split into its clauses (at ``;`` outside brackets); a clause that two or more checks
    share is said once, on a line naming those checks (``"checks 1-8: one seed"``), and each check
    keeps the clauses that are its own (``"1. measured 9.17 misses the threshold 7.94 by 1.22"``).
    Long decimals are rounded (:func:`round_numbers`); a check without a why gets no line.
    """
    split = {i: _clauses(" ".join(round_numbers(w, digits=digits).split())) for i, w in enumerate(whys, 1) if w}
    seen: dict[str, list[int]] = {}
    for i, clauses in split.items():
        for c in dict.fromkeys(clauses):
            seen.setdefault(c, []).append(i)
    shared = {c for c, ns in seen.items() if len(ns) > 1}
    lines = [f"{i}. " + "; ".join(own) for i, clauses in split.items()
             if (own := [c for c in clauses if c not in shared])]
    groups: dict[tuple[int, ...], list[str]] = {}
    for c in seen:
        if c in shared:
            groups.setdefault(tuple(seen[c]), []).append(c)
    lines += [f"{'checks' if len(ns) > 1 else 'check'} {_numbers(ns)}: " + "; ".join(cs) for ns, cs in groups.items()]
    return lines
