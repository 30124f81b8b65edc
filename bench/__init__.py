"""Benchmarks; each subpackage runs with ``python -m bench.<name>`` from the repository root."""
