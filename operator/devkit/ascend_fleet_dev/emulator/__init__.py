"""The Kubernetes API emulator: an in-process API server over kmock, with its store, watches, selectors and
server-side printing. It imports nothing of the other wings of the dev cluster."""
