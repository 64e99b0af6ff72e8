"""Shared test set-up: one thread, deterministic torch, hypothesis profiles, the fake paper data root.

Profiles: ``default`` runs >= 100 examples per property (the project's bar);
``fast`` (``HYPOTHESIS_PROFILE=fast``) runs 20 for quick local iteration.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

torch.set_num_threads(1)

settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "fast",
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def paper_root(tmp_path_factory):
    """A ``--data-root`` with every paper-profile data set in its standard layout and HBN Table 5's
    five pretrained weights files (tiny fakes, :mod:`tests.paper_fakes`), written once per session
    (per xdist worker) for the dry runs and the end-to-end paper runs (a dry run may decode its fake
    ImageNet there once, as a first run does)."""
    from tests.paper_fakes import write_paper_root, write_pretrained

    root = write_paper_root(tmp_path_factory.mktemp("paper_root"))
    write_pretrained(root)
    return root


@pytest.fixture
def bnfl_docs():
    """The docs build's Sphinx extension module (docs/_ext/bnfl_docs.py), imported without
    leaving docs/_ext on sys.path."""
    import sys
    from pathlib import Path

    ext = str(Path(__file__).resolve().parents[1] / "docs" / "_ext")
    sys.path.insert(0, ext)
    try:
        import bnfl_docs
    finally:
        sys.path.remove(ext)
    return bnfl_docs
