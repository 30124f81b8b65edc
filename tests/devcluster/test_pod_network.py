"""Each real cluster on a machine holds a block of pod addresses no other running cluster hands out."""

from __future__ import annotations

import pytest

from ascend_fleet_dev.local import ports
from ascend_fleet_dev.local.ports import PodNetwork


def test_two_clusters_get_different_blocks_and_a_released_block_is_taken_again(tmp_path) -> None:
    first, second = PodNetwork(tmp_path), PodNetwork(tmp_path)
    assert (first.first_ip, second.first_ip) == ("127.12.0.1", "127.13.0.1")
    first.release()
    first.release()  # idempotent
    third = PodNetwork(tmp_path)
    assert third.first_ip == "127.12.0.1"
    second.release()
    third.release()


def test_every_block_held_says_so(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ports, "LAST_POD_BLOCK", ports.FIRST_POD_BLOCK)
    held = PodNetwork(tmp_path)
    with pytest.raises(OSError, match=r"every pod address block .* is held .* stop one of them"):
        PodNetwork(tmp_path)
    held.release()
