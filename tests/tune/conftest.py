"""The end-to-end fixtures (local cluster, operator, namespace) for the tune tests."""

from tests.e2e.conftest import cluster, kube, local_cluster, namespace, operator, settings  # noqa: F401
