"""Prefill/decode disaggregation: one fleet as two roles, prefill and decode, with the KV cache moving between them.

``spec.disaggregation`` gives each role its own parallel layout (its ``data`` is that role's replicas) and the KV
transfer: the engine's connector and port, defaulted per engine and chip from the engine's facts. The checks that
the CRD cannot state (they need the engine's facts and the layout) are sentences here, which the ``InvalidSpec``
condition and ``ascend-fleet validate`` report.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import JsonDict

from ..engines.base import KvConnector, KvTransfer
from ..engines.registry import facts_of
from .availability import TOPOLOGY_KEYS
from .bounds import MAX_IMAGE_LENGTH, MAX_QUALIFIED_NAME_LENGTH
from .fields import Model
from .k8s import qualified_name_problem
from .policy import REPLICA_BOUNDS_RULE, Role, Rule

# llm-d's published P/D sidecar image, of the llm-d-inference-scheduler release tools/pd-sidecar builds (v0.4.0).
DEFAULT_PD_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0"

ROLES: tuple[Role, ...] = ("prefill", "decode")
MAX_CONNECTOR_LENGTH = 64  # the longest connector name an engine registers is under 40 characters


class RoleParallelism(Model):
    """One role's layout: tensor x pipeline NPUs per instance, ``data`` instances."""

    tensor: int = Field(default=1, ge=1, le=64, description="Tensor-parallel size of each instance.")
    pipeline: int = Field(default=1, ge=1, le=64, description="Pipeline-parallel stages of each instance.")
    data: int = Field(default=1, ge=1, le=1024, description="Number of instances (replicas) of this role.")


class RoleAutoscaling(Model):
    """Bounds for the role's replicas, within which a rule with this role scales it."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [REPLICA_BOUNDS_RULE]})

    min_replicas: int = Field(default=1, ge=1, description="Fewest instances of the role.")
    max_replicas: int = Field(default=8, ge=1, description="Most instances of the role.")

    @model_validator(mode="after")
    def _bounds(self) -> RoleAutoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) is above maxReplicas ({self.max_replicas}); "
                "make minReplicas <= maxReplicas"
            )
        return self


class RoleSpec(Model):
    """One role of a two-role fleet."""

    parallelism: RoleParallelism = Field(default_factory=RoleParallelism)
    autoscaling: RoleAutoscaling | None = Field(
        default=None,
        description="Bounds within which rules with this role (scale_up, scale_down) scale the role's "
        "parallelism.data; absent: minReplicas 1, maxReplicas 8.",
    )

    def bounds(self) -> RoleAutoscaling:
        """The role's bounds as written, or the defaults."""
        return self.autoscaling or RoleAutoscaling()


class KvTransferSpec(Model):
    """How the KV cache moves from prefill to decode instances."""

    connector: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CONNECTOR_LENGTH,
        description="vllm-ascend: MooncakeConnectorV1 (default), MooncakeLayerwiseConnector or AscendStoreConnector; "
        "SGLang: ascend (its transfer backend).",
    )
    port: int | None = Field(
        default=None,
        ge=1024,
        le=65535,
        description="vllm-ascend: kv_port, each instance listening on port .. port + its NPUs, above vllm-ascend's "
        "own range [20000, 20000 + 1000 x NPUs per node) (default 28000 on 8-NPU nodes, 36000 on 16); SGLang: "
        "--disaggregation-bootstrap-port (default 8998).",
    )


# The well-known node label of a zone, which cloud providers' node controllers set (kubernetes.io docs,
# "Well-Known Labels, Annotations and Taints").
DEFAULT_TOPOLOGY_KEY = "topology.kubernetes.io/zone"
PlacementMode = Literal["required", "preferred", "none"]
# A label key as the API server takes it: an optional DNS-subdomain prefix and '/', then a name of up to 63
# characters (the models check the exact lengths and say why; the CRD refuses the same keys at kubectl apply).
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
)


