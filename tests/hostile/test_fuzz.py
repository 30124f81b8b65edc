"""A fuzzer over the spec and the settings: random input, valid or not, meets only the project's own refusals.

Hypothesis builds AscendInference documents (a valid base with random parts replaced, and random values in
every place) and operator settings. Each goes through validation; an accepted spec is rendered, and every
pod it renders must pass the Pod Security "restricted" check. Nothing may raise another exception, take
more than a bounded time, or allocate more than a bounded amount of memory. Derandomized, so CI runs the
same examples every time.
"""

from __future__ import annotations

import time
import tracemalloc

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_fleet.cli.documents import DocumentError
from ascend_fleet.cli.inputs import read_settings
from ascend_fleet.render import InvalidSpec, render_all, validate
from ascend_fleet.render.restricted import restricted_problems
from tests.support.documents import RESTRICTED, inference

SECONDS = 5.0  # one example, validation and render
MEMORY = 64 * 2**20  # bytes traced during one example
FUZZ = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,  # the bound is asserted below, with a sentence
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["0", "1", "8", "-1", "1Gi", "5m", "0s", "$(POD_IP)", "; rm -rf /", "Unconfined", "ALL"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
SECTIONS = [
    "model", "engine", "parallelism", "hardware", "scheduling", "template", "rules", "replicas", "precision",
    "memory", "batching", "disaggregation", "variants", "availability", "disruption", "routing",
]  # fmt: skip
container = st.fixed_dictionaries(
    {"name": st.sampled_from(["engine", "side", "init"]), "image": st.just("busybox")},
    optional={
        "securityContext": st.one_of(
            st.just(RESTRICTED),
            st.fixed_dictionaries(
                {},
                optional={
                    "privileged": st.booleans(),
                    "allowPrivilegeEscalation": st.booleans(),
                    "capabilities": st.fixed_dictionaries(
                        {},
                        optional={
                            "add": st.lists(st.sampled_from(["SYS_ADMIN", "NET_BIND_SERVICE"])),
                            "drop": st.lists(st.sampled_from(["ALL", "NET_RAW"])),
                        },
                    ),
                    "runAsUser": st.integers(0, 2),
                    "runAsNonRoot": st.booleans(),
                    "seccompProfile": st.fixed_dictionaries(
                        {"type": st.sampled_from(["RuntimeDefault", "Unconfined", "Localhost"])}
                    ),
                },
            ),
        ),
        "env": st.lists(
            st.fixed_dictionaries({"name": st.text(min_size=1, max_size=12), "value": st.text(max_size=12)}),
            max_size=2,
        ),
    },
)
template = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.lists(container, max_size=2),
        "initContainers": st.lists(container, max_size=1),
        "volumes": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["v", "model", "cache"])},
                optional={
                    "emptyDir": st.just({}),
                    "gitRepo": st.just({"repository": "x"}),
                    "hostPath": st.just({"path": "/etc"}),
                    "secret": st.just({"secretName": "s"}),
                },
            ),
            max_size=2,
        ),
        "securityContext": st.dictionaries(
            st.sampled_from(["runAsUser", "runAsNonRoot", "seccompProfile", "sysctls"]), values, max_size=2
        ),
        "hostNetwork": st.booleans(),
    },
)


def base() -> dict:
    return inference("fuzz").namespace("tenant").engine("vllm-ascend").build()


@st.composite
def documents(draw) -> dict:
    doc = base()
    for section in draw(st.lists(st.sampled_from(SECTIONS), max_size=3, unique=True)):
        doc["spec"][section] = draw(values)
    if draw(st.booleans()):
        doc["spec"]["template"] = {"spec": draw(template)}
    if isinstance(doc["spec"].get("model"), dict) and draw(st.booleans()):
        doc["spec"]["model"]["volume"] = draw(
            st.dictionaries(
                st.sampled_from(["persistentVolumeClaim", "nfs", "gitRepo", "hostPath", "csi"]),
                values,
                max_size=2,
            )
        )
    return doc


def bounded(check) -> None:
    """Run ``check`` and assert it stayed within the time and memory bounds."""
    tracemalloc.reset_peak()
    started = time.monotonic()
    check()
    took = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    assert took < SECONDS, f"one example took {took:.1f} s"
    assert peak < MEMORY, f"one example traced {peak / 2**20:.0f} MiB"


def accept_or_refuse(doc: dict) -> None:
    try:
        valid = validate(doc)
    except InvalidSpec as refused:
        assert refused.problems and all(problem and "\n" not in problem for problem in refused.problems)
        return
    for pod in (o for o in render_all(valid.obj) if o["kind"] == "Pod"):
        exempt = (
            frozenset()
            if valid.obj.spec.hardware.ascend_runtime
            else frozenset({"ascend-driver", "ascend-dcmi", "npu-smi"})
        )
        annotations = pod["metadata"].get("annotations") or {}
        assert restricted_problems(pod["spec"], annotations, exempt_volumes=exempt) == [], pod["metadata"][
            "name"
        ]


@FUZZ
@given(documents())
def test_random_specs_are_accepted_restricted_or_refused_in_sentences(doc):
    tracemalloc.start()
    try:
        bounded(lambda: accept_or_refuse(doc))
    finally:
        tracemalloc.stop()


@FUZZ
@given(st.one_of(values, st.dictionaries(st.text(max_size=12), values, max_size=4), documents()))
def test_random_values_as_documents_are_refused_in_sentences(doc):
    tracemalloc.start()
    try:
        bounded(lambda: accept_or_refuse(doc if isinstance(doc, dict) else {"spec": doc}))
    finally:
        tracemalloc.stop()


SETTINGS_SECTIONS = [
    "control",
    "prometheus",
    "reconcile",
    "images",
    "routing",
    "allowHostPathModels",
    "catalog",
]


@FUZZ
@given(st.dictionaries(st.sampled_from(SETTINGS_SECTIONS) | st.text(max_size=10), values, max_size=4))
def test_random_settings_load_or_are_one_line(tmp_path_factory, config):
    path = tmp_path_factory.mktemp("settings") / "config.yaml"
    path.write_text(yaml.safe_dump(config))

    def load() -> None:
        try:
            read_settings(str(path), {})
        except DocumentError as refused:
            assert "\n" not in str(refused)

    tracemalloc.start()
    try:
        bounded(load)
    finally:
        tracemalloc.stop()
