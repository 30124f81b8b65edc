"""The simulated fleet: the simulated kubelet and its NPU nodes, simulated engines that serve requests, the load
scenario and a real Prometheus that scrapes them."""
