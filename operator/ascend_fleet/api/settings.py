"""Operator configuration: one settings object, read from a YAML file and environment variables.

The Helm chart renders the file into a ConfigMap mounted at ``/etc/ascend-fleet/config.yaml``;
``ascend-fleet run --config`` and ``ASCEND_FLEET_CONFIG`` point at it. Environment variables
``ASCEND_FLEET_PROMETHEUS_URL`` and ``ASCEND_FLEET_CONTROL_INTERVAL`` override single values, and
command-line flags override both.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from . import strict_yaml
from .bounds import MAX_IMAGE_LENGTH
from .checks import MAX_WINDOW_SECONDS
from .disaggregation import DEFAULT_PD_SIDECAR_IMAGE
from .images import DEFAULT_PICKER_IMAGE
from .units import format_duration
from .v1alpha1 import Duration, Model

# RFC 9110's token: the characters an HTTP field name may have.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def above_zero(value: float, info: ValidationInfo, model: type[Model]) -> float:
    """A duration the operator waits or repeats by: at zero it would repeat without a pause, keeping a core busy."""
    if value > 0:
        return value
    default = model.model_fields[info.field_name or ""].default
    raise ValueError(
        f"{format_duration(value) if value == 0 else value} is not above zero, and the operator would repeat "
        f"without a pause, keeping a core busy; use a positive duration such as the default "
        f"{format_duration(default)}"
    )


def header_problem(name: str, value: str) -> str | None:
    """A header that would split the HTTP request: a line break lets it write headers of its own."""
    if not _HEADER_NAME.fullmatch(name):
        return (
            f"the header name {name!r} is not an HTTP field name (letters, digits and !#$%&'*+-.^_`|~, no spaces, "
            "colons or line breaks)"
        )
    if any(c in value for c in "\r\n\0"):
        return f"the value of {name} holds a line break or NUL, which would end the header early; keep it on one line"
    return None


def url_credentials_problem(url: str) -> str | None:
    """A URL with a user name or password in it (``https://user:password@host``): the operator prints its
    Prometheus URL in conditions, Events and logs, so the credentials would go there too. The sentence never
    repeats the URL."""
    rest = url.split("://", 1)[1] if "://" in url else url
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" not in authority:
        return None
    return (
        "the URL holds credentials (user:password@ before the host), which would be shown wherever the "
        "operator names its Prometheus: conditions, Events and logs; give the URL without them and the "
        "credentials as files from a Secret: prometheus.basicAuth.usernameFile and passwordFile, or "
        "prometheus.bearerTokenFile"
    )


class BasicAuthSettings(Model):
    username_file: str = Field(min_length=1, description="File holding the basic-auth user name.")
    password_file: str = Field(min_length=1, description="File holding the basic-auth password.")


class PrometheusSettings(Model):
    """How the control loop reaches Prometheus (or Thanos, Mimir, an authenticating proxy in front of them).

    Credentials are files (mounted Secrets), read again for every cycle, so a rotated token or password
    applies without a restart, as Prometheus itself treats its ``credentials_file``.
    """

    url: str | None = Field(default=None, description="Prometheus base URL; unset disables the control loop.")
    timeout: Duration = Field(default=10.0, description="Per-query timeout.")
    bearer_token_file: str | None = Field(
        default=None,
        description="File holding a bearer token sent as `Authorization: Bearer` (OpenShift, Thanos, a "
        "ServiceAccount token).",
    )
    basic_auth: BasicAuthSettings | None = Field(
        default=None, description="HTTP basic auth from a user name file and a password file."
    )
    ca_file: str | None = Field(
        default=None, description="PEM bundle of the CAs that sign Prometheus's certificate."
    )
    insecure_skip_verify: bool = Field(
        default=False, description="Do not verify Prometheus's TLS certificate (testing only)."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers on every query, e.g. `X-Scope-OrgID` for a Mimir or Cortex tenant.",
    )

    @field_validator("timeout")
    @classmethod
    def _timeout_above_zero(cls, value: float, info: ValidationInfo) -> float:
        return above_zero(value, info, cls)

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, value: str | None) -> str | None:
        problem = url_credentials_problem(value) if value else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("headers")
    @classmethod
    def _headers_one_line(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            problem = header_problem(name, text)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("bearer_token_file", "ca_file", "basic_auth", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # The chart writes "" and {} for "not set", as it does for the URL.
        return None if value in ("", {}) else value

    @model_validator(mode="after")
    def _one_credential(self) -> PrometheusSettings:
        if self.bearer_token_file and self.basic_auth:
            raise ValueError(
                "prometheus.bearerTokenFile and prometheus.basicAuth both set: both use the Authorization "
                "header, so only one can be sent; keep one"
            )
        if self.insecure_skip_verify and self.ca_file:
            raise ValueError(
                "prometheus.caFile and prometheus.insecureSkipVerify both set: a CA file is pointless without "
                "verification; drop insecureSkipVerify"
            )
        taken = {name.lower() for name in self.headers} & {"authorization", "content-type"}
        if taken:
            raise ValueError(
                f"prometheus.headers sets {', '.join(sorted(taken))}, which the operator writes itself; use "
                "bearerTokenFile or basicAuth for credentials"
            )
        return self


class ControlSettings(Model):
    interval: Duration = Field(default=15.0, description="Seconds between control-loop cycles.")
    step: Duration = Field(
        default=15.0, description="Subquery resolution: one sample per step in a rule window."
    )
    min_samples_fraction: float = Field(
        default=0.8, gt=0, le=1, description="Share of a window's samples that must exist for a rule to hold."
    )
    actions_history: int = Field(default=20, ge=1, le=200, description="Decisions kept in status.actions.")
    npu_health: bool = Field(
        default=True,
        description="Read the Ascend device plugin's health ConfigMaps in kube-system for npu_unhealthy (one list "
        "a cycle; the chart's rbac.npuHealth grants it). Off: npu_unhealthy is 0 for every replica, so replace "
        "rules never act.",
    )
    catalog_preset: Literal["ascend-fleet", "npu-exporter"] = Field(
        default="ascend-fleet",
        description="Default metric names: the project's exporter or Huawei's npu-exporter.",
    )
    catalog: dict[str, str] = Field(
        default_factory=dict,
        description="Extra or replaced catalog entries: logical name -> PromQL template.",
    )
    max_window: Duration = Field(
        default=MAX_WINDOW_SECONDS,
        description="Longest rule window (`for`) an AscendInference may ask for; longer ones are InvalidSpec. "
        "Each window makes Prometheus evaluate that many samples per object and cycle.",
    )

    @field_validator("interval", "step")
    @classmethod
    def _above_zero(cls, value: float, info: ValidationInfo) -> float:
        return above_zero(value, info, cls)

    @field_validator("max_window")
    @classmethod
    def _window_within_crd(cls, value: float) -> float:
        if not 0 < value <= MAX_WINDOW_SECONDS:
            raise ValueError(
                f"control.maxWindow {format_duration(value)} is outside 0..{format_duration(MAX_WINDOW_SECONDS)}: "
                f"the CRD refuses rule windows above {format_duration(MAX_WINDOW_SECONDS)}, so a larger bound "
                "would never apply; lower it, or leave it at the default"
            )
        return value


class ReconcileSettings(Model):
    @field_validator("backoff_initial", "backoff_max", "resync_interval", "watch_timeout")
    @classmethod
    def _above_zero(cls, value: float, info: ValidationInfo) -> float:
        return above_zero(value, info, cls)

    backoff_initial: Duration = Field(
        default=30.0, description="First delay before recreating a failed replica."
    )
    backoff_max: Duration = Field(default=600.0, description="Cap of the doubling replica-restart backoff.")
    resync_interval: Duration = Field(default=30.0, description="Periodic reconcile even without changes.")
    watch_timeout: Duration = Field(
        default=300.0,
        description="Server-side timeout of each watch; kopf then resumes it (or relists on 410).",
    )
    # Kueue's waitForPodsReady gives a workload 5 minutes to get all its pods running before it evicts and
    # requeues it; a gang here holds whole NPU nodes the same way, so the same 5 minutes.
    gang_timeout: Duration = Field(
        default=300.0,
        gt=0,
        description="How long a replica may keep some pods placed while others cannot be scheduled; then its "
        "pods are deleted (NPUs given back) and recreated with the restart backoff. Not with Volcano, whose "
        "PodGroup places a gang whole or not at all.",
    )
    # kube-scheduler answers a new pod within a second; a restarting one takes its 15 s leader lease to take
    # over, so twice that before a pod with no PodScheduled condition reads as having no scheduler.
    scheduler_grace: Duration = Field(
        default=30.0,
        gt=0,
        description="How long a pod may stay Pending with no PodScheduled condition before the status says "
        "no scheduler of its schedulerName answers.",
    )


class RoutingSettings(Model):
    enabled: bool = Field(
        default=True,
        description="Serve spec.routing.mode inferencePool. Off: the operator never reads or writes routing "
        "objects (the chart's rbac.routing: false grants none), and such specs get Ready=False with a sentence.",
    )
    picker_image: str = Field(
        default=DEFAULT_PICKER_IMAGE,
        description="Endpoint picker image for spec.routing.mode inferencePool; empty: the project's picker (the "
        "upstream picker with the project's plugins) of the operator's own release.",
    )
    pd_sidecar_image: str = Field(
        default=DEFAULT_PD_SIDECAR_IMAGE,
        min_length=1,
        max_length=MAX_IMAGE_LENGTH,
        description="llm-d's P/D sidecar image, for the decode pods of two-role fleets with routing.mode "
        "inferencePool that name no spec.disaggregation.sidecarImage.",
    )

    @field_validator("picker_image")
    @classmethod
    def _empty_is_the_default(cls, image: str) -> str:
        return image or DEFAULT_PICKER_IMAGE


class PeerSettings(Model):
    """Pods allowed to reach the engine ports, as a NetworkPolicy peer: both selectors must match."""

    namespace_labels: dict[str, str] = Field(
        description="Labels of the peer's namespace (kubernetes.io/metadata.name names one); {} is every namespace."
    )
    pod_labels: dict[str, str] = Field(description="Labels of the peer's pods; {} is every pod there.")


class NetworkPolicySettings(Model):
    """The NetworkPolicy the operator writes for every fleet (see docs/install.md, "Network policy")."""

    enabled: bool = Field(
        default=True,
        description="Write one NetworkPolicy per AscendInference: engine ports open only to the fleet's endpoint "
        "picker, the gateway and Prometheus; every other port only to the fleet's own pods. Off: none is "
        "written, and the ones written before are deleted.",
    )
    # Envoy Gateway runs its proxies in its own namespace, labelled with the component and name below.
    gateway: PeerSettings = Field(
        default_factory=lambda: PeerSettings(
            namespace_labels={"kubernetes.io/metadata.name": "envoy-gateway-system"},
            pod_labels={"app.kubernetes.io/component": "proxy", "app.kubernetes.io/name": "envoy"},
        ),
        description="The gateway's proxy pods, which send requests to the engines' HTTP port.",
    )
    # prometheus-operator labels the pods of a Prometheus with app.kubernetes.io/name: prometheus.
    prometheus: PeerSettings = Field(
        default_factory=lambda: PeerSettings(
            namespace_labels={"kubernetes.io/metadata.name": "monitoring"},
            pod_labels={"app.kubernetes.io/name": "prometheus"},
        ),
        description="The Prometheus pods that scrape the engines' HTTP port and the NPU exporter's port.",
    )
    extra_peers: list[PeerSettings] = Field(
        default_factory=list,
        max_length=16,
        description="More clients of the engines' HTTP port (e.g. a namespace of in-cluster callers in mode service).",
    )


class OperatorSettings(Model):
    """Everything the operator process is configured with."""

    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)
    control: ControlSettings = Field(default_factory=ControlSettings)
    reconcile: ReconcileSettings = Field(default_factory=ReconcileSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    network_policy: NetworkPolicySettings = Field(default_factory=NetworkPolicySettings)
    images: dict[str, str] = Field(
        default_factory=dict,
        description="Default engine images for specs that name none, keyed by engine type (vllm-ascend, sglang) "
        "or engine/chip (vllm-ascend/ascend910_93); the more specific key wins.",
    )
    allow_host_path_models: bool = Field(
        default=False,
        description="Let spec.model.volume be a hostPath. Off by default: a hostPath reads any node file, and "
        "anyone who may create an AscendInference would get that.",
    )

    def with_default_image(self, body: dict) -> dict:
        """The object with the configured default images filled in where the spec names none: the engine's,
        and in a two-role fleet llm-d's P/D sidecar's (``routing.pdSidecarImage``).

        ``images`` keys are ``<engine>/<chip>`` (e.g. ``vllm-ascend/ascend910_93`` for A3 builds) or just
        ``<engine>``; the more specific key wins. The operator and ``ascend-fleet render --config`` both use
        this, so GitOps output names the image the operator would run.
        """
        spec = body.get("spec") or {}
        engine = spec.get("engine") or {}
        chip = (spec.get("hardware") or {}).get("chip", "ascend910b")
        kind = engine.get("type", "")
        default = self.images.get(f"{kind}/{chip}") or self.images.get(kind)
        split = spec.get("disaggregation")
        sidecar = isinstance(split, dict) and not split.get("sidecarImage")
        if (not default or engine.get("image")) and not sidecar:
            return body
        body = copy.deepcopy(body)
        if default and not engine.get("image"):
            body["spec"]["engine"]["image"] = default
        if sidecar:
            body["spec"]["disaggregation"]["sidecarImage"] = self.routing.pd_sidecar_image
        return body

    @classmethod
    def load(
        cls, path: str | None = None, environ: dict[str, str] | None = None, prometheus_url: str | None = None
    ) -> OperatorSettings:
        """Read the YAML file (if any), then apply environment overrides, then ``prometheus_url`` (a flag's)."""
        environ = dict(os.environ if environ is None else environ)
        path = path or environ.get("ASCEND_FLEET_CONFIG")
        data: dict = {}
        if path:
            with open(path, "rb") as handle:
                raw = handle.read(strict_yaml.MAX_INPUT_BYTES + 1)
            if len(raw) > strict_yaml.MAX_INPUT_BYTES:
                raise ValueError(
                    f"over {strict_yaml.MAX_INPUT_BYTES // 2**20} MiB; a configuration is a few KiB"
                )
            data = strict_yaml.load_document(raw.decode("utf-8")) or {}
            if not isinstance(data, dict):
                raise ValueError(f"the file holds a {type(data).__name__}, not a mapping of settings")
        interval = environ.get("ASCEND_FLEET_CONTROL_INTERVAL")
        if interval and isinstance(data.get("control", {}), dict):
            # validated with the rest, so a refusal names control.interval as the file's would
            data = {**data, "control": {**data.get("control", {}), "interval": interval}}
        url = prometheus_url or environ.get("ASCEND_FLEET_PROMETHEUS_URL")
        if url and isinstance(data.get("prometheus", {}), dict):
            # validated with the rest, so a refusal names prometheus.url as the file's would
            data = {**data, "prometheus": {**data.get("prometheus", {}), "url": url}}
        return cls.model_validate(data)
