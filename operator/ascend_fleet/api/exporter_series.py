"""The engine exporter's series that the operator reads by name, as the exporter serves them.

The exporter is a distribution of its own (``ascend-fleet-exporter``, inside the engine images) and the operator
imports nothing of it: the names are the contract between the two programs, like any metric a Prometheus rule
names. ``tests/exporter/test_contract.py`` checks that each one is a series the exporter serves.
"""

from __future__ import annotations

HBM_USED_BYTES = "ascend_fleet_hbm_used_bytes"
MEMORY_RESERVED_BYTES = "ascend_fleet_memory_reserved_bytes"
MEMORY_FRAGMENTATION_RATIO = "ascend_fleet_memory_fragmentation_ratio"
MEMORY_LARGEST_FREE_BLOCK_BYTES = "ascend_fleet_memory_largest_free_block_bytes"
ALLOC_RETRIES_TOTAL = "ascend_fleet_alloc_retries_total"
