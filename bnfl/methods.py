"""bnfl's methods, by their public name: :data:`METHODS`, :class:`Method`, :func:`get`.

The table is defined once, in :mod:`bnfl.fl.methods` (below the builder that looks a method id
up), and this module is that table under the name users import::

    >>> from bnfl.methods import METHODS
    >>> METHODS["fedavg+gn"].label
    'FedAvg+GN'
"""

from __future__ import annotations

from bnfl.fl.methods import COMM_SCHEMES, METHODS, Method, get

__all__ = ["COMM_SCHEMES", "METHODS", "Method", "get"]
