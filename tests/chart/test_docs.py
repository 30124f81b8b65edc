"""docs/install.md and docs/gitops.md: their YAML parses and means what the text says (values the chart accepts,
a scrape config Prometheus accepts, the CRD's real replica path, an Argo CD health check that works)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from typing import Any

import jsonschema
import pytest
import yaml

from ascend_fleet.cli.main import build_parser
from ascend_fleet.render import validate
from tests.chart.helm import VALUES_SCHEMA as SCHEMA
from tests.chart.helm import merged_values
from tests.chart.promql import ENGINE_LABELS, discovered_targets, pod_port, promtool
from tests.support.paths import CRD_FILE, ROOT

INSTALL = (ROOT / "docs" / "install.md").read_text()
GITOPS = (ROOT / "docs" / "gitops.md").read_text()


def yaml_blocks(text: str) -> list[list[dict[str, Any]]]:
    return [
        [d for d in yaml.safe_load_all(block) if d] for block in re.findall(r"```yaml\n(.*?)```", text, re.S)
    ]


def documents(text: str, kind: str) -> list[dict[str, Any]]:
    return [d for block in yaml_blocks(text) for d in block if d.get("kind") == kind]


def shell_lines(text: str) -> list[str]:
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return lines


def assert_chart_accepts(values: dict[str, Any]) -> None:
    errors = [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(merged_values(values))]
    assert not errors, errors


def test_every_yaml_block_parses():
    assert len(yaml_blocks(INSTALL)) >= 2 and len(yaml_blocks(GITOPS)) >= 6


def test_values_in_the_docs_are_accepted_by_the_chart():
    production = next(block[0] for block in yaml_blocks(INSTALL) if "engineImages" in block[0])
    assert_chart_accepts(production)
    for app in documents(GITOPS, "Application"):
        if "helm" in app["spec"]["source"]:
            assert app["spec"]["source"]["path"] == "charts/ascend-fleet"
            assert_chart_accepts(app["spec"]["source"]["helm"]["valuesObject"])
    for release in documents(GITOPS, "HelmRelease"):
        assert release["spec"]["chart"]["spec"]["chart"] == "./charts/ascend-fleet"
        assert_chart_accepts(release["spec"]["values"])


def test_set_flags_name_real_values():
    for line in shell_lines(INSTALL):
        words = shlex.split(line.split("#")[0])
        override: dict[str, Any] = {}  # the --set flags of one command go together, as helm takes them
        for i, word in enumerate(words):
            if word == "--set":
                key, _, value = words[i + 1].partition("=")
                node = override
                *parents, leaf = key.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                # Helm's --set reads 2 as a number and true as a boolean, as YAML does; {a,b} is a list.
                node[leaf] = value.strip("{}").split(",") if value.startswith("{") else yaml.safe_load(value)
        if override:
            assert_chart_accepts(override)


def test_ignored_field_is_the_scale_subresources_replica_path():
    crd = yaml.safe_load(CRD_FILE.read_text())
    replicas_path = crd["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"]
    pointer = "/" + replicas_path.lstrip(".").replace(".", "/")
    app = next(a for a in documents(GITOPS, "Application") if "ignoreDifferences" in a["spec"])
    assert app["spec"]["ignoreDifferences"] == [
        {"group": "inference.ascendfleet.io", "kind": "AscendInference", "jsonPointers": [pointer]}
    ]
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]
    argocd_cm = documents(GITOPS, "ConfigMap")[0]["data"]
    ignored = yaml.safe_load(
        argocd_cm["resource.customizations.ignoreDifferences.inference.ascendfleet.io_AscendInference"]
    )
    assert ignored == {"jsonPointers": [pointer]}


def test_fleet_example_leaves_the_replica_count_out_and_is_valid():
    fleet = documents(GITOPS, "AscendInference")[0]
    assert "data" not in fleet["spec"]["parallelism"]
    validate(fleet)


def test_flux_upgrades_crds_and_orders_the_fleets_after_the_operator():
    release = documents(GITOPS, "HelmRelease")[0]
    assert release["spec"]["install"]["crds"] == release["spec"]["upgrade"]["crds"] == "CreateReplace"
    kustomizations = {k["metadata"]["name"]: k for k in documents(GITOPS, "Kustomization")}
    assert kustomizations["llm-fleets"]["spec"]["dependsOn"] == [{"name": "ascend-fleet-operator"}]


def test_render_commands_in_the_docs_parse():
    for line in shell_lines(GITOPS):
        if line.startswith("ascend-fleet "):
            build_parser().parse_args(shlex.split(line.split("#")[0].split(">")[0])[1:])


@pytest.mark.skipif(promtool() is None, reason="needs promtool (Debian: apt-get install prometheus)")
def test_scrape_config_gives_the_catalog_its_labels(tmp_path):
    config = next(block[0] for block in yaml_blocks(INSTALL) if "scrape_configs" in block[0])
    job = config["scrape_configs"][0]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    targets = discovered_targets(
        job,
        [
            pod_port("llm", "qwen-1", "npu-metrics", ENGINE_LABELS, "10.0.0.1:9410"),
            pod_port("llm", "qwen-1", "http", ENGINE_LABELS, "10.0.0.1:8000"),
            pod_port("llm", "qwen-1", "ray-gcs", ENGINE_LABELS, "10.0.0.1:6379"),
            pod_port("llm", "web-0", "http", {"app.kubernetes.io/name": "web"}, "10.0.0.2:80"),
        ],
        tmp_path,
    )
    assert sorted(t["__address__"] for t in targets) == ["10.0.0.1:8000", "10.0.0.1:9410"]
    for target in targets:
        assert {k: target[k] for k in ("namespace", "inference", "replica", "rank", "pod")} == {
            "namespace": "llm",
            "inference": "qwen",
            "replica": "1",
            "rank": "0",
            "pod": "qwen-1",
        }


HEALTH_CASES = {
    "no status yet": ("{metadata={generation=1}}", "Progressing"),
    "status of an older generation": (
        '{metadata={generation=2}, status={observedGeneration=1, conditions={{type="Ready", status="True"}}}}',
        "Progressing",
    ),
    "ready": (
        '{metadata={generation=2}, status={observedGeneration=2, conditions={{type="Ready", status="True"},'
        ' {type="Degraded", status="False"}}}}',
        "Healthy",
    ),
    "a replica keeps failing": (
        "{metadata={generation=1}, status={observedGeneration=1, conditions={"
        '{type="Ready", status="False"}, {type="Degraded", status="True"}}}}',
        "Degraded",
    ),
    "invalid spec": (
        "{metadata={generation=1}, status={observedGeneration=1, conditions={"
        '{type="Ready", status="False", reason="InvalidSpec"}}}}',
        "Degraded",
    ),
    "creating": (
        "{metadata={generation=1}, status={observedGeneration=1, conditions={"
        '{type="Ready", status="False", reason="Creating"}}}}',
        "Progressing",
    ),
}


@pytest.mark.skipif(
    shutil.which("lua5.1") is None, reason="needs lua5.1 (Argo CD runs health checks as Lua 5.1)"
)
@pytest.mark.parametrize("case", HEALTH_CASES)
def test_argocd_health_check(case):
    body, expected = HEALTH_CASES[case]
    lua = documents(GITOPS, "ConfigMap")[0]["data"][
        "resource.customizations.health.inference.ascendfleet.io_AscendInference"
    ]
    script = f"obj = {body}\nlocal function health()\n{lua}\nend\nprint(health().status)\n"
    done = subprocess.run(["lua5.1", "-"], input=script, capture_output=True, text=True, check=False)
    assert (done.stdout.strip(), done.stderr) == (expected, "")
