"""The dev cluster's real wing: real programs (control plane, engines) run as local processes."""
