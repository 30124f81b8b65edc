"""``python -m bench.control``: the control loop against a synthetic fleet in a real Prometheus.

See :mod:`bench.control.run` for what is measured and how.
"""
