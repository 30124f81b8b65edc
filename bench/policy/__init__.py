"""The built-in policy comparison: every built-in trace through static, HPA and the project's rules.

Run ``python -m bench.policy`` from the repository root; see docs/simulator.md.
"""
