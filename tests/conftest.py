"""Shared test options and paths."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", help="rewrite tests/golden/*.yaml from the renderer"
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``after_all`` read what the other suites recorded, so they run last."""
    items.sort(key=lambda item: item.get_closest_marker("after_all") is not None)


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """The binary, or a skip on a developer machine without it; CI installs it, so there it must exist."""
    from ascend_fleet_dev.fleet.prometheus import PrometheusNotFound, find_prometheus_binary

    try:
        return find_prometheus_binary()
    except PrometheusNotFound as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide prometheus: {err}")
        pytest.skip(str(err))


# The real control plane (session-scoped), for every suite that needs the real Kubernetes.
from tests.support.realcluster import operator_kubeconfig, real_cluster  # noqa: E402, F401
