"""The end-to-end fixtures (the real control plane or the emulator, the operator, a namespace) for the tune tests."""

from tests.e2e.conftest import (  # noqa: F401
    cluster,
    kube,
    local_cluster,
    namespace,
    operator,
    settings,
)
