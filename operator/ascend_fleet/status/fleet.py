"""Moved to :mod:`ascend_fleet.observed`: kept only for devcluster/real/poolendpoints.py's import while
devcluster/ is being moved; delete once that import names ``ascend_fleet.observed``."""

from ..observed import pod_ready

__all__ = ["pod_ready"]
