"""The inputs of ``validate``, ``plan`` and ``render``: files and directories as kubectl takes them, and --config."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import shtab
import yaml
from pydantic import ValidationError

from ..api.settings import OperatorSettings
from ..render.validation import format_errors
from .documents import DocumentError, yaml_problem


def add_input_arguments(command: argparse.ArgumentParser) -> None:
    """FILE... positional and ``-f FILE`` (repeatable, as kubectl), directories, ``-R`` into subdirectories."""
    files_help = (
        "AscendInference YAML files or directories (several documents each are fine; - reads stdin; "
        "other kinds are skipped)"
    )
    files = command.add_argument("files", nargs="*", metavar="FILE", help=files_help)
    # shtab reads a ``complete`` attribute that argparse's Action type does not declare.
    files.complete = shtab.FILE  # type: ignore[attr-defined]
    flag = command.add_argument(
        "-f", "--filename", action="append", default=[], dest="filenames", metavar="FILE", help=files_help
    )
    flag.complete = shtab.FILE  # type: ignore[attr-defined]
    command.add_argument(
        "-R", "--recursive", action="store_true", help="also read the directories' subdirectories"
    )


def input_paths(args: argparse.Namespace) -> list[str]:
    """Every input named, positional ones first; none at all is an error."""
    paths = [*args.files, *args.filenames]
    if not paths:
        raise DocumentError("no input: name files or directories (FILE or -f FILE), or - for stdin")
    return paths


def load_settings(path: str | None) -> OperatorSettings | None:
    """The operator configuration named by --config, or None (the built-in defaults, no catalog check).

    Any problem is one line naming the file: what the operator itself would refuse at start.
    """
    if not path:
        return None
    return read_settings(path, {})


def read_settings(
    path: str | None, environ: Mapping[str, str], prometheus_url: str | None = None
) -> OperatorSettings:
    """The operator configuration from the file (or ``ASCEND_FLEET_CONFIG``), the environment's overrides and
    a ``--prometheus-url`` flag's.

    Any problem is one line naming the file, as ``DocumentError``.
    """
    source = path or environ.get("ASCEND_FLEET_CONFIG") or "the environment"
    prefix = f"{source}: not a usable operator configuration"
    try:
        return OperatorSettings.load(path, environ=dict(environ), prometheus_url=prometheus_url)
    except OSError as error:
        raise DocumentError(f"{source}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise DocumentError(f"{prefix}: not UTF-8 text (byte at offset {error.start})") from None
    except yaml.YAMLError as error:
        raise DocumentError(f"{prefix}: not valid YAML: {yaml_problem(error)}") from None
    except ValidationError as error:
        lines = [
            line.replace("see `kubectl explain ainf.spec`", "see the chart's values.yaml")
            for line in format_errors(error)
        ]
        raise DocumentError(f"{prefix}: {'; '.join(lines)}") from None
    except ValueError as error:
        raise DocumentError(f"{prefix}: {' '.join(str(error).split())}") from None
