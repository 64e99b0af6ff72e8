"""The :class:`Claim` record, shared by :mod:`bnfl.experiments.claims` (margin against noise) and
:mod:`bnfl.experiments.interval_claims` (interval over seeds)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Verdicts a claim can carry. ``info`` is a number the catalog asks to report but not assert;
#: ``inconclusive`` is a margin smaller than the noise of the measurement.
VERDICTS: tuple[str, ...] = ("pass", "fail", "inconclusive", "info")

#: ``reproduction``: measured anew; ``consistency``: arithmetic against a value inferred from the paper.
KINDS: tuple[str, ...] = ("reproduction", "consistency")


#: Stored accuracies are rounded to 3 decimals (in points): a margin within this of the noise ties it.
_ROUNDING = 1e-3


def _finite(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Claim:
    """One checked statement.

    Attributes
    ----------
    name : str
        Short identifier, unique within a result (``"noniid-gap"``).
    statement : str
        The catalog's check, in words (with the threshold).
    verdict : {"pass", "fail", "inconclusive", "info"}
    measured : float or None
        The number the check looks at (``None`` when it is a structure, not a number).
    threshold : float or None
        The bound it is compared with.
    margin : float or None
        Signed distance to failing: ``>= 0`` passes, ``< 0`` fails (in the check's units).
    detail : str
        The numbers behind the verdict, readable on its own.
    why : str
        One line saying why a ``fail`` or ``inconclusive`` verdict came out (empty otherwise).
    noise : float or None
        The noise the margin was compared with (seed std or one test sample), if any.
    kind : {"reproduction", "consistency"}
    interval : dict or None
        The interval estimate behind the verdict, for claims built by
        :mod:`bnfl.experiments.interval_claims`: the per-seed values (paired differences where the
        runs share seeds), the 95% interval and its method (``"t"`` or ``"bootstrap"``), the
        smallest detectable effect and, when inconclusive, about how many seeds would decide it.
        ``None`` for the margin-against-noise claims (left out of the JSON, so their results read
        as before).
    counted_in : str or None
        The entry whose runs this claim re-reads (``"fedbn-tab11"``), when the same measurement is
        already checked there: the claim is shown here, linked, and counted only in that entry
        (:func:`bnfl.experiments.claims.linked`). ``None`` (left out of the JSON) for a claim
        counted where it stands.
    """

    name: str
    statement: str
    verdict: str
    measured: float | None = None
    threshold: float | None = None
    margin: float | None = None
    detail: str = ""
    why: str = ""
    noise: float | None = None
    kind: str = "reproduction"
    interval: dict[str, Any] | None = None
    counted_in: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("interval", "counted_in"):  # unset: serialised as claims always were
            if d[key] is None:
                del d[key]
        return d

    @property
    def counted(self) -> bool:
        """Whether totals count this claim (not when it re-reads a measurement of ``counted_in``)."""
        return self.counted_in is None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Claim:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})
