"""kopf wiring only: which events wake which reconciler, and how the operator process starts."""