class PairPlacement(Model):
    """Where the two roles run relative to each other: in one domain of a node label, which the KV transfer needs
    when it moves over a network that does not cross that domain."""

    topology_key: str = Field(
        default=DEFAULT_TOPOLOGY_KEY,
        min_length=1,
        max_length=MAX_QUALIFIED_NAME_LENGTH,
        # The pattern goes to the CRD only: the model's own check says which part of the key is wrong.
        json_schema_extra={"pattern": LABEL_KEY_PATTERN},
        description="The node label whose value names a domain the fleet's pods share (a zone, or the label your "
        "nodes carry for the NPU network the KV cache crosses, such as a super-pod or switch label).",
    )
    mode: PlacementMode = Field(
        default="preferred",
        description="required: every pod of both roles goes where the fleet's other pods are, in one domain "
        "(nodes without the label are not used); preferred: the scheduler favours that domain but may leave it; "
        "none: no rule.",
    )

    @field_validator("topology_key")
    @classmethod
    def _a_label_key(cls, value: str) -> str:
        problem = qualified_name_problem(value)
        if problem:
            raise ValueError(f"topologyKey must be a node label key: {problem}")
        return value


def _data_of(role: str) -> str:
    """CEL at the disaggregation node: the role's instances, with the default."""
    node = f"self.{role}"
    return f"double(has({node}.parallelism) && has({node}.parallelism.data) ? {node}.parallelism.data : 1)"


RATIO_BOUNDS_SENTENCE = "ratio.min must be <= ratio.max (prefill instances per decode instance)"
_RATIO_RULES: list[JsonDict] = [
    {
        "rule": f"!has(self.ratio) || !has(self.ratio.min) || {_data_of('prefill')} >= self.ratio.min * "
        f"{_data_of('decode')}",
        "message": "the prefill:decode instances (prefill.parallelism.data per decode.parallelism.data) are "
        "below ratio.min; add prefill instances, or lower ratio.min",
        "fieldPath": ".ratio.min",
    },
    {
        "rule": f"!has(self.ratio) || !has(self.ratio.max) || {_data_of('prefill')} <= self.ratio.max * "
        f"{_data_of('decode')}",
        "message": "the prefill:decode instances (prefill.parallelism.data per decode.parallelism.data) are "
        "above ratio.max; add decode instances, or raise ratio.max",
        "fieldPath": ".ratio.max",
    },
]


