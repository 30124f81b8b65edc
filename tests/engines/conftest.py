"""Prints how many generated argvs each engine's own parser accepted (make test-engines)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.engines.test_engine_parsers import ACCEPTED

    for engine, count in sorted(ACCEPTED.items()):
        terminalreporter.write_line(f"{engine}'s own parser accepted {count} generated argvs")
