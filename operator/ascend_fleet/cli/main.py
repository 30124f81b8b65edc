"""The ``ascend-fleet`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ..api.catalog import Catalog
from ..api.crd import crd_yaml
from ..api.settings import OperatorSettings
from ..promql.guarded import parse_guarded
from ..render import InvalidSpec, Valid, render_all, validate
from ..render.routing import PickerSettings
from ..render.validation import unknown_metrics
from .documents import DocumentError, load
from .extras import missing_extra_message
from .inputs import add_input_arguments, input_paths, load_settings
from .output import (
    FORMATS,
    RENDER_FORMATS,
    Checked,
    object_list,
    plan_table,
    structured,
    validate_table,
    yaml_stream,
)

EXIT_OK, EXIT_INVALID = 0, 2
EXIT_MISSING_EXTRA = 3
COMPLETION_SHELLS = ("bash", "zsh", "fish")


def _checked(
    args: argparse.Namespace, namespace: str | None = None, settings: OperatorSettings | None = None
) -> tuple[list[Checked], list[str]]:
    """Validate every AscendInference in the inputs as the operator would; return each result and the skipped lines.

    With the operator's settings, the configured default images are filled in and rules are checked
    against its catalog, so the output is what the operator creates.
    """
    loaded = load(input_paths(args), recursive=args.recursive)
    for line in loaded.skipped:
        print(line, file=sys.stderr)
    if not loaded.documents:
        raise DocumentError(f"{', '.join(input_paths(args))}: no AscendInference documents in the input")
    known = None
    if settings is not None:
        known = Catalog.build(settings.control.catalog_preset, settings.control.catalog).names()
    results = []
    for doc in loaded.documents:
        if namespace:
            doc.body.setdefault("metadata", {}).setdefault("namespace", namespace)
        metadata = doc.body.get("metadata") or {}
        body = settings.with_default_image(doc.body) if settings is not None else doc.body
        options: dict[str, Any] = {"parse_query": parse_guarded}
        if settings is not None:
            options |= {
                "max_window": settings.control.max_window,
                "allow_host_path": settings.allow_host_path_models,
            }
        result = Checked(doc.source, str(metadata.get("name", "?")), metadata.get("namespace"), None)
        try:
            result.valid = validate(body, known_metrics=known, **options)
        except InvalidSpec as error:
            result.problems = list(error.problems)
        else:
            result.warnings = list(result.valid.warnings)
            if settings is None:
                result.warnings += _outside_builtin_catalog(result.valid)
        for warning in result.warnings:
            print(f"{result.label}: warning: {warning}", file=sys.stderr)
        results.append(result)
    return results, loaded.skipped


def _outside_builtin_catalog(valid: Valid) -> list[str]:
    """Without --config, rules naming a metric the built-in catalog lacks: an operator with defaults refuses them."""
    control = OperatorSettings().control
    known = Catalog.build(control.catalog_preset, control.catalog).names()
    return [
        f"{line} (checked against the built-in catalog; pass --config with the operator's configuration "
        "if it adds this metric)"
        for line in unknown_metrics(valid.obj, known)
    ]


def _finish(results: list[Checked]) -> int:
    """Print every problem on stderr, one line each; exit 2 if there was any."""
    problems = [f"{r.label}: {p}" for r in results for p in r.problems]
    for line in problems:
        print(line, file=sys.stderr)
    return EXIT_INVALID if problems else EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    """``validate``: one line per valid document, or the report as JSON/YAML; problems on stderr."""
    results, skipped = _checked(args, settings=load_settings(args.config))
    text = validate_table(results) if args.output == "table" else structured(results, skipped, args.output)
    sys.stdout.write(text)
    return _finish(results)


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan``: the layout table of the valid documents, or the report as JSON/YAML."""
    results, skipped = _checked(args)
    text = plan_table(results) if args.output == "table" else structured(results, skipped, args.output)
    sys.stdout.write(text)
    return _finish(results)


def cmd_render(args: argparse.Namespace) -> int:
    """``render``: every child object the operator would create, as one YAML stream without anchors, or
    (``-o json``) one JSON ``List`` as kubectl prints several objects."""
    settings = load_settings(args.config)
    results, _ = _checked(args, args.namespace, settings)
    if any(r.problems for r in results):
        return _finish(results)
    picker = PickerSettings(image=settings.routing.picker_image) if settings is not None else None
    network = settings.network_policy if settings is not None else None
    objects = [
        obj for r in results if r.valid is not None for obj in render_all(r.valid.obj, picker, network)
    ]
    sys.stdout.write(object_list(objects) if args.output == "json" else yaml_stream(objects))
    return EXIT_OK


def cmd_crd(args: argparse.Namespace) -> int:
    """``crd``: the CustomResourceDefinition as checked in."""
    sys.stdout.write(crd_yaml())
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    """``completion SHELL``: the shell's completion script for every command and option, generated by shtab."""
    import shtab

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return EXIT_OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ascend-fleet")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Every command and option of ``ascend-fleet``."""
    parser = argparse.ArgumentParser(
        prog="ascend-fleet",
        description="Kubernetes operator for LLM inference fleets (vllm-ascend, SGLang) on Ascend NPUs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help_text: str
    ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    config_help = (
        "the operator's configuration file (the chart's config.yaml): its default images, catalog "
        "and hostPath setting apply, as in the cluster"
    )
    output_help = "table (default) for people; json or yaml print one report (see the README's CLI table)"
    validate_cmd = add("validate", cmd_validate, "Check AscendInference files; exit 2 listing every problem.")
    add_input_arguments(validate_cmd)
    validate_cmd.add_argument("--config", metavar="FILE", help=config_help)
    validate_cmd.add_argument("-o", "--output", choices=FORMATS, default="table", help=output_help)
    plan = add("plan", cmd_plan, "Show how each AscendInference's layout maps onto pods and NPUs.")
    add_input_arguments(plan)
    plan.add_argument("-o", "--output", choices=FORMATS, default="table", help=output_help)
    render = add(
        "render",
        cmd_render,
        "Print every child object as a YAML stream or a JSON List (for GitOps, like helm template).",
    )
    add_input_arguments(render)
    render.add_argument("-n", "--namespace", help="namespace for documents that name none (default: default)")
    render.add_argument("--config", metavar="FILE", help=config_help)
    render.add_argument(
        "-o",
        "--output",
        choices=RENDER_FORMATS,
        default="yaml",
        help="yaml (default): a stream of documents; json: one v1 List of the objects, as kubectl -o json prints "
        "several",
    )
    add("crd", cmd_crd, "Print the AscendInference CustomResourceDefinition.")
    completion = add("completion", cmd_completion, "Print the shell completion script (bash, zsh or fish).")
    completion.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to complete in")
    _add_runtime_commands(sub)
    return parser


def _add_runtime_commands(sub: argparse._SubParsersAction) -> None:
    """Commands that run the operator or the simulator, then the dev kit's; heavy imports load only when used."""
    from ..simulate.cli import register as register_simulate
    from ..tune.cli import register as register_tune
    from . import memory_report, runtime
    from .plugins import register_plugins

    runtime.register(sub)
    memory_report.register(sub)
    register_simulate(sub)
    register_tune(sub)
    register_plugins(sub)


def main(argv: list[str] | None = None) -> int:
    """Run one command; input errors are one line on stderr and exit 2."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "takes_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
