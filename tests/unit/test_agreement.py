"""validate refuses what the API server, the kubelet or the engine would refuse later, with their sentence."""

from __future__ import annotations

import copy

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.control.queries import Query, QueryWindow
from ascend_fleet.render import InvalidSpec, validate
from tests.support.paths import ROOT
from tests.unit.test_cli import cli

GANG = yaml.safe_load((ROOT / "examples" / "vllm-volcano-gang.yaml").read_text())


def doc(**spec) -> dict:
    base = {"model": {"name": "m", "path": "/models/m"}, "engine": {"type": "vllm-ascend"}}
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": "llm"},
        "spec": base | spec,
    }


def problems(body: dict) -> list[str]:
    with pytest.raises(InvalidSpec) as refused:
        validate(body)
    return refused.value.problems


def with_template(body: dict, template: dict) -> dict:
    body = copy.deepcopy(body)
    body["spec"]["template"] = template
    return body


def test_a_request_over_the_merged_limit_is_the_servers_refusal():
    body = doc(engine={"type": "vllm-ascend", "resources": {"requests": {"memory": "300Gi"}}})
    (problem,) = problems(body)
    assert problem.startswith(
        "spec.engine.resources.requests.memory: the request 300Gi is over the memory limit"
    )
    server = 'spec.containers[0].resources.requests: Invalid value: "300Gi": must be less than or equal to memory limit of 48Gi'
    assert f"the API server refuses the pod with '{server}'" in problem
    raised = doc(
        engine={
            "type": "vllm-ascend",
            "resources": {"requests": {"memory": "300Gi"}, "limits": {"memory": "300Gi"}},
        }
    )
    assert validate(raised).obj.name == "llm"


def test_the_engine_port_may_not_be_the_exporters():
    (problem,) = problems(doc(engine={"type": "vllm-ascend", "port": 9410}))
    assert problem.startswith("spec.engine.port: 9410 is the exporter's metrics port")
    assert "Address already in use" in problem
    assert (
        validate(doc(engine={"type": "vllm-ascend", "port": 9410, "exporter": False})).obj.spec.engine.port
        == 9410
    )
    # With the project's image the exporter runs and the pod itself has both ports.
    image = {"type": "vllm-ascend", "port": 9410, "image": "ghcr.io/ascend-fleet/vllm-ascend:0.1.0"}
    (problem,) = problems(doc(engine=image))
    assert "port 9410 is both 'http' of container 'engine' and 'npu-metrics'" in problem


def test_a_200_kb_argument_cannot_be_executed():
    (problem,) = problems(doc(engine={"type": "vllm-ascend", "args": ["--chat-template=" + "x" * 200_000]}))
    assert problem.startswith("spec.engine.args[0]: 200016 bytes in one argument")
    assert "MAX_ARG_STRLEN" in problem
    assert validate(doc(engine={"type": "vllm-ascend", "args": ["--chat-template=" + "x" * 100_000]}))


def test_a_batch_no_engine_can_allocate_is_refused():
    (problem,) = problems(doc(batching={"maxBatchSize": 1_000_000_000_000}))
    assert problem.startswith("spec.batching.maxBatchSize: 1000000000000 sequences cannot fit")
    assert "over the pod's memory limit of 48Gi" in problem
    assert validate(doc(batching={"maxBatchSize": 1024})).obj.spec.batching.max_batch_size == 1024


def test_broken_promql_in_a_rule_is_refused_by_a_real_parser():
    rule = {"threshold": 2, "for": "5m", "action": "scale_up"}
    (problem,) = problems(doc(rules=[{**rule, "query": "sum(rate(x[5m])"}]))
    assert problem == (
        "spec.rules[0].query: not valid PromQL (unclosed left parenthesis); Prometheus answers every evaluation "
        "with a bad_data error, so the rule would never act"
    )
    (problem,) = problems(doc(rules=[{**rule, "query": "rate(x)"}]))
    assert "expected type matrix in call to function 'rate'" in problem
    assert validate(
        doc(rules=[{**rule, "query": 'sum by (namespace, inference) (rate(x{namespace="default"}[5m]))'}])
    )


def test_a_raw_query_cannot_close_the_operators_parentheses_and_escape_the_outage_guard():
    # The control loop sends avg by (...) (<query>) and on () (<Prometheus was scraping>): a query that closes
    # that parenthesis itself would put its own "or" outside the guard, acting on data from an outage.
    rule = {"threshold": 2, "for": "5m", "action": "scale_up"}
    escape = "x) or vector(100) or (x"
    (problem,) = problems(doc(rules=[{**rule, "query": escape}]))
    assert problem.startswith("spec.rules[0].query: not valid PromQL (")
    window = QueryWindow(escape, 60.0, "fleet")
    assert "vector(100) or (x) and on ()" in Query(window, "min").promql(15.0)  # what it would have sent


