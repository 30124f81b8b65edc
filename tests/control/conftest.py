"""Fixtures for the control-loop tests: a real Prometheus, skipped only on a machine without one outside CI."""

from __future__ import annotations

import os

import pytest

from ascend_fleet.devcluster.prometheus import PrometheusNotFound, find_prometheus_binary


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """The binary, or a skip on a developer machine without it; CI installs it, so there it must exist."""
    try:
        return find_prometheus_binary()
    except PrometheusNotFound as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide prometheus: {err}")
        pytest.skip(str(err))