class RatioBound(Model):
    """Prefill instances per decode instance that role scaling keeps to (0.5 is 1:2, 2 is 2:1)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
                    "message": RATIO_BOUNDS_SENTENCE,
                }
            ]
        }
    )

    min: float | None = Field(
        default=None,
        gt=0,
        le=1024,
        description="Fewest prefill instances per decode instance, e.g. 0.5 for 1:2 (absent: no lower bound).",
    )
    max: float | None = Field(
        default=None,
        gt=0,
        le=1024,
        description="Most prefill instances per decode instance, e.g. 2 for 2:1 (absent: no upper bound).",
    )

    @field_validator("min", "max", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        """``"1:2"`` reads well but is not a number: say which number it is."""
        if isinstance(value, str) and value.count(":") == 1:
            prefill, _, decode = value.partition(":")
            if prefill.strip().isdigit() and decode.strip().isdigit() and int(decode) > 0:
                raise ValueError(
                    f"write {value!r} as a decimal, prefill instances per decode instance: "
                    f"{int(prefill) / int(decode):g}"
                )
        return value

    @model_validator(mode="after")
    def _ordered(self) -> RatioBound:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"{RATIO_BOUNDS_SENTENCE}; got min {self.min:g} and max {self.max:g}")
        return self

    def problem(self, prefill: int, decode: int) -> str | None:
        """Why ``prefill`` and ``decode`` instances fall outside the bound (None: they fit), a sentence part."""
        if self.min is not None and prefill < self.min * decode:
            return f"{ratio_text(prefill, decode)}, below ratio.min {self.min:g}"
        if self.max is not None and prefill > self.max * decode:
            return f"{ratio_text(prefill, decode)}, above ratio.max {self.max:g}"
        return None


def ratio_text(prefill: int, decode: int) -> str:
    """``prefill:decode 3:2 (1.5 prefill per decode)``."""
    return f"prefill:decode {prefill}:{decode} ({prefill / decode:.3g} prefill per decode)"


class Disaggregation(Model):
    """Prefill and decode on instances of their own (spec.parallelism is then unused)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [*_RATIO_RULES]})

    prefill: RoleSpec = Field(description="The instances that compute prompts and hand their KV cache over.")
    decode: RoleSpec = Field(description="The instances that receive the KV cache and generate tokens.")
    kv_transfer: KvTransferSpec = Field(default_factory=KvTransferSpec)
    sidecar_image: str | None = Field(
        default=None,
        max_length=MAX_IMAGE_LENGTH,
        description="Image of llm-d's P/D sidecar, which decode pods run in front of their engine with "
        "routing.mode inferencePool; default the operator's routing.pdSidecarImage.",
    )
    placement: PairPlacement = Field(
        default_factory=PairPlacement,
        description="Keeps prefill and decode pods in one topology domain (pod affinity toward the fleet's "
        "pods); absent: preferred, over topology.kubernetes.io/zone.",
    )
    ratio: RatioBound | None = Field(
        default=None,
        description="Bounds on prefill instances per decode instance (as decimals: 0.5 is 1:2): the layout as "
        "written must fit them, and a rule's scale_up or scale_down of a role that would leave them does not act.",
    )

    @model_validator(mode="after")
    def _layout_fits_ratio(self) -> Disaggregation:
        if self.ratio is not None:
            problem = self.ratio.problem(self.prefill.parallelism.data, self.decode.parallelism.data)
            if problem is not None:
                raise ValueError(
                    f"the layout gives {problem}; set prefill.parallelism.data and decode.parallelism.data "
                    "within spec.disaggregation.ratio"
                )
        return self

    def role(self, role: str) -> RoleSpec:
        """The settings of one role."""
        return self.prefill if role == "prefill" else self.decode


def kv_transfer_of(engine_type: str) -> KvTransfer | None:
    """The engine's KV-transfer facts (None: the engine has no prefill/decode split here)."""
    return facts_of(engine_type).kv_transfer


def fill_kv_defaults(split: Disaggregation, engine_type: str, chip: str, npus_per_node: int) -> None:
    """The connector and port the engine takes by default on this chip, where the spec leaves them out."""
    facts = kv_transfer_of(engine_type)
    if facts is None:
        return
    if split.kv_transfer.connector is None and chip in facts.default_connector:
        split.kv_transfer.connector = facts.default_connector[chip]
    if split.kv_transfer.port is None:
        split.kv_transfer.port = facts.default_port(npus_per_node)


def role_instance_cap(engine_type: str, role: str) -> tuple[int, str] | None:
    """The most instances of ``role`` the engine runs in this operator, and why (None: no such cap)."""
    if engine_type == "sglang" and role == "prefill":
        # SGLang's prefill leader (node rank 0) creates the MemFabric store at ASCEND_MF_STORE_URL when it starts.
        return 1, (
            "SGLang's ascend backend has every prefill leader create the MemFabric store at ASCEND_MF_STORE_URL, "
            "which this operator points at the first prefill leader, so a second prefill instance could not start"
        )
    return None


def _names(values: Iterable[str]) -> str:
    items = list(values)
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0]


