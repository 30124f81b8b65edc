"""What the API server, the kubelet or the engine would refuse later, said before anything is created.

Each check looks at the pods as they would be created (replica 0, after ``spec.template`` is merged) or at
the rules, and says what the server or the engine says, and what to write instead. Problems refuse the
object; warnings are legal but dangerous.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import promql_parser

from ..api import names
from ..api.bounds import MAX_ARG_LENGTH
from ..api.k8s import parse_quantity
from ..api.query_scope import Selector, scope_problem, selectors_of
from ..api.v1alpha1 import AscendInference
from ..layout import Layout
from .children import render_replica
from .engine import EXPORTER_PORT
from .metadata import Owner

# Linux's MAX_ARG_STRLEN, in bytes: the CRD bounds characters, and a character may take up to four.
MAX_ARG_BYTES = MAX_ARG_LENGTH
# The engines keep a token-id buffer of at least one 32-bit id per sequence of the batch in host memory.
TOKEN_ID_BYTES = 4


@dataclass
class Agreement:
    """What the server or the engine would refuse (problems), and what it accepts but is dangerous (warnings)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ParsedQuery:
    """What became of one query in the PromQL parser."""

    error: str | None = None  # the parser's complaint: the query is not PromQL
    limit: str | None = (
        None  # what stopped the parser before it answered: memory, time, stack, crash or start
    )
    stopped: str = ""  # what the parser had used when it was stopped, in words
    selectors: tuple[Selector, ...] = ()  # where the query reads series (see api/query_scope.py)


QueryParser = Callable[[str], ParsedQuery]
"""Parses one query; the operator and the CLI pass one that runs the parser in a child process with limits."""


def parse_here(query: str) -> ParsedQuery:
    """The parser in this process: for the project's own documents, whose queries are known to be small."""
    try:
        expr = promql_parser.parse(query)
    except ValueError as error:
        return ParsedQuery(error=str(error))
    return ParsedQuery(selectors=selectors_of(expr))


def check_agreement(obj: AscendInference, layout: Layout, parse_query: QueryParser = parse_here) -> Agreement:
    """Every check of this module on one valid object, each a sentence with what fits instead."""
    pods, plain = _pods(obj, layout)
    problems = [*_requests_over_limits(obj, pods), *_port_collisions(obj, pods), *_long_arguments(obj, pods)]
    problems += _batch_too_large(obj, pods) + _generated_twice(obj, pods)
    problems += _template_overrides(pods, plain)
    return Agreement(problems + _broken_queries(obj, parse_query))


def _pods(obj: AscendInference, layout: Layout) -> tuple[list[dict], list[dict]]:
    """Replica 0's pods as created, and as they would be without the template (what the operator sets)."""
    owner = Owner(obj.name or "x", obj.namespace)
    pods = [o for o in render_replica(obj.spec, owner, 0, layout) if o["kind"] == "Pod"]
    if obj.spec.template is None:
        return pods, pods
    plain_spec = obj.spec.model_copy(update={"template": None})
    return pods, [o for o in render_replica(plain_spec, owner, 0, layout) if o["kind"] == "Pod"]


def _amount(value: Any) -> float | None:
    """A CPU or memory quantity as a number (``500m`` is milli), or None when it is not one."""
    try:
        return float(parse_quantity(str(value).strip()))  # the server's grammar; 500m is 0.5
    except ValueError:
        return None


def _requests_over_limits(obj: AscendInference, pods: list[dict]) -> list[str]:
    problems = []
    for index, container in enumerate(pods[0]["spec"]["containers"]):
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        for resource, request in (resources.get("requests") or {}).items():
            limit = limits.get(resource)
            wanted, allowed = _amount(request), _amount(limit)
            if limit is None or wanted is None or allowed is None or wanted <= allowed:
                continue
            where = _resource_field(obj, container["name"], resource)
            problems.append(
                f"{where}: the request {request} is over the {resource} limit of {limit} after the merge "
                f"(the API server refuses the pod with 'spec.containers[{index}].resources.requests: Invalid "
                f'value: "{request}": must be less than or equal to {resource} limit of {limit}\'); '
                f"set resources.limits.{resource} to at least {request}, or request less"
            )
    return problems


