"""Pod Security Standards "restricted", checked on the merged pod before any pod is created.

The rules mirror Kubernetes' pod-security-admission policy checks (the ``restricted`` level with the
``baseline`` level it contains, at the control plane's version 1.34) for what a Linux pod may set: every
container (init containers, sidecars and the engine) and every volume. The API server's PodSecurity admission
stays the arbiter (a test creates the rendered pods in a namespace enforcing ``restricted``); this check says
the same thing earlier, in one sentence per problem, naming the field of the AscendInference that set it.

Two volumes are the platform's own choice rather than the spec author's, and are left out: the hostPath
driver mounts of nodes without the Ascend Docker Runtime (``hardware.ascendRuntime: false``) and a hostPath
``model.volume`` where the operator configuration allows it. Pods with those need a namespace above
``restricted``, as docs/engines.md says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..api.k8s import RESTRICTED_VOLUMES

# restrictedVolumes: the volume sources "restricted" admits are api.k8s.RESTRICTED_VOLUMES, beside the others.
# capabilities_restricted: every container drops ALL and may add this one back, nothing else.
ADDABLE_CAPABILITY = "NET_BIND_SERVICE"
# seccompProfile_restricted and appArmorProfile: the profile types that keep a confinement.
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_ANNOTATION_VALUES = ("runtime/default", "localhost/")  # exact, and prefix
# seLinuxOptions (from 1.31): the container types; user and role must stay unset.
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# sysctls (from 1.32): the namespaced sysctls the baseline level calls safe.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")

Where = Callable[[str, int, str], str]
"""Names the AscendInference field behind a container: (list name, index in the merged pod, container name)."""
VolumeWhere = Callable[[str], str]
"""Names the AscendInference field behind a volume, by its name."""


def pod_where(list_name: str, index: int, name: str) -> str:
    """The merged pod's own field path: for pods the operator renders with no template behind them."""
    return f"spec.{list_name}[{index}] ({name})"


def restricted_problems(
    pod_spec: dict,
    annotations: dict | None = None,
    where: Where = pod_where,
    volume_where: VolumeWhere | None = None,
    exempt_volumes: frozenset[str] = frozenset(),
    pod_field: str = "spec",
) -> list[str]:
    """What Pod Security "restricted" refuses in one pod spec, each a sentence with what would fit.

    ``where`` and ``volume_where`` name the AscendInference field behind a container or a volume;
    ``pod_field`` names where the pod-level securityContext comes from. ``exempt_volumes`` are the platform's
    own volumes (see the module's docstring).
    """
    problems = _pod_level(pod_spec, annotations or {}, pod_field)
    context = _dict(pod_spec.get("securityContext"))
    for list_name, index, container in _containers(pod_spec):
        problems += _container_problems(
            container, context, where(list_name, index, container.get("name", ""))
        )
    for index, volume in enumerate(_items(pod_spec, "volumes")):
        name = volume.get("name", "")
        if name in exempt_volumes:
            continue
        sources = sorted(set(volume) - {"name"})
        bad = [source for source in sources if source not in RESTRICTED_VOLUMES]
        if bad:
            at = volume_where(name) if volume_where else f"spec.volumes[{index}]"
            problems.append(
                f'{at}: a {bad[0]} volume is refused by Pod Security "restricted"; use one of '
                f"{', '.join(sorted(RESTRICTED_VOLUMES))} (a persistentVolumeClaim can bind any storage)"
            )
    return problems


def _pod_level(pod_spec: dict, annotations: dict, at: str) -> list[str]:
    problems = [
        f'{at}.{key}: the node\'s {key.removeprefix("host")} namespace is refused by Pod Security "restricted"; '
        "leave it unset"
        for key in HOST_NAMESPACES
        if pod_spec.get(key)
    ]
    context = _dict(pod_spec.get("securityContext"))
    where = f"{at}.securityContext"
    problems += _context_problems(context, where, pod=True)
    for sysctl in _items(context, "sysctls"):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(
                f'{where}.sysctls: {sysctl.get("name")!r} is not one of the sysctls Pod Security "restricted" '
                f"calls safe ({', '.join(sorted(SAFE_SYSCTLS))}); leave it out"
            )
    for key, value in sorted(annotations.items()):
        if str(key).startswith(APPARMOR_ANNOTATION_PREFIX) and not _apparmor_annotation_fits(value):
            problems.append(
                f"spec.template.metadata.annotations: {key}={value!r} lifts the AppArmor confinement Pod "
                'Security "restricted" requires; use runtime/default or localhost/<profile>'
            )
    return problems


