"""Commands that other distributions add to ``ascend-fleet`` through the ``ascend_fleet.commands`` entry points.

The dev kit (``ascend-fleet-dev``) adds ``dev`` and ``dev-cluster``. Where it is not installed, as in the operator
image, those two names stay on the command line and say in one line what to install.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

COMMANDS_GROUP = "ascend_fleet.commands"
DEV_KIT = "ascend-fleet-dev"
# The dev kit's commands, offered even without it so that a user who types one learns what to install.
DEV_KIT_COMMANDS = ("dev", "dev-cluster")
EXIT_MISSING_DISTRIBUTION = 3


def register_plugins(sub: argparse._SubParsersAction) -> None:
    """Add every command of the installed distributions' entry points, then a pointer for each missing one."""
    for entry in entry_points(group=COMMANDS_GROUP):
        try:
            register = entry.load()
        except ImportError:  # a dev kit installed without its dependencies: its commands say so below
            continue
        register(sub)
    for name in DEV_KIT_COMMANDS:
        if name not in sub.choices:
            _add_missing(sub, name)


def missing_message(command: str) -> str:
    """The one line a command of an absent distribution prints."""
    return f"error: `ascend-fleet {command}` comes with the dev kit: pip install {DEV_KIT}"


def _add_missing(sub: argparse._SubParsersAction, name: str) -> None:
    command = sub.add_parser(name, help=f"(needs the dev kit: pip install {DEV_KIT})", add_help=False)

    def missing(args: argparse.Namespace) -> int:
        print(missing_message(name), file=sys.stderr)
        return EXIT_MISSING_DISTRIBUTION

    # Whatever options follow are the dev kit's to read: the pointer stands for any of them.
    command.set_defaults(handler=missing, takes_any_arguments=True)
