"""The ``ascend-fleet`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import yaml

from ..api.catalog import Catalog
from ..api.crd import crd_yaml
from ..api.settings import OperatorSettings
from ..render import InvalidSpec, Valid, render_all, validate
from .documents import Document, DocumentError, load
from .extras import missing_extra_message

EXIT_OK, EXIT_INVALID = 0, 2
EXIT_MISSING_EXTRA = 3


def _settings(args: argparse.Namespace) -> OperatorSettings | None:
    """The operator configuration named by --config, or None (the built-in defaults, no catalog check)."""
    path = getattr(args, "config", None)
    if not path:
        return None
    try:
        return OperatorSettings.load(path, environ={})
    except (OSError, ValueError) as error:
        raise DocumentError(f"{path}: not a usable operator configuration: {error}") from None


def _checked(
    paths: list[str], namespace: str | None = None, settings: OperatorSettings | None = None
) -> tuple[list[tuple[Document, Valid]], list[str]]:
    """Validate every document as the operator would; return the good ones and every problem as lines.

    With the operator's settings, the configured default images are filled in and rules are checked
    against its catalog, so the output is what the operator creates.
    """
    good, problems = [], []
    known = None
    if settings is not None:
        known = Catalog.build(settings.control.catalog_preset, settings.control.catalog).names()
    for doc in load(paths):
        if namespace:
            doc.body.setdefault("metadata", {}).setdefault("namespace", namespace)
        label = f"{doc.source} ({(doc.body.get('metadata') or {}).get('name', '?')})"
        body = settings.with_default_image(doc.body) if settings is not None else doc.body
        options: dict[str, Any] = {}
        if settings is not None:
            options = {
                "max_window": settings.control.max_window,
                "allow_host_path": settings.allow_host_path_models,
            }
        try:
            valid = validate(body, known_metrics=known, **options)
        except InvalidSpec as error:
            problems += [f"{label}: {p}" for p in error.problems]
        else:
            good.append((doc, valid))
            for warning in valid.warnings:
                print(f"{label}: warning: {warning}", file=sys.stderr)
    return good, problems


def cmd_validate(args: argparse.Namespace) -> int:
    good, problems = _checked(args.files, settings=_settings(args))
    for doc, valid in good:
        print(f"{doc.source}: {valid.obj.name} is valid ({valid.layout.summary()})")
    for line in problems:
        print(line, file=sys.stderr)
    return EXIT_INVALID if problems else EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    good, problems = _checked(args.files)
    header = (
        "NAME",
        "ENGINE",
        "CHIP",
        "TP",
        "PP",
        "DP",
        "PODS/REPLICA",
        "NPUS/POD",
        "NPUS/REPLICA",
        "TOTAL NPUS",
    )
    rows: list[tuple[object, ...]] = [header]
    for _, valid in good:
        spec, layout = valid.obj.spec, valid.layout
        rows.append(
            (
                valid.obj.name,
                spec.engine.type,
                spec.hardware.chip,
                layout.tensor,
                layout.pipeline,
                layout.data,
                layout.pods_per_replica,
                layout.npus_per_pod,
                layout.npus_per_replica,
                layout.total_npus,
            )
        )
    if good:
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
        for row in rows:
            print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        print()
        for _, valid in good:
            print(f"{valid.obj.name}: {valid.layout.summary()}")
    for line in problems:
        print(line, file=sys.stderr)
    return EXIT_INVALID if problems else EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    good, problems = _checked(args.files, args.namespace, _settings(args))
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        return EXIT_INVALID
    objects = [obj for _, valid in good for obj in render_all(valid.obj)]
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, width=120))
    return EXIT_OK


def cmd_crd(args: argparse.Namespace) -> int:
    sys.stdout.write(crd_yaml())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascend-fleet",
        description="Kubernetes operator for LLM inference fleets (vllm-ascend, SGLang) on Ascend NPUs.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help_text: str
    ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    files_help = "AscendInference YAML files (several documents each are fine; - reads stdin)"
    config_help = (
        "the operator's configuration file (the chart's config.yaml): its default images, catalog "
        "and hostPath setting apply, as in the cluster"
    )
    validate_cmd = add("validate", cmd_validate, "Check AscendInference files; exit 2 listing every problem.")
    validate_cmd.add_argument("files", nargs="+", metavar="FILE", help=files_help)
    validate_cmd.add_argument("--config", metavar="FILE", help=config_help)
    add("plan", cmd_plan, "Show how each AscendInference's layout maps onto pods and NPUs.").add_argument(
        "files", nargs="+", metavar="FILE", help=files_help
    )
    render = add(
        "render", cmd_render, "Print every child object as a YAML stream (for GitOps, like helm template)."
    )
    render.add_argument("files", nargs="+", metavar="FILE", help=files_help)
    render.add_argument("-n", "--namespace", help="namespace for documents that name none (default: default)")
    render.add_argument("--config", metavar="FILE", help=config_help)
    add("crd", cmd_crd, "Print the AscendInference CustomResourceDefinition.")
    _add_runtime_commands(sub)
    return parser


def _add_runtime_commands(sub: argparse._SubParsersAction) -> None:
    """Commands that run the operator, the local cluster or the simulator; heavy imports load only when used."""
    from ..simulate.cli import register as register_simulate
    from ..tune.cli import register as register_tune
    from . import runtime

    runtime.register(sub)
    register_simulate(sub)
    register_tune(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except DocumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as error:
        message = missing_extra_message(error, getattr(args, "command", None) or "")
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_MISSING_EXTRA


if __name__ == "__main__":
    sys.exit(main())