def connector_problems(split: Disaggregation, engine_type: str) -> list[str]:
    """An engine without a P/D split, a connector the engine lacks, or roles the connector refuses."""
    facts = kv_transfer_of(engine_type)
    label = facts_of(engine_type).label
    if facts is None:
        return [f"spec.disaggregation: {engine_type} has no prefill/decode split in this operator"]
    name = split.kv_transfer.connector
    connector = facts.connector(name or "")
    if connector is None:
        others = [f"{t} takes {c.name}" for t, c in _other_engines_with(name or "", engine_type)]
        hint = f" ({'; '.join(others)}: set engine.type to match)" if others else ""
        return [
            f"spec.disaggregation.kvTransfer.connector: {label} ({engine_type}) has no connector {name!r}{hint}; "
            f"use {_names(c.name for c in facts.connectors)}"
        ]
    problems = []
    prefill, decode = split.prefill.parallelism, split.decode.parallelism
    if connector.prefill_tensor_at_least_decode and prefill.tensor < decode.tensor:
        problems.append(
            f"spec.disaggregation: {connector.name} needs the prefill instances' tensor size at least the decode "
            f"instances' (prefill tensor {prefill.tensor} < decode tensor {decode.tensor}; its worker refuses to "
            f"start); raise prefill.parallelism.tensor to {decode.tensor} or lower decode's to {prefill.tensor}"
        )
    if connector.decode_single_stage and decode.pipeline > 1:
        problems.append(
            f"spec.disaggregation.decode.parallelism.pipeline: {connector.name} takes decode instances of one "
            f"pipeline stage (pipeline {decode.pipeline}); set decode pipeline 1 and raise its tensor instead"
        )
    return problems


def _other_engines_with(name: str, engine_type: str) -> list[tuple[str, KvConnector]]:
    """The other production engines that have a connector of that name."""
    from ..engines.registry import builtin_facts

    found = []
    for facts in builtin_facts():
        kv = facts.kv_transfer
        connector = kv.connector(name) if kv is not None and facts.type != engine_type else None
        if connector is not None:
            found.append((facts.type, connector))
    return found


def port_problems(
    port: int, engine_type: str, npus_per_node: int, npus_per_pod: dict[str, int], taken: dict[int, str]
) -> list[str]:
    """A KV port inside the engine's own range, past 65535 with its width, or on a port the pod already uses.

    ``npus_per_pod`` holds each role's NPUs per pod (an instance listens on one port per NPU, with vllm-ascend);
    ``taken`` names the other ports of the engine pods (HTTP, exporter, rendezvous).
    """
    facts = kv_transfer_of(engine_type)
    if facts is None:
        return []
    field = "spec.disaggregation.kvTransfer.port"
    problems = []
    reserved = facts.reserved(npus_per_node)
    if reserved is not None and reserved[0] <= port < reserved[1]:
        problems.append(
            f"{field}: {facts.port_name} {port} lies in [{reserved[0]}, {reserved[1]}), which {engine_type} keeps "
            f"for its own transport on {npus_per_node}-NPU nodes (1000 ports per NPU from {reserved[0]}); use "
            f"{reserved[1]} or above"
        )
    widest = max(npus_per_pod.values())
    ports = facts.ports_taken(port, widest)
    if ports.stop - 1 > 65535:
        problems.append(
            f"{field}: each instance listens on {facts.port_name} .. {facts.port_name} + its NPUs ({port} .. "
            f"{ports.stop - 1} here), past 65535; use at most {65535 - (len(ports) - 1)}"
        )
    clashes = sorted(p for p in taken if p in ports)
    if clashes:
        width = f" .. {ports.stop - 1}" if len(ports) > 1 else ""
        problems.append(
            f"{field}: {port}{width} takes port {clashes[0]}, the pods' {taken[clashes[0]]}; move the KV port "
            f"so that its range misses {clashes[0]}"
        )
    return problems


# A two-role fleet's rules each name a role: a scale has to change one role's instances, and a replica index
# names a replica of each role (docs/decisions.md, "A rule on a two-role fleet names its role").
ROLE_NEEDED_SENTENCE = (
    "with spec.disaggregation every rule names the role it reads and acts on: add role: prefill or role: decode "
    "(a fleet-wide rule would scale or restart both roles alike)"
)
ROLE_WITHOUT_SPLIT_SENTENCE = (
    "role (prefill or decode) needs spec.disaggregation, a fleet of two roles; remove role from the rule"
)


def rule_role_problems(rules: list[Rule], split: Disaggregation | None) -> list[str]:
    """A rule without a role on a two-role fleet, or with one on a fleet of one role, each a sentence."""
    problems = []
    for index, rule in enumerate(rules):
        if split is not None and rule.role is None:
            problems.append(f"spec.rules[{index}] ({rule.display_name()}): {ROLE_NEEDED_SENTENCE}")
        elif split is None and rule.role is not None:
            problems.append(f"spec.rules[{index}].role: {ROLE_WITHOUT_SPLIT_SENTENCE}")
    return problems


