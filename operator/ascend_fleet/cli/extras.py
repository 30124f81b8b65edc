"""Which optional extra of the package provides a module that a development command imports."""

from __future__ import annotations

# The top-level modules only the development commands import, and the extra that installs each.
EXTRA_OF_MODULE = {
    "rich": "tune",
    "tokenizers": "tune",
    "matplotlib": "plot",
}


def missing_extra_message(error: ModuleNotFoundError, command: str) -> str | None:
    """One line naming the extra to install when ``error`` is a missing development dependency, else None."""
    module = (error.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return (
        f"error: `ascend-fleet {command}` needs {module}, which the '{extra}' extra installs: "
        f"pip install 'ascend-fleet[{extra}]'"
    )