def test_a_template_may_not_take_the_gang_out_of_its_pod_group():
    annotation = with_template(GANG, {"metadata": {"annotations": {names.ANNOTATION_POD_GROUP: "mine"}}})
    (problem,) = problems(annotation)
    assert problem.startswith(
        f"spec.template.metadata.annotations: {names.ANNOTATION_POD_GROUP}='mine' replaces"
    )
    scheduler = with_template(GANG, {"spec": {"schedulerName": "default-scheduler"}})
    (problem,) = problems(scheduler)
    assert problem.startswith("spec.template.spec.schedulerName: 'default-scheduler' replaces 'volcano'")
    # Without gang scheduling there is no scheduler of the operator's to replace.
    assert validate(with_template(doc(), {"spec": {"schedulerName": "my-scheduler"}}))


def test_a_template_may_not_replace_shared_memory_or_pod_ip():
    shm = {
        "spec": {
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [
                {"name": "engine", "volumeMounts": [{"name": "scratch", "mountPath": "/dev/shm"}]}
            ],
        }
    }
    (problem,) = problems(with_template(doc(), shm))
    assert problem.startswith(
        "spec.template.spec.containers[engine].volumeMounts: /dev/shm is mounted from 'scratch'"
    )
    pod_ip = {"spec": {"containers": [{"name": "engine", "env": [{"name": "POD_IP", "value": "10.0.0.1"}]}]}}
    (problem,) = problems(with_template(doc(), pod_ip))
    assert problem.startswith("spec.template.spec.containers[0].env: POD_IP is set by the operator"), problem
    other_env = {
        "spec": {
            "containers": [{"name": "engine", "env": [{"name": "HCCL_CONNECT_TIMEOUT", "value": "600"}]}]
        }
    }
    assert validate(with_template(doc(), other_env))


def test_root_is_refused_as_pod_security_restricted_refuses_it():
    (problem,) = problems(with_template(doc(), {"spec": {"securityContext": {"runAsUser": 0}}}))
    assert problem.startswith("spec.template.spec.securityContext.runAsUser: 0 is root"), problem
    found = problems(with_template(doc(), {"spec": {"securityContext": {"runAsNonRoot": False}}}))
    assert found == [
        'spec.template.spec.securityContext.runAsNonRoot: false is refused by Pod Security "restricted"; '
        "leave it true"
    ]
    assert not any("root" in w for w in validate(doc()).warnings)


def test_validate_without_config_warns_about_metrics_outside_the_built_in_catalog(tmp_path):
    rule = {"threshold": 2, "for": "5m", "action": "scale_up"}
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(doc(rules=[{**rule, "metric": "ttft_p95"}, {**rule, "metric": "npu_utilization"}]))
    )
    result = cli("validate", str(spec))
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "unknown metric" in line]
    assert len(warned) == 1 and "spec.rules[0].metric: unknown metric 'ttft_p95'" in warned[0]
    assert "checked against the built-in catalog" in warned[0]


def test_a_flag_generated_twice_is_refused():
    """SGLang's maxBatchTokens and chunkedPrefill: false both render --chunked-prefill-size; the last one wins."""
    body = doc(engine={"type": "sglang"}, batching={"maxBatchTokens": 4096, "chunkedPrefill": False})
    (problem,) = problems(body)
    assert problem == (
        "spec.batching: maxBatchTokens and chunkedPrefill: false both set --chunked-prefill-size (4096 and -1); "
        "sglang's parser keeps the last, so maxBatchTokens would be ignored; drop one of them"
    )
    assert validate(doc(engine={"type": "sglang"}, batching={"maxBatchTokens": 4096}))
    assert validate(doc(engine={"type": "sglang"}, batching={"chunkedPrefill": False}))


@pytest.mark.parametrize("preset", ["ascend-fleet", "npu-exporter"])
def test_the_parser_accepts_every_built_in_catalog_query(preset):
    """The queries the control-loop tests run on a real Prometheus: the parser must not refuse valid PromQL.

    As raw queries they are refused for reading every namespace only: the catalog's are the operator's own,
    and each object reads its own namespace's series of their answer (docs/control-loop.md).
    """
    from ascend_fleet.api.catalog import PRESETS

    rule = {"threshold": 2, "for": "5m", "action": "scale_up"}
    rules = [{**rule, "query": expression} for expression in PRESETS[preset].values()]
    # A spec holds at most 15 rules: the catalog is checked in parts.
    found = [
        problem for at in range(0, len(rules), 10) for problem in problems(doc(rules=rules[at : at + 10]))
    ]
    assert len(rules) >= 5 and len(found) == len(rules)
    assert all("is not confined to namespace default" in problem for problem in found), found
