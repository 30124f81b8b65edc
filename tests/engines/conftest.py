"""Prints how many generated argvs each engine's own parser accepted, and how many booted (make test-engines)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.engines.test_engine_parsers import ACCEPTED

    for engine, count in sorted(ACCEPTED.items()):
        terminalreporter.write_line(f"{engine}'s own parser accepted {count} generated argvs")
    from tests.engines.test_vllm_boot import BOOTED

    if BOOTED:
        terminalreporter.write_line(
            f"vLLM's CPU build booted {BOOTED['servers']} distinct translated command lines to /health "
            f"({BOOTED['cases']} cases; {BOOTED['headless']} headless ranks start no server)"
        )
