"""Is my FL code BN-safe? Property-based checks of a user's own aggregation and server step.

:func:`check_aggregation` runs your aggregation function (``fn(states, weights) -> state_dict``)
on hypothesis-drawn clients whose BN state comes from running BN layers on their data, says which
policy it implements for every BN entry, and lists every problem with a minimal counterexample;
:func:`check_server_step` runs a server optimiser (FedAdam, FedYogi, FedOpt) over many rounds and
finds the round where a BN variance breaks. :mod:`bnfl.testing.strategies` has the hypothesis
strategies for your own tests and :mod:`bnfl.testing.pytest_plugin` their fixtures. The page
``docs/bn-safe.md`` runs both on the common patterns. Needs ``hypothesis``
(``pip install "bnfl[testing]"``).
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
except ImportError as err:  # pragma: no cover - the dev and testing extras bring it
    raise ImportError('bnfl.testing needs hypothesis: pip install "bnfl[testing]"') from err

from bnfl.testing._check import (
    POLICY_ORDER,
    POLICY_WORDS,
    PROBLEM_KINDS,
    AggregationReport,
    BNSafetyError,
    Problem,
    check_aggregation,
)
from bnfl.testing._server_step import ServerStepReport, check_server_step

__all__ = ["POLICY_ORDER", "POLICY_WORDS", "PROBLEM_KINDS", "AggregationReport", "BNSafetyError", "Problem",
           "ServerStepReport", "check_aggregation", "check_server_step"]
