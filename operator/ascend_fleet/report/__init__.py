"""Reports drawn from a fleet's Prometheus history (the ``memory-report`` command)."""
