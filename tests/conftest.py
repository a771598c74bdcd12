"""Shared test set-up: one hypothesis profile, deterministic torch, tolerances, and the conformance
vectors (exported once per session; the tests only read them)."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "posenc",
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci", parent=settings.get_profile("posenc"), max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "posenc"))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def vectors(tmp_path_factory):
    """``posenc conform export`` of every case (1-D RoPE, bias and M-RoPE), read-only."""
    from posenc import conform

    directory = tmp_path_factory.mktemp("vectors")
    conform.export(directory)
    return directory
