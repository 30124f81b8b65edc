"""Tests of the fleet simulator (ascend_fleet.simulate) and bench/policy."""
