"""Command-line flags of the picker's argv: read one, or set one (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def flag(args: Sequence[str], name: str) -> str | None:
    """The value of ``name`` in a command line (``--name value`` or ``--name=value``), or None."""
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def replace_flag(args: list[str], name: str, value: str) -> list[str]:
    """``args`` with ``name`` set to ``value`` (appended at the end, any earlier value dropped)."""
    out, skip = [], False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == name and index + 1 < len(args):
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        out.append(arg)
    return [*out, name, value]
