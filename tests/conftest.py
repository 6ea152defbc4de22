"""Shared fixtures. One Prefect test server per session (it takes 10-20 s to start)."""

from __future__ import annotations

import os

import pytest

from flows.environment import MODEL_DEFAULTS, set_defaults  # pins the CPU kernels before torch

set_defaults(MODEL_DEFAULTS)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


@pytest.fixture(scope="session")
def prefect_server():
    """A temporary Prefect server for the whole session; yields its API URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()
