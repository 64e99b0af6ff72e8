"""The registry of algorithm classes, filled beside each class by :func:`register_algorithm`."""

from __future__ import annotations

from typing import Any

from bnfl.fl.algorithms._base import Algorithm
from bnfl.registry import Registry

__all__ = ["ALGORITHMS", "make_algorithm", "register_algorithm"]


def _as_algorithm(spec: str, obj: Any) -> type[Algorithm]:
    if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        raise ValueError(f"algorithm {spec!r} is {obj!r}, not a subclass of bnfl.fl.Algorithm")
    return obj


#: Every algorithm class by its ``name`` (a :class:`~bnfl.registry.Registry`; ``lookup`` also
#: takes an import string ``"package.module:MyAlgorithm"`` naming an :class:`Algorithm` subclass).
ALGORITHMS: Registry[type[Algorithm]] = Registry(
    "algorithm", sort=True, lower=True, convert=_as_algorithm,
    accepts=lambda o: isinstance(o, type) and issubclass(o, Algorithm), expects="a subclass of bnfl.fl.Algorithm")


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: register ``cls`` in :data:`ALGORITHMS` under its ``name``."""
    return ALGORITHMS.register(_as_algorithm(cls.name, cls).name, cls)


def make_algorithm(name: str, /, resolved: type[Algorithm] | None = None, **options: Any) -> Algorithm:
    """Instantiate an algorithm by name (see :data:`ALGORITHMS`) or import string with keyword
    options; ``resolved``: the class ``name`` names, already looked up (a
    :class:`~bnfl.methods.Method` passes the class it resolved once, when it was made)."""
    cls = resolved if resolved is not None else ALGORITHMS.lookup(name)
    try:
        return cls(**options)
    except TypeError as err:
        raise TypeError(f"bad options for algorithm {name!r}: {err}") from None