def _resource_field(obj: AscendInference, container: str, resource: str) -> str:
    requests = dict(obj.spec.engine.resources or {}).get("requests") or {}
    if container == "engine" and resource in requests:
        return f"spec.engine.resources.requests.{resource}"
    return f"spec.template.spec.containers[{container}].resources.requests.{resource}"


def _port_collisions(obj: AscendInference, pods: list[dict]) -> list[str]:
    """Containers of a pod share its network: two ports on one number cannot both be bound."""
    problems = []
    seen: dict[tuple[int, str], str] = {}
    for container in pods[0]["spec"]["containers"]:
        for port in container.get("ports") or []:
            key = (port["containerPort"], port.get("protocol", "TCP"))
            name = f"{port.get('name', '?')!r} of container {container['name']!r}"
            if key in seen:
                where = (
                    "spec.engine.port" if key[0] == obj.spec.engine.port else "spec.template.spec.containers"
                )
                problems.append(
                    f"{where}: port {key[0]} is both {seen[key]} and {name} in the same pod; the second to bind "
                    f"it fails with 'Address already in use' (the exporter's metrics port is {EXPORTER_PORT}); "
                    "choose another port"
                )
            seen.setdefault(key, name)
    if not problems and obj.spec.engine.exporter and obj.spec.engine.port == EXPORTER_PORT:
        problems.append(
            f"spec.engine.port: {EXPORTER_PORT} is the exporter's metrics port, which the project's engine images "
            "(the chart's defaults) open in the same pod; the second to bind it fails with 'Address already in "
            "use'; choose another port, or set engine.exporter: false"
        )
    return problems


def _long_arguments(obj: AscendInference, pods: list[dict]) -> list[str]:
    problems = []
    engine = next(c for c in pods[0]["spec"]["containers"] if c["name"] == "engine")
    strings = [*(engine.get("command") or []), *(engine.get("args") or [])]
    strings += [f"{e['name']}={e.get('value', '')}" for e in engine.get("env") or []]
    for text in strings:
        size = len(text.encode())
        if size <= MAX_ARG_BYTES:
            continue
        user = [i for i, arg in enumerate(obj.spec.engine.args) if arg == text]
        where = f"spec.engine.args[{user[0]}]" if user else f"spec.engine (the argument {text[:40]!r}...)"
        problems.append(
            f"{where}: {size} bytes in one argument; Linux refuses any argument or environment string over "
            f"{MAX_ARG_BYTES} bytes (MAX_ARG_STRLEN), so the engine would never start ('argument list too "
            "long'); put long content in a file (a ConfigMap volume) and pass its path"
        )
    return problems


