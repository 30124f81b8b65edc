"""The endpoint picker's configuration (its ``EndpointPickerConfig``) and the names it refers to.

Scorers over the engines' own metrics, a saturation filter, flow control with one priority band per class;
with ``spec.variants`` the project's variant filter; with ``spec.batching.ttftTarget`` the project's adaptive
in-flight limit; with classes the prompt-length classifier; for a two-role
fleet the P/D profiles. :mod:`.routing` puts it into the picker's ConfigMap. Pure.
"""

from __future__ import annotations

import copy

from ..api import names
from ..api.v1alpha1 import AscendInferenceSpec, PriorityClass
from ..api.variants import served_name
from ..engines import facts_of
from .metadata import Owner

PICKER_CONFIG_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
# The header the endpoint picker reads a request's objective from.
OBJECTIVE_HEADER = "x-gateway-inference-objective"
# The prompt-length classifier (tools/epp/classify): it names the objective of a request that has none. The
# project's picker runs it in front of itself (CLASSIFY_FLAG); the Inference Extension's body-based router (BBR)
# built with it (the picker image's /classifier, classifier_args) serves gateways that chain one themselves.
CLASSIFIER_PLUGIN = "prompt-length-objective"
# The picker's filter by pod label that sends a rewritten request to a pod of the variant it was rewritten to.
VARIANT_FILTER = "variant-filter"
# The project's in-flight limit per endpoint that adapts to a first-token target (tools/epp/adaptive).
ADAPTIVE_LIMIT = "adaptive-batch-limit"
# The request body field vLLM (``--scheduling-policy priority``) and SGLang (``--enable-priority-scheduling``)
# read a request's priority from.
ENGINE_PRIORITY_FIELD = "priority"
# How long a request may wait in the picker's queues before it is shed, unless the client sets a deadline.
REQUEST_TTL = "60s"
# Engine queue depth at which the picker counts an endpoint as saturated and holds requests back: small, so
# queuing (and with it priority order) happens at the picker, yet the engine always has the next batch.
SATURATION_QUEUE_DEPTH = 4
SATURATION_KV_CACHE = 0.9
# Gauges older than this make the picker count an engine as full and pass it over. The upstream default
# (200 ms) is shorter than a busy engine's /metrics sometimes takes to answer: the picker then sends
# everything to the one engine whose last scrape happened to be quick.
METRICS_STALENESS = "1s"


def objective_name(name: str, priority_class: PriorityClass) -> str:
    """The InferenceObjective of one class: ``<name>-<class>``, the value clients send in the objective header."""
    return f"{name}-{priority_class.name}"


def classifies(spec: AscendInferenceSpec) -> bool:
    """Whether the picker classifies requests that name no objective: wherever the fleet has priority classes."""
    return bool(spec.routing.classes)


def picker_config(spec: AscendInferenceSpec, owner: Owner | None = None) -> dict:
    """The endpoint picker's ``EndpointPickerConfig``: scorers over the engine's metrics, flow control per class.

    With ``owner`` (the objectives' names come from it) and classes, also the prompt-length classifier, which
    needs the picker started with :data:`CLASSIFY_FLAG` (:func:`picker_args` with ``classify``).
    """
    extractor: dict = {"type": "core-metrics-extractor"}
    picker_engine = facts_of(spec.engine.type).picker_engine
    if picker_engine is not None:  # the extractor reads vLLM's metric names unless told otherwise
        extractor["parameters"] = {"defaultEngine": picker_engine}
    bands = [
        {"priority": c.priority, "maxRequests": c.max_queue}
        for c in sorted(spec.routing.classes, key=lambda c: -c.priority)
    ]
    detector = saturation_detector(spec)
    variants = variant_filter(spec)
    adaptive = adaptive_limit(spec)
    classifier = (
        [{"type": CLASSIFIER_PLUGIN, "parameters": classifier_plugin(spec, owner)}]
        if owner is not None and classifies(spec)
        else []
    )
    config = {
        "apiVersion": PICKER_CONFIG_API_VERSION,
        "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            # The best endpoint and spec.routing.picker.fallbacks more, in order, for the gateway to retry on.
            {
                "type": "max-score-picker",
                "parameters": {"maxNumOfEndpoints": 1 + spec.routing.picker.fallbacks},
            },
            {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
            extractor,
            detector,
            *variants,
            *adaptive,
            *classifier,
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    # With spec.variants, first: only the pods of the variant the rewrite drew can answer. The
                    # detector then passes over the saturated ones among them, and keeps them all when every
                    # one is saturated; after it, a saturated variant would be left with no pod at all.
                    *({"pluginRef": v["type"]} for v in variants),
                    # As a filter, before any scorer: an engine whose gauges are stale (its scrapes fail: a
                    # dead engine or node) or that is saturated is passed over while another is not.
                    {"pluginRef": detector["type"]},
                    # With batching.ttftTarget: of those, the engines under their adaptive in-flight limit
                    # (all of them when none is; the detector and flow control then hold requests back).
                    *({"pluginRef": a["type"]} for a in adaptive),
                    {"pluginRef": "queue-scorer", "weight": 2},
                    {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                    {"pluginRef": "prefix-cache-scorer", "weight": 3},
                    {"pluginRef": "max-score-picker"},
                ],
            }
        ],
        "saturationDetector": {"pluginRef": detector["type"]},
        "flowControl": {"defaultRequestTTL": REQUEST_TTL, "priorityBands": bands},
    }
    return pd_scheduling(config) if spec.disaggregation is not None else config


