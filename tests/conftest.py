"""Shared test set-up: one thread, deterministic torch, hypothesis profiles.

Profiles: ``default`` runs >= 100 examples per property (the project's bar);
``fast`` (``HYPOTHESIS_PROFILE=fast``) runs 20 for quick local iteration.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

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
