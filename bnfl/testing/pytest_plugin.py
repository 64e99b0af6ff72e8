"""pytest fixtures for BN-safety checks of your own federated code.

Enable in your ``conftest.py``::

    pytest_plugins = ["bnfl.testing.pytest_plugin"]

Two fixtures: ``check_bn_aggregation`` is :func:`bnfl.testing.check_aggregation` and
``check_bn_server_step`` is :func:`bnfl.testing.check_server_step`, both with the examples of
``--bnfl-examples``.

``pytest --bnfl-examples N`` sets the hypothesis examples of every check (default: each
function's own, 60 and 12); checks are derandomised, so a run repeats exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from bnfl.testing import check_aggregation, check_server_step


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--bnfl-examples N``: hypothesis examples per BN-safety check."""
    parser.addoption("--bnfl-examples", type=int, default=None,
                     help="hypothesis examples per bnfl BN-safety check (default: each check's own)")


def _examples(config: pytest.Config) -> dict[str, int]:
    n = config.getoption("--bnfl-examples")
    if n is not None and n < 1:
        raise pytest.UsageError(f"--bnfl-examples must be a positive int, got {n}")
    return {} if n is None else {"examples": int(n)}


@pytest.fixture
def check_bn_aggregation(request: pytest.FixtureRequest) -> Callable:
    """:func:`bnfl.testing.check_aggregation`, with ``--bnfl-examples`` applied."""
    return functools.partial(check_aggregation, **_examples(request.config))


@pytest.fixture
def check_bn_server_step(request: pytest.FixtureRequest) -> Callable:
    """:func:`bnfl.testing.check_server_step`, with ``--bnfl-examples`` applied."""
    return functools.partial(check_server_step, **_examples(request.config))
