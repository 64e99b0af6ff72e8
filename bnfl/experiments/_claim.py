"""The :class:`Claim` record, shared by :mod:`bnfl.experiments.claims` (margin against noise) and
:mod:`bnfl.experiments.interval_claims` (interval over seeds)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Verdicts a claim can carry. ``info`` is a number the catalog asks to report but not assert;
#: ``inconclusive`` is a margin smaller than the noise of the measurement.
VERDICTS: tuple[str, ...] = ("pass", "fail", "inconclusive", "info")

#: ``reproduction``: measured anew (by training, where the entry trains); ``structural``: a constant, a
#: count or arithmetic (e.g. the communication rounds the engine's counters add up to), declared so even
#: inside an entry that trains; ``consistency``: arithmetic against a value inferred from the paper.
KINDS: tuple[str, ...] = ("reproduction", "structural", "consistency")


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
    kind : {"reproduction", "structural", "consistency"}
        ``"structural"`` is declared by the claim (arithmetic, counts, constants) and is counted as
        such even in an entry that trains (:func:`bnfl.experiments.dashboard.claim_kind`).
    interval : dict or None
        The interval estimate behind the verdict, for claims built by
        :mod:`bnfl.experiments.interval_claims`: the per-seed values (paired differences where the
        runs share seeds), the 95% interval and its method (``"t"`` or ``"bootstrap"``), the
        smallest detectable effect and, when inconclusive, about how many seeds would decide it.
        ``None`` for the margin-against-noise claims (left out of the JSON, so their results read
        as before). A trained claim for which no interval can exist (a run diverged, a target was
        never reached) stores :func:`no_interval`'s record instead: the reason under
        ``"no_interval"``, the seeds and the per-seed values (``None`` where a run gave no number).
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

    @property
    def has_interval(self) -> bool:
        """Whether the claim stores a 95% interval (not :func:`no_interval`'s record, not ``None``)."""
        return bool(self.interval) and "no_interval" not in self.interval  # type: ignore[operator]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Claim:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


def no_interval(reason: str, *, seeds: Sequence[int] | None = None, values: Sequence[Any] | None = None,
                baseline: Sequence[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The record a trained claim stores in ``Claim.interval`` when no interval can exist.

    ``reason`` says why in a few words (``"diverged"``, ``"never reached"``); ``values`` and
    ``baseline`` are the per-seed numbers in the order of ``seeds``, ``None`` where a run gave none
    (a diverged run), so a reader sees which seeds ran and what they gave. ``extra`` adds fields
    (e.g. ``stopped_at``, the round each diverged run stopped at).
    """
    if not reason or not isinstance(reason, str):
        raise ValueError(f"no_interval needs a reason such as 'diverged', got {reason!r}")

    def clean(xs: Sequence[Any] | None) -> list[float | None] | None:
        return None if xs is None else [_finite(x) for x in xs]

    out: dict[str, Any] = {"no_interval": reason, "seeds": None if seeds is None else [int(s) for s in seeds],
                           "values": clean(values), "baseline": clean(baseline)}
    vals = out["values"] or []
    out["finite"] = sum(v is not None for v in vals)
    out.update(extra)
    return out
