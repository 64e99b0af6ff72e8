"""Moved to :mod:`bnfl.experiments.evidence` (the names stay importable from here)."""

from bnfl.experiments.evidence import Seeds, finals, finite_or, per_seed, rounds_to_each

__all__ = ["Seeds", "finals", "finite_or", "per_seed", "rounds_to_each"]
