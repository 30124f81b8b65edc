"""Failover benches: how long a dual-active inference takes traffic off a dead node, against the floor."""
