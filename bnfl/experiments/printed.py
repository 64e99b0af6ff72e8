"""Numbers as the papers print them: ``"91.53 ± 0.50"``, ``"1.02%"``, ``"6.2679"``.

Each paper's reported numbers are kept verbatim, as strings, in the paper's ``numbers``
module; these helpers read them and compare our values at the printed precision.
"""

from __future__ import annotations

import re

from bnfl.experiments.claims import Claim, within

#: One unit of the last digit the papers print (two decimals, in points): how far a printed mean may
#: lie from the mean of its printed (rounded) values, each off by up to half a unit, itself rounded.
PRINTED_PRECISION = 0.01

__all__ = ["PRINTED_PRECISION", "decimals", "matches_printed", "parse_mean_std", "percent", "printed_claim", "printed_table"]


def percent(text: str) -> float:
    """``"1.02%"`` -> 1.02; ``"0"`` -> 0.0."""
    return float(text.strip().rstrip("%"))


def parse_mean_std(text: str) -> tuple[float, float]:
    """``"91.53 ± 0.50"`` (any spacing) or ``"63.0 (1.6)"`` (FedBN's tables) -> ``(91.53, 0.50)``."""
    m = re.fullmatch(r"\s*([-\d.]+)\s*(?:±\s*([\d.]+)|\(\s*([\d.]+)\s*\))\s*", text)
    if m is None:
        raise ValueError(f"not a 'mean ± std' or 'mean (std)' string: {text!r}")
    return float(m.group(1)), float(m.group(2) or m.group(3))


def decimals(text: str) -> int:
    """Decimal places printed in ``text`` ("6.2679" -> 4, "75%" -> 0)."""
    t = text.strip().rstrip("%")
    return len(t.split(".")[1]) if "." in t else 0


def matches_printed(value: float, printed: str) -> bool:
    """Does ``value`` round to the printed number (at the printed precision)?"""
    dp = decimals(printed)
    return abs(round(value, dp) - percent(printed)) < 0.5 * 10**-dp + 1e-12


def printed_claim(name: str, statement: str, value: float, printed: str, *, detail: str = "",
                  kind: str = "reproduction") -> Claim:
    """Claim that ``value`` reproduces the number the paper printed: ``value`` rounded to the printed
    decimals is within half a unit of the last printed digit of ``printed`` (``"6.2679"``, ``"85.07%"``).

    Parameters
    ----------
    name, statement : str
        As :func:`bnfl.experiments.claims.within`.
    value : float
        Our number, unrounded.
    printed : str
        The paper's number as printed (a trailing ``%`` is allowed).
    detail, kind : str
        As :func:`bnfl.experiments.claims.within`.
    """
    dp = decimals(printed)
    return within(name, statement, round(value, dp), percent(printed), 0.5 * 10**-dp, detail=detail, kind=kind)


def printed_table(text: str, *, sep: str = "|") -> tuple[tuple[str, ...], ...]:
    """A table typed as the paper prints it, one row a line and cells split at ``sep``, as rows of
    verbatim cell strings (blank lines skipped, white space around a cell dropped, inside kept).

    Parameters
    ----------
    text : str
        ``"FedTAN | 91.26 ± 0.21 | 87.66 ± 0.43"``, one such line per row.
    sep : str, default ``"|"``
        The cell separator.

    Returns
    -------
    tuple of tuple of str
        ``(("FedTAN", "91.26 ± 0.21", "87.66 ± 0.43"), ...)``.

    Raises
    ------
    ValueError
        The rows do not all have the same number of cells (a separator missing or one too many).
    """
    rows = tuple(tuple(cell.strip() for cell in line.split(sep)) for line in text.splitlines() if line.strip())
    widths = sorted({len(r) for r in rows})
    if len(widths) > 1:
        raise ValueError(f"printed table rows have {widths} cells; give every row the same number of '{sep}'")
    return rows
