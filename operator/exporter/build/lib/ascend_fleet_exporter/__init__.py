"""The engine exporter: NPU utilization, HBM and allocator fragmentation, from inside the engine.

Pure modules, testable without torch or an NPU:

- :mod:`~ascend_fleet_exporter.metrics`: metric names, help, and :func:`render_exposition`;
- :mod:`~ascend_fleet_exporter.allocator`: fragmentation and slack from a ``memory_stats()`` dict;
- :mod:`~ascend_fleet_exporter.npu_smi`: ``npu-smi`` output parsing and the device map;
- :mod:`~ascend_fleet_exporter.records`: per-process records and their union.

Side effects, at the edges:

- :mod:`~ascend_fleet_exporter.config`: settings from the environment;
- :mod:`~ascend_fleet_exporter.collectors`: torch_npu (imported lazily) and the ``npu-smi`` binary;
- :mod:`~ascend_fleet_exporter.spool`: the per-pod directory where engine processes publish;
- :mod:`~ascend_fleet_exporter.server`: the ``/metrics`` endpoint;
- :mod:`~ascend_fleet_exporter.runtime`: threads that sample, publish and serve;
- :mod:`~ascend_fleet_exporter.vllm_plugin` and :mod:`~ascend_fleet_exporter.sglang`: the engine hooks.

This package imports nothing at import time, so the engine hooks stay cheap.
"""