def _batch_too_large(obj: AscendInference, pods: list[dict]) -> list[str]:
    size = obj.spec.batching.max_batch_size
    limit = ((pods[0]["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get("memory")
    if size is None or limit is None or (allowed := _amount(limit)) is None:
        return []
    need = size * TOKEN_ID_BYTES * (obj.spec.model.max_model_len or 1)
    if need <= allowed:
        return []
    return [
        f"spec.batching.maxBatchSize: {size} sequences cannot fit: the engine allocates a token buffer for every "
        f"sequence of the batch at start ({need / 2**30:.0f} GiB at least here), over the pod's memory limit of "
        f"{limit}, so it fails out of memory before serving; engines batch tens to a few thousand sequences "
        "(ascend-fleet tune measures the best size)"
    ]


def _generated_twice(obj: AscendInference, pods: list[dict]) -> list[str]:
    """A flag the spec generates twice: the engine's parser keeps the last, so the first setting is lost."""
    engine = _engine(pods[0])
    argv = [*(engine.get("command") or []), *(engine.get("args") or [])]
    user = obj.spec.engine.args
    generated = argv[: len(argv) - len(user)] if user and argv[-len(user) :] == user else argv
    values: dict[str, list[str]] = {}
    for index, arg in enumerate(generated):
        if not arg.startswith("--"):
            continue
        flag, _, inline = arg.partition("=")
        following = generated[index + 1] if index + 1 < len(generated) else ""
        value = inline or ("" if following.startswith("--") else following)
        values.setdefault(flag, []).append(value)
    problems = []
    for flag, seen in values.items():
        if len(seen) < 2:
            continue
        if flag == "--chunked-prefill-size":
            problems.append(
                f"spec.batching: maxBatchTokens and chunkedPrefill: false both set {flag} "
                f"({' and '.join(seen)}); {obj.spec.engine.type}'s parser keeps the last, so maxBatchTokens "
                "would be ignored; drop one of them"
            )
        else:
            problems.append(
                f"spec: the engine command would carry {flag} {len(seen)} times ({', '.join(seen)}); the "
                f"engine's parser keeps the last, so the other settings would be lost"
            )
    return problems


def _template_overrides(pods: list[dict], plain: list[dict]) -> list[str]:
    """What the template replaced of what the operator sets for gang scheduling, shared memory and HCCL."""
    if pods is plain:
        return []
    pod, base = pods[0], plain[0]
    problems = []
    group = names.ANNOTATION_POD_GROUP
    want = (base["metadata"].get("annotations") or {}).get(group)
    got = (pod["metadata"].get("annotations") or {}).get(group)
    if want is not None and got != want:
        problems.append(
            f"spec.template.metadata.annotations: {group}={got!r} replaces the operator's {want!r}; Volcano "
            "would schedule the pods outside the replica's PodGroup, so the gang would start partly"
        )
    if (
        base["spec"].get("schedulerName")
        and pod["spec"].get("schedulerName") != base["spec"]["schedulerName"]
    ):
        problems.append(
            f"spec.template.spec.schedulerName: {pod['spec'].get('schedulerName')!r} replaces "
            f"{base['spec']['schedulerName']!r}, which gang-schedules each replica (spec.scheduling); set "
            "spec.scheduling instead of the scheduler"
        )
    problems += _engine_overrides(_engine(pod), _engine(base))
    return problems


def _engine(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


def _engine_overrides(engine: dict, base: dict) -> list[str]:
    problems = []
    mounts = {m["mountPath"]: m for m in engine.get("volumeMounts") or []}
    base_mounts = {m["mountPath"]: m for m in base.get("volumeMounts") or []}
    if names.SHM_PATH in base_mounts and mounts.get(names.SHM_PATH) != base_mounts[names.SHM_PATH]:
        problems.append(
            f"spec.template.spec.containers[engine].volumeMounts: {names.SHM_PATH} is mounted from "
            f"{mounts.get(names.SHM_PATH, {}).get('name')!r} instead of the operator's in-memory volume "
            "(spec.engine.shmSize); the engines' collective communication needs it; set spec.engine.shmSize"
        )
    # The operator's own variables (POD_IP, which HCCL_IF_IP reads, among them) are refused as reserved names.
    return problems


def _broken_queries(obj: AscendInference, parse_query: QueryParser) -> list[str]:
    """A rule's raw PromQL through a real PromQL parser: Prometheus would refuse it at every evaluation.

    A query that parses must also stay in the object's namespace (api/query_scope.py): the control loop
    validates every object itself before it plans a query, so a refused query is never sent.
    """
    problems = []
    for index, rule in enumerate(obj.spec.rules):
        if rule.query is None:
            continue
        parsed = parse_query(rule.query)
        if parsed.limit == "start":
            problems.append(
                f"spec.rules[{index}].query: not checked yet: {parsed.stopped}; the operator checks it again on "
                "its next pass"
            )
        elif parsed.limit is not None:
            problems.append(
                f"spec.rules[{index}].query: the PromQL parser was stopped after using {parsed.stopped} on this "
                f"{len(rule.query)}-character query; a query with fewer operators and less nesting fits (name "
                "the inner part with a Prometheus recording rule and query the recorded series)"
            )
        elif parsed.error is not None:
            problems.append(
                f"spec.rules[{index}].query: not valid PromQL ({parsed.error}); Prometheus answers every "
                "evaluation with a bad_data error, so the rule would never act"
            )
        else:
            problem = scope_problem(f"spec.rules[{index}].query", parsed.selectors, obj.namespace)
            problems += [problem] if problem else []
    return problems