# ----- the same checks as CEL, where the CRD can state them (at the spec node) -----

_SPLIT = "self.disaggregation"
_KV = f"{_SPLIT}.kvTransfer"


def _role_size(role: str, field: str) -> str:
    node = f"{_SPLIT}.{role}"
    return f"(has({node}.parallelism) && has({node}.parallelism.{field}) ? {node}.parallelism.{field} : 1)"


def _connector_is(engine_type: str, name: str, default: bool) -> str:
    """CEL: the engine is ``engine_type`` and its connector, as written or defaulted, is ``name``."""
    written = f"has({_KV}) && has({_KV}.connector)"
    absent = f"!({written})"
    chosen = f"({written} && {_KV}.connector == '{name}')"
    if default:
        chosen = f"({chosen} || {absent})"
    return f"self.engine.type == '{engine_type}' && {chosen}"


def rule_role_validations() -> list[dict]:
    """CEL at the spec node: every rule of a two-role fleet names a role, and no rule of another fleet does."""
    return [
        {
            "rule": f"!has({_SPLIT}) || !has(self.rules) || self.rules.all(r, has(r.role))",
            "message": ROLE_NEEDED_SENTENCE,
            "fieldPath": ".rules",
        },
        {
            "rule": f"has({_SPLIT}) || !has(self.rules) || self.rules.all(r, !has(r.role))",
            "message": ROLE_WITHOUT_SPLIT_SENTENCE,
            "fieldPath": ".rules",
        },
    ]


PLACEMENT_CLASH_SENTENCE = (
    "spec.disaggregation.placement: mode required keeps every pod in one domain of its topologyKey, and "
    "spec.availability spreads the leaders over several domains of the same key, so a second leader could never "
    "start; use mode preferred, another topologyKey, or another spread"
)


def placement_validation() -> dict:
    """CEL at the spec node: a required placement over the key spec.availability spreads leaders across."""
    placement = f"{_SPLIT}.placement"
    key = f"(has({placement}.topologyKey) ? {placement}.topologyKey : '{DEFAULT_TOPOLOGY_KEY}')"
    spread = (
        f"(has(self.availability.spread) && self.availability.spread == 'zone' ? '{TOPOLOGY_KEYS['zone']}' : "
        f"'{TOPOLOGY_KEYS['node']}')"
    )
    return {
        "rule": f"!has({_SPLIT}) || !has({placement}) || !has({placement}.mode) || {placement}.mode != 'required' "
        f"|| !has(self.availability) || {spread} != {key}",
        "message": PLACEMENT_CLASH_SENTENCE,
        "fieldPath": ".disaggregation.placement",
    }


