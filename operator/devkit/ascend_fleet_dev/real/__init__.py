"""The real Kubernetes control plane on loopback and what runs beside it: the node agent, the data plane (Envoy,
the endpoint picker), the pods that run real programs on this machine and vLLM's CPU build as a real engine."""
