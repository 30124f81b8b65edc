"""The one call the engine hooks make: arm the exporter in this process, cheaply and safely.

The engines call it in every process they start, most of which never touch an NPU, and before
anything else is set up; so it reads one environment variable, imports the exporter only when that
variable turns it on, and never raises: a broken exporter must not keep an engine from serving.
"""

from __future__ import annotations

import logging

from ascend_fleet_exporter.config import ENV_ENABLED, exporter_enabled

_log = logging.getLogger("ascend_fleet_exporter")


def arm_safely() -> bool:
    """Arm the exporter in this process if ``ASCEND_FLEET_EXPORTER`` is on; whether it was armed."""
    try:
        if not exporter_enabled():
            return False
        from ascend_fleet_exporter.runtime import arm

        return arm()
    except Exception:
        _log.exception(
            "NPU exporter could not start (%s is on); the engine runs without NPU metrics", ENV_ENABLED
        )
        return False
