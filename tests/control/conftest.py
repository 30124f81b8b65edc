"""Fixtures for the control-loop tests (the real Prometheus comes from tests/conftest.py)."""
