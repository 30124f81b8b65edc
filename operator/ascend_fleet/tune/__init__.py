"""``ascend-fleet tune``: measure a batch-size ladder on a live endpoint and write the choice into the fleet.

Pure parts (no I/O): :mod:`.ladder` (which rungs run), :mod:`.table` (the measured rows, their text and
hash), :mod:`.choice` (which rung meets the goal) and :mod:`.patch` (the spec patch and the status
record). The edges: :mod:`.client` runs the benchmark client, :mod:`.fleet` patches and watches the
fleet through the Kubernetes API, :mod:`.npu` asks Prometheus, :mod:`.plot` draws the curve and
:mod:`.run` ties them together for :mod:`.cli`.
"""