def disaggregation_validations(node: str) -> list[dict]:
    """CEL at the spec node: the connector belongs to the engine, the port misses the engine's own range, and the
    roles fit the connector; ``node`` is the CEL of the NPUs per node."""
    from ..engines.registry import builtin_facts

    rules: list[dict] = [
        *rule_role_validations(),
        placement_validation(),
        {
            "rule": f"!has({_SPLIT}) || !has(self.variants) || size(self.variants) == 0",
            "message": "spec.disaggregation and spec.variants do not go together yet: a two-role fleet serves one "
            "precision; remove spec.variants, or spec.disaggregation",
            "fieldPath": ".disaggregation",
        },
        {
            "rule": f"!has({_SPLIT}) || !has(self.parallelism) || (self.parallelism.data == 1 && "
            "self.parallelism.tensor == 1 && self.parallelism.pipeline == 1)",
            "message": "spec.parallelism is unused with spec.disaggregation: each role has its own "
            "(disaggregation.prefill.parallelism, disaggregation.decode.parallelism); remove spec.parallelism, and "
            "scale a role by its parallelism.data rather than through the scale subresource",
            "fieldPath": ".parallelism",
        },
    ]
    for facts in builtin_facts():
        kv = facts.kv_transfer
        if kv is None:
            rules.append(
                {
                    "rule": f"!has({_SPLIT}) || self.engine.type != '{facts.type}'",
                    "message": f"spec.disaggregation: {facts.type} has no prefill/decode split in this operator",
                    "fieldPath": ".disaggregation",
                }
            )
            continue
        names = [c.name for c in kv.connectors]
        listed = "[" + ", ".join(f"'{n}'" for n in names) + "]"
        rules.append(
            {
                "rule": f"!has({_SPLIT}) || self.engine.type != '{facts.type}' || !has({_KV}) || "
                f"!has({_KV}.connector) || {_KV}.connector in {listed}",
                "message": f"spec.disaggregation.kvTransfer.connector: {facts.label} ({facts.type}) takes "
                f"{_names(names)}",
                "fieldPath": ".disaggregation.kvTransfer.connector",
            }
        )
        if kv.reserved_base is not None:
            end = f"({kv.reserved_base} + {kv.reserved_per_npu} * {node})"
            rules.append(
                {
                    "rule": f"!has({_SPLIT}) || self.engine.type != '{facts.type}' || !has({_KV}) || "
                    f"!has({_KV}.port) || {_KV}.port < {kv.reserved_base} || {_KV}.port >= {end}",
                    "message": f"spec.disaggregation.kvTransfer.port: {facts.type} keeps [{kv.reserved_base}, "
                    f"{kv.reserved_base} + {kv.reserved_per_npu} x NPUs per node) for its own transport "
                    f"(so {kv.port_name} >= 28000 on 8-NPU nodes, >= 36000 on 16-NPU nodes); pick a port above it",
                    "fieldPath": ".disaggregation.kvTransfer.port",
                }
            )
        for connector in kv.connectors:
            default = connector.name in kv.default_connector.values()
            uses = _connector_is(facts.type, connector.name, default)
            if connector.prefill_tensor_at_least_decode:
                rules.append(
                    {
                        "rule": f"!has({_SPLIT}) || !({uses}) || "
                        f"{_role_size('prefill', 'tensor')} >= {_role_size('decode', 'tensor')}",
                        "message": f"spec.disaggregation: {connector.name} needs the prefill instances' tensor "
                        "size at least the decode instances' (its worker refuses to start otherwise)",
                        "fieldPath": ".disaggregation",
                    }
                )
            if connector.decode_single_stage:
                rules.append(
                    {
                        "rule": f"!has({_SPLIT}) || !({uses}) || {_role_size('decode', 'pipeline')} == 1",
                        "message": f"spec.disaggregation.decode.parallelism.pipeline: {connector.name} takes "
                        "decode instances of one pipeline stage; set decode pipeline 1",
                        "fieldPath": ".disaggregation.decode.parallelism.pipeline",
                    }
                )
    return rules


# "-prefill-<replica>-<rank>" is 8 characters longer than "-<replica>-<rank>", and a pod's hostname stays a
# 63-character DNS label.
MAX_TWO_ROLE_NAME_LENGTH = 44


def two_role_name_problem(name: str) -> str | None:
    """Why a two-role fleet's name is too long for its pods' names, or None."""
    if len(name) <= MAX_TWO_ROLE_NAME_LENGTH:
        return None
    return (
        f"metadata.name '{name}' is {len(name)} characters; a fleet with spec.disaggregation takes at most "
        f"{MAX_TWO_ROLE_NAME_LENGTH}, because its pods are named <name>-prefill-<replica>-<rank>"
    )


def root_validation() -> dict:
    """CEL at the object root: a two-role fleet's name leaves room for its pods' role in their names."""
    return {
        "rule": f"!has(self.spec.disaggregation) || size(self.metadata.name) <= {MAX_TWO_ROLE_NAME_LENGTH}",
        "message": f"a fleet with spec.disaggregation takes a metadata.name of at most {MAX_TWO_ROLE_NAME_LENGTH} "
        "characters, because its pods are named <name>-prefill-<replica>-<rank>",
    }
