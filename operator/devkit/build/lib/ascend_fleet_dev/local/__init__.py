"""What every local program of the dev cluster shares: free ports, signals and process lifecycles."""
