"""The one place that knows the API's names, label keys and annotation keys."""

GROUP = "inference.ascendfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AscendInference"
PLURAL = "ascendinferences"
SINGULAR = "ascendinference"
SHORT_NAME = "ainf"
CRD_NAME = f"{PLURAL}.{GROUP}"

# Labels on every child object.
LABEL_NAME = f"{GROUP}/name"
LABEL_REPLICA = f"{GROUP}/replica"  # data-parallel group index
LABEL_RANK = f"{GROUP}/rank"  # pod index inside the group, 0 = leader
LABEL_ROLE = f"{GROUP}/role"  # leader | worker
LABEL_REVISION = f"{GROUP}/revision"  # hash of the rendered pod template
# "true" while a leader takes traffic; a drain flips it to "false" so the Service drops the pod.
LABEL_SERVING = f"{GROUP}/serving"
# The precision variant (spec.variants[].name) an engine pod serves; absent on a fleet without variants.
LABEL_VARIANT = f"{GROUP}/variant"

# The prefill/decode role of an engine pod in a fleet with spec.disaggregation (LABEL_ROLE is leader/worker).
LABEL_PD_ROLE = f"{GROUP}/pd-role"
# The role label llm-d's endpoint picker reads in its prefill and decode filters (llm-d-inference-scheduler
# v0.4.0, pkg/plugins/filter/pd_role.go: key llm-d.ai/role, values prefill and decode).
LABEL_LLMD_ROLE = "llm-d.ai/role"
PD_PREFILL = "prefill"
PD_DECODE = "decode"

ROLE_LEADER = "leader"
ROLE_WORKER = "worker"

# Annotations the operator keeps on children and on the AscendInference itself.
ANNOTATION_DRAIN_STARTED = f"{GROUP}/drain-started"  # RFC 3339 time a replica's drain began
ANNOTATION_DRAIN_REASON = f"{GROUP}/drain-reason"  # why: scale-in, rollout, rule restart
ANNOTATION_RESTARTS = f"{GROUP}/group-restarts"  # JSON: replica -> {count, last} for gang backoff
# On an AscendInference with spec.variants: JSON {variant: percent}, the traffic split the picker's rewrite
# follows. The control loop's shift_traffic writes it; a user may set it by hand too.
ANNOTATION_TRAFFIC = f"{GROUP}/traffic"

# Volcano gang scheduling: the annotation naming a pod's PodGroup, and the PodGroup's API.
ANNOTATION_POD_GROUP = "scheduling.k8s.io/group-name"
VOLCANO_SCHEDULER = "volcano"
POD_GROUP_API_VERSION = "scheduling.volcano.sh/v1beta1"
POD_GROUP_KIND = "PodGroup"
# On an AscendInference: the Volcano queue its PodGroups join (Volcano's own key, which LeaderWorkerSet reads too).
ANNOTATION_VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"

# Where every kubelet renews its node's Lease (named as the node); the operator reads them to call a node dead.
NODE_LEASE_NAMESPACE = "kube-node-lease"

# Well-known labels, for tools that group by app.
LABEL_APP_NAME = "app.kubernetes.io/name"
LABEL_APP_INSTANCE = "app.kubernetes.io/instance"
LABEL_APP_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_APP_COMPONENT = "app.kubernetes.io/component"
APP_NAME = "ascend-fleet-engine"
# LABEL_APP_COMPONENT's values: the engine pods, and the endpoint picker's pods and objects.
COMPONENT_ENGINE = "engine"
COMPONENT_PICKER = "endpoint-picker"
MANAGED_BY = "ascend-fleet"

# The Ascend device plugin's NPU health, as it publishes it (the operator reads these, never writes them).
# One ConfigMap per node, ``mindx-dl-deviceinfo-<node>`` in kube-system, holds under DeviceInfoCfg the JSON
# {"DeviceInfo": {"DeviceList": {<resource><suffix>: ...}, "UpdateTime": <s>}, "CheckCode": <sha256>}.
DEVICE_INFO_NAMESPACE = "kube-system"
DEVICE_INFO_PREFIX = "mindx-dl-deviceinfo-"
DEVICE_INFO_KEY = "DeviceInfoCfg"
MANUALLY_SEPARATED_KEY = "ManuallySeparateNPU"  # comma-joined NPUs an administrator took out of service
# DeviceList key suffixes after the resource name (huawei.com/Ascend910; huawei.com/npu on Atlas A5):
UNHEALTHY_SUFFIX = "-Unhealthy"  # comma-joined NPU names (Ascend910-<physical id>)
NETWORK_UNHEALTHY_SUFFIX = "-NetworkUnhealthy"
FAULT_SUFFIX = "-Fault"  # a JSON list of faults: npu_name, fault_level, fault_code, fault_time_and_level_map
# The NPUs a pod actually holds, written on the pod by the device plugin (comma-joined NPU names); the
# Volcano Ascend plugin writes the resource name itself as the key when it binds.
ANNOTATION_NPUS_MOUNTED = "huawei.com/AscendReal"
ANNOTATION_NPUS_BOUND = "huawei.com/Ascend910"

# Environment variables no user input may set. The Ascend container runtime mounts the NPUs these two name,
# so a container that sets them reaches NPUs the scheduler never gave its pod.
# The in-memory volume every engine pod mounts at this path for the collectives.
SHM_PATH = "/dev/shm"
DEVICE_ENV = ("ASCEND_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
# The engine container's variables the operator sets and its own flags and exporter read: the pod's identity
# (downward API), its replica's leader, and the exporter's switch and port.
ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
ENV_POD_IP = "POD_IP"
ENV_LEADER_ADDRESS = "LEADER_ADDRESS"
ENV_EXPORTER = "ASCEND_FLEET_EXPORTER"
ENV_EXPORTER_PORT = "ASCEND_FLEET_EXPORTER_PORT"
OPERATOR_ENV = (
    ENV_POD_NAME,
    ENV_POD_NAMESPACE,
    ENV_POD_IP,
    ENV_LEADER_ADDRESS,
    ENV_EXPORTER,
    ENV_EXPORTER_PORT,
)


def reserved_env_problem(name: str, *, engine: bool) -> str | None:
    """Why ``name`` may not be set (``engine``: in the engine container), or None: a sentence part."""
    if name in DEVICE_ENV:
        return (
            f"{name} is the Ascend runtime's: it mounts the NPUs this names, so only the device plugin sets it; "
            "NPUs come from spec.parallelism (or spec.hardware.resourceName)"
        )
    if engine and name in OPERATOR_ENV:
        return (
            f"{name} is set by the operator, and what it generates reads it (the engine's flags, HCCL_IF_IP=$(POD_IP), "
            "the exporter); use a name of your own"
        )
    return None
