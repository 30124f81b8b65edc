"""Children the API server would not create, and when to try again (pure).

Two kinds, both reported as ``Ready=False`` with the server's words and retried with backoff rather
than hot (the same spec gets the same answer):

- ``ChildRejected``: the server refused the child itself (422 Invalid, 403 Forbidden, 400), e.g. a
  resource quantity or volume its validation does not accept;
- ``NameConflict``: an object that is not ours already holds the child's name. It is never touched;
  the user renames or removes it, and the next retry creates the child.

A refusal is forgotten when the child is created, when the cache shows our own child of that name,
or when the object's spec changes (a new generation is retried at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..status.conditions import NAME_CONFLICT


@dataclass(frozen=True)
class Refusal:
    """The latest refusal of one child, and how many in a row."""

    kind: str
    name: str
    reason: str  # ChildRejected | NameConflict
    message: str  # what the server said, or who holds the name
    count: int
    last: float
    generation: int | None = None

    def retry_at(self, initial: float, cap: float) -> float:
        """The first retry waits ``initial``, each further one twice as long, up to ``cap``."""
        return self.last + min(initial * 2 ** (self.count - 1), cap)

    def sentence(self) -> str:
        """The condition's words for this child."""
        if self.reason == NAME_CONFLICT:
            return (
                f"{self.kind} {self.name} already exists and is not owned by this AscendInference "
                f"({self.message}); it is left alone: delete or rename it, or rename this object"
            )
        return f"the API server refused {self.kind} {self.name}: {self.message}"


def refused_again(
    previous: Refusal | None,
    kind: str,
    name: str,
    reason: str,
    message: str,
    now: float,
    generation: int | None,
) -> Refusal:
    """The record after one more refusal (the count restarts when the reason, message or spec changed)."""
    same = previous is not None and (previous.reason, previous.message, previous.generation) == (
        reason,
        message,
        generation,
    )
    count = previous.count + 1 if same and previous is not None else 1
    return Refusal(kind, name, reason, message, count, now, generation)


def current(
    refusals: Mapping[tuple[str, str], Refusal], generation: int | None, owned: set[tuple[str, str]]
) -> dict[tuple[str, str], Refusal]:
    """The refusals that still stand: same spec generation, and the child not ours in the cache by now."""
    return {key: r for key, r in refusals.items() if r.generation == generation and key not in owned}
