"""ascend-fleet: a Kubernetes operator for LLM inference fleets on Huawei Ascend NPUs."""

__version__ = "0.1.0"
