"""The PromQL parser in a child process with memory and time limits, so that no query can take the operator down.

``guarded`` runs it and keeps the answers by query text; ``child`` is what the child process runs.
"""
