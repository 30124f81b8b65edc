"""The child process of :mod:`ascend_fleet.promql.guarded`: limit itself, parse the query on stdin, say the result.

It imports nothing of the operator, so its memory is the interpreter's, the parser's and the query's. The
answer is one JSON line on stdout: ``{"error": null}`` when the query is PromQL, else the parser's complaint.
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

        query = sys.stdin.buffer.read().decode("utf-8")
        try:
            promql_parser.parse(query)
        except ValueError as error:
            print(json.dumps({"error": " ".join(str(error).split())}))
        else:
            print(json.dumps({"error": None}))
    except MemoryError:
        return MEMORY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
