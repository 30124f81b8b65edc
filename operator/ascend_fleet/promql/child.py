"""The child process of :mod:`ascend_fleet.promql.guarded`: limit itself, parse the query on stdin, say the result.

It imports nothing of the operator but ``api.query_scope`` (the parser and a dataclass), so its memory is the
interpreter's, the parser's and the query's. The answer is one JSON line on stdout: ``{"error": null,
"selectors": [[text, [namespace, ...]], ...]}`` when the query is PromQL (every selector and the namespaces
that confine it), else ``{"error": <the parser's complaint>}``.
"""

from __future__ import annotations

import json
import resource
import sys

# The exit status for a MemoryError raised in Python; the parser's own allocation failure aborts instead.
MEMORY_EXIT = 3


def main(argv: list[str]) -> int:
    memory, seconds = int(argv[1]), int(argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash of the parser leaves no core file behind
    try:
        import promql_parser

        from ..api.query_scope import selectors_of

        query = sys.stdin.buffer.read().decode("utf-8")
        try:
            expr = promql_parser.parse(query)
        except ValueError as error:
            print(json.dumps({"error": " ".join(str(error).split())}))
        else:
            selectors = [[s.text, list(s.pinned)] for s in selectors_of(expr)]
            print(json.dumps({"error": None, "selectors": selectors}))
    except MemoryError:
        return MEMORY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