def _container_problems(container: dict, pod_context: dict, at: str) -> list[str]:
    context = _dict(container.get("securityContext"))
    where = f"{at}.securityContext"
    problems = _context_problems(context, where, pod=False)
    if context.get("privileged"):
        problems.append(
            f"{where}.privileged: privileged containers are refused by Pod Security; leave it unset"
        )
    capabilities = _dict(context.get("capabilities"))
    added = [c for c in capabilities.get("add") or [] if c != ADDABLE_CAPABILITY]
    if added:
        problems.append(
            f'{where}.capabilities.add: {added[0]} is refused by Pod Security "restricted"; only '
            f"{ADDABLE_CAPABILITY} may be added back"
        )
    if context.get("procMount") not in (None, "Default"):
        problems.append(
            f"{where}.procMount: {context['procMount']!r} is refused by Pod Security; use Default"
        )
    seccomp = _dict(context.get("seccompProfile"))
    if seccomp and seccomp.get("type") not in SECCOMP_TYPES:
        problems.append(
            f'{where}.seccompProfile: {seccomp.get("type")!r} is refused by Pod Security "restricted"; use '
            "RuntimeDefault or Localhost"
        )
    needs = []  # what "restricted" wants said, one sentence for all of it
    if context.get("allowPrivilegeEscalation") is not False:
        needs.append("allowPrivilegeEscalation: false")
    if "ALL" not in (capabilities.get("drop") or []):
        needs.append('capabilities.drop: ["ALL"]')
    # A pod-level false or bad profile is the pod's one sentence; a container only hears of what nobody set.
    if context.get("runAsNonRoot") is None and pod_context.get("runAsNonRoot") is None:
        needs.append("runAsNonRoot: true (here or in the pod)")
    if not seccomp and not pod_context.get("seccompProfile"):
        needs.append("seccompProfile.type: RuntimeDefault (here or in the pod)")
    if needs:
        problems.append(f'{where}: Pod Security "restricted" needs {", ".join(needs)}')
    return problems + _probe_hosts(container, at)


def _context_problems(context: dict, where: str, pod: bool) -> list[str]:
    """What a pod's or a container's securityContext may not say, in either place."""
    problems = []
    if context.get("runAsUser") == 0:
        problems.append(
            f'{where}.runAsUser: 0 is root, which Pod Security "restricted" refuses; use a uid above 0'
        )
    if context.get("runAsNonRoot") is False:
        problems.append(f'{where}.runAsNonRoot: false is refused by Pod Security "restricted"; leave it true')
    seccomp = _dict(context.get("seccompProfile"))
    if pod and seccomp.get("type", "RuntimeDefault") not in SECCOMP_TYPES:
        problems.append(
            f'{where}.seccompProfile: {seccomp.get("type")!r} is refused by Pod Security "restricted"; use '
            "RuntimeDefault or Localhost"
        )
    apparmor = _dict(context.get("appArmorProfile"))
    if apparmor and apparmor.get("type") not in APPARMOR_TYPES:
        problems.append(
            f"{where}.appArmorProfile: {apparmor.get('type')!r} is refused by Pod Security; use RuntimeDefault or "
            "Localhost"
        )
    selinux = _dict(context.get("seLinuxOptions"))
    if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
        problems.append(
            f"{where}.seLinuxOptions: Pod Security refuses SELinux users, roles and types other than "
            f"{', '.join(sorted(t for t in SELINUX_TYPES if t))}; leave user and role unset"
        )
    if _dict(context.get("windowsOptions")).get("hostProcess"):
        problems.append(f"{where}.windowsOptions.hostProcess: refused by Pod Security; leave it unset")
    return problems


def _probe_hosts(container: dict, at: str) -> list[str]:
    """Probes and lifecycle hooks may not point at another host (baseline, from 1.34)."""
    handlers = [(key, container.get(key)) for key in ("livenessProbe", "readinessProbe", "startupProbe")]
    lifecycle = _dict(container.get("lifecycle"))
    handlers += [(f"lifecycle.{key}", lifecycle.get(key)) for key in ("postStart", "preStop")]
    problems = []
    for key, handler in handlers:
        for action in ("httpGet", "tcpSocket"):
            if _dict(_dict(handler).get(action)).get("host"):
                problems.append(
                    f"{at}.{key}.{action}.host: Pod Security refuses probes and hooks aimed at another host; "
                    "leave host unset (the pod's own address)"
                )
    for port in _items(container, "ports"):
        if port.get("hostPort"):
            problems.append(
                f"{at}.ports: hostPort {port['hostPort']} is refused by Pod Security; use a Service instead"
            )
    return problems


def _apparmor_annotation_fits(value: Any) -> bool:
    text = str(value)
    return text in ("", APPARMOR_ANNOTATION_VALUES[0]) or text.startswith(APPARMOR_ANNOTATION_VALUES[1])


def _containers(pod_spec: dict) -> Iterator[tuple[str, int, dict]]:
    for list_name in ("initContainers", "containers"):
        for index, container in enumerate(_items(pod_spec, list_name)):
            yield list_name, index, container


def _items(holder: dict, key: str) -> list[dict]:
    value = holder.get(key)
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}
