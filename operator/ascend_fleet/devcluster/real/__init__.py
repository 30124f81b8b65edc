"""The real Kubernetes control plane on loopback and what runs beside it: the node agent, the data plane (Envoy,
the endpoint picker) and the pods that run real programs on this machine."""
