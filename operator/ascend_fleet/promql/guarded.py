"""Parse a rule's PromQL in a child process under memory and time limits, keeping the answers by query text.

The parser's memory grows with the square of a query's length, and deep nesting overflows its stack, which
kills the process that called it: no Python code can catch that. In a child under RLIMIT_AS, RLIMIT_CPU and a
deadline, a hostile query costs that child only, and its object gets a sentence instead of the operator a
crash. Children run one at a time, so together they never need more than one child's memory.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections import OrderedDict

from ..api.query_scope import Selector
from ..render.agreement import ParsedQuery
from .child import MEMORY_EXIT

# Next to the operator's own memory, under the chart's 512 MiB limit; the worst query the CRD admits
# (2048 characters) needs about 180 MiB.
MEMORY_LIMIT = 256 * 2**20
# The worst admitted query takes half a second on a loaded node.
TIME_LIMIT = 5
# Queries are at most 2048 characters, so the kept answers stay within a few MiB.
KEPT_ANSWERS = 1024

_kept: OrderedDict[str, ParsedQuery] = OrderedDict()
_kept_lock = threading.Lock()
_one_child = threading.Lock()


def parse_guarded(query: str) -> ParsedQuery:
    """The parser's answer for one query, from a child process the first time, from memory after that."""
    with _kept_lock:
        if query in _kept:
            _kept.move_to_end(query)
            return _kept[query]
    with _one_child:
        parsed = parse_in_child(query)
    if parsed.limit != "start":  # a child that could not start says nothing of the query: ask again next time
        with _kept_lock:
            _kept[query] = parsed
            while len(_kept) > KEPT_ANSWERS:
                _kept.popitem(last=False)
    return parsed


def parse_in_child(query: str, memory: int = MEMORY_LIMIT, seconds: int = TIME_LIMIT) -> ParsedQuery:
    """Parse one query in a new child process that may use ``memory`` bytes and ``seconds`` of time."""
    command = [sys.executable, "-I", "-m", "ascend_fleet.promql.child", str(memory), str(seconds)]
    try:
        done = subprocess.run(
            command, input=query.encode(), capture_output=True, timeout=seconds, check=False
        )
    except subprocess.TimeoutExpired:
        return ParsedQuery(limit="time", stopped=f"more than {seconds} s")
    except OSError as error:
        return ParsedQuery(limit="start", stopped=f"the parser's process did not start ({error.strerror})")
    if done.returncode == 0:
        try:
            answer = json.loads(done.stdout)
            selectors = tuple(Selector(text, tuple(pinned)) for text, pinned in answer.get("selectors", []))
            return ParsedQuery(error=answer["error"], selectors=selectors)
        except (ValueError, KeyError, TypeError):
            pass
    return _stopped(done.returncode, done.stderr, memory, seconds)


def _stopped(code: int, stderr: bytes, memory: int, seconds: int) -> ParsedQuery:
    """Which limit stopped a child, from how it ended."""
    if code == MEMORY_EXIT or (code == -signal.SIGABRT and b"memory allocation" in stderr):
        return ParsedQuery(limit="memory", stopped=f"more than {memory // 2**20} MiB of memory")
    if code in (-signal.SIGXCPU, -signal.SIGKILL):
        return ParsedQuery(limit="time", stopped=f"more than {seconds} s")
    if code == -signal.SIGSEGV:
        return ParsedQuery(limit="stack", stopped="all of its stack (the query nests too deeply)")
    return ParsedQuery(limit="crash", stopped=f"a crash (exit status {code})")