# The project's P/D plugins (tools/epp/disaggregation), which follow llm-d's: a role filter heading each
# profile, the handler running decode then prefill, and the one naming the prefill pod in the request header
# the decode pod's sidecar reads (x-prefiller-host-port). The profiles are named as the handler's defaults.
# The pair filter is the project's own: in the prefill profile, it keeps the prefill pods of the chosen
# decode pod's revision (one hash over both roles' pods, so equal values mean engines of the same spec).
PD_ROLE_FILTER = "pd-role-filter"
PD_PAIR_FILTER = "pd-pair-filter"
PD_PROFILE_HANDLER = "pd-profile-handler"
PD_HEADER_HANDLER = "prefill-header-handler"
PD_PROFILES = (names.PD_DECODE, names.PD_PREFILL)


def pd_scheduling(config: dict) -> dict:
    """``config`` (the picker's usual configuration) split for a two-role fleet: a ``decode`` and a ``prefill``
    profile, each the usual one behind a filter on the pods' ``llm-d.ai/role`` label (the prefill one also
    behind the pair filter on the pods' revision), the P/D profile handler choosing between them and the header
    handler naming the prefill pod. A new dict; ``config`` is unchanged."""
    pd = copy.deepcopy(config)
    (usual,) = pd["schedulingProfiles"]
    pd["plugins"] += [
        *(
            {
                "type": PD_ROLE_FILTER,
                "name": f"{role}-filter",
                "parameters": {"label": names.LABEL_LLMD_ROLE, "roles": [role]},
            }
            for role in PD_PROFILES
        ),
        {"type": PD_PAIR_FILTER, "parameters": {"label": names.LABEL_REVISION}},
        {"type": PD_PROFILE_HANDLER},
        {"type": PD_HEADER_HANDLER},
    ]
    pairing = {names.PD_PREFILL: [{"pluginRef": PD_PAIR_FILTER}]}
    pd["schedulingProfiles"] = [
        {
            "name": role,
            "plugins": [
                {"pluginRef": f"{role}-filter"},
                *pairing.get(role, []),
                *copy.deepcopy(usual["plugins"]),
            ],
        }
        for role in PD_PROFILES
    ]
    return pd


def variant_filter(spec: AscendInferenceSpec) -> list[dict]:
    """The project's variant filter (tools/epp/variants) for a fleet with spec.variants, else nothing.

    The upstream picker rewrites a request's model to one variant's served name but then picks among every pod
    of the pool; this filter keeps the pods labelled with that variant. Its parameters map each served name to
    the variant label's value.
    """
    if not spec.variants:
        return []
    models = {served_name(spec.model.name, v): v.name for v in spec.variants}
    return [{"type": VARIANT_FILTER, "parameters": {"label": names.LABEL_VARIANT, "models": models}}]


def adaptive_limit(spec: AscendInferenceSpec) -> list[dict]:
    """The project's adaptive in-flight limit (tools/epp/adaptive) for a fleet with batching.ttftTarget, else
    nothing: its bounds (minBatchSize, default 1, and maxBatchSize) and the target in milliseconds.

    The plugin is one instance: its filter in the profile(s), its request hooks counting what each engine has in
    flight and timing each first token; on a two-role fleet it counts the decode endpoint, where requests go.
    """
    batching = spec.batching
    if batching.ttft_target is None or batching.max_batch_size is None:
        return []
    target_ms = batching.ttft_target * 1000
    return [
        {
            "type": ADAPTIVE_LIMIT,
            "parameters": {
                "minBatchSize": batching.adaptive_min,
                "maxBatchSize": batching.max_batch_size,
                "ttftTargetMs": int(target_ms) if target_ms == int(target_ms) else round(target_ms, 3),
            },
        }
    ]


def saturation_detector(spec: AscendInferenceSpec) -> dict:
    """When the picker holds requests back in its priority bands instead of sending them to an engine's queue.

    From the engines' own queue and KV-cache gauges (the picker scrapes them every 50 ms): an engine with
    ``SATURATION_QUEUE_DEPTH`` requests waiting is full. Requests that arrive within one scrape of each other
    can still pass before the gauges show it; they then wait in the engine's queue.
    """
    return {
        "type": "utilization-detector",
        "parameters": {
            "queueDepthThreshold": SATURATION_QUEUE_DEPTH,
            "kvCacheUtilThreshold": SATURATION_KV_CACHE,
            "metricsStalenessThreshold": METRICS_STALENESS,
        },
    }


def classifier_plugin(spec: AscendInferenceSpec, owner: Owner) -> dict:
    """The prompt-length classifier's parameters: one entry per class, its objective and where it starts.

    With ``scheduling.priority`` the request body also gets ``priority``: the class's priority negated,
    because both engines (as rendered) serve lower values first while the picker dispatches higher first.
    """
    classes = []
    for c in spec.routing.classes:
        entry: dict = {"objective": objective_name(owner.name, c), "minPromptTokens": c.min_prompt_tokens}
        if spec.scheduling.priority:
            entry["enginePriority"] = -c.priority
        classes.append(entry)
    parameters: dict = {"header": OBJECTIVE_HEADER, "classes": classes}
    if spec.scheduling.priority:
        parameters["priorityField"] = ENGINE_PRIORITY_FIELD
    return parameters
