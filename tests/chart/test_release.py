"""The release: what a ``v*`` tag publishes is what the chart installs by default, on the Kubernetes it is tested on."""

from __future__ import annotations

import re
import tomllib

import yaml

from ascend_fleet.api.images import DEFAULT_PICKER_IMAGE, PROJECT_REGISTRY, default_image
from tests.chart import helm
from tests.support.paths import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
DEFAULT_CHIP = "ascend910b"


def package_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def chart() -> dict:
    return yaml.safe_load((helm.CHART / "Chart.yaml").read_text())


def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as a boolean
    return data


def test_kube_version_is_the_oldest_release_the_tests_run_on():
    """The floor is the oldest minor a control plane is built for (tools/controlplane/kube-<minor>/go.mod),
    which `make test-oldest-kube` runs a named part of the suite on."""
    oldest = re.search(r"^OLDEST_KUBE := (\d+)\.(\d+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert oldest, "the Makefile names no OLDEST_KUBE"
    go_mod = (ROOT / "tools" / "controlplane" / f"kube-{oldest[1]}.{oldest[2]}" / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes v(\d+)\.(\d+)\.\d+$", go_mod, re.MULTILINE)
    assert found and (found[1], found[2]) == (oldest[1], oldest[2]), (
        "kube-<minor>/go.mod pins another release"
    )
    assert chart()["kubeVersion"] == f">={found[1]}.{found[2]}.0-0"


def test_chart_version_and_default_image_tags_are_the_package_version():
    """Empty tags default to appVersion (tests/chart/test_install.py checks the rendered images)."""
    version = package_version()
    assert chart()["version"] == version and chart()["appVersion"] == version
    values = helm.default_values()
    assert values["operator"]["image"]["tag"] in ("", version)
    assert values["pickerImage"]["tag"] in ("", version)
    for key, image in values["engineImages"].items():
        assert image["tag"] in ("", version), key


def default_images() -> dict[str, str]:
    """Every image the chart's values name by default, as repository:<version><suffix>: the operator, the
    endpoint picker and each engine by the chip it serves."""
    values = helm.default_values()
    assert not values["config"]["routing"]["pickerImage"], "the default picker is the pickerImage value"
    images = {
        "operator": values["operator"]["image"]["repository"] + ":{version}",
        "picker": values["pickerImage"]["repository"] + ":{version}",
    }
    for key, image in values["engineImages"].items():
        images[key] = image["repository"] + ":{version}" + image.get("suffix", "")
    return images


def test_release_builds_every_image_the_chart_names():
    flow = workflow()
    registry = flow["env"]["REGISTRY"]
    job = flow["jobs"]["images"]
    built = {
        f"{registry}/{entry['image']}:{{version}}{entry['suffix']}": entry
        for entry in job["strategy"]["matrix"]["include"]
    }
    assert set(built) == set(default_images().values())
    build = next(
        step for step in job["steps"] if str(step.get("uses", "")).startswith("docker/build-push-action")
    )
    assert set(build["with"]["platforms"].split(",")) == {"linux/arm64", "linux/amd64"}
    assert build["with"]["push"] is True
    for key, image in default_images().items():
        entry = built[image]
        assert (ROOT / "images" / entry["image"] / "Dockerfile").is_file()
        if key in ("operator", "picker"):
            assert not entry["build-args"], f"{image} builds from this checkout alone"
            continue
        engine, _, chip = key.partition("/")
        base = default_image(engine, chip or DEFAULT_CHIP)
        arg = "VLLM_ASCEND_IMAGE" if engine == "vllm-ascend" else "SGLANG_IMAGE"
        assert entry["build-args"] == f"{arg}={base}", f"{image} must extend {base}"


def test_release_runs_on_version_tags_and_publishes_the_chart_and_crds():
    flow = workflow()
    assert flow["on"] == {"push": {"tags": ["v*"]}}
    scripts = "\n".join(step.get("run", "") for job in flow["jobs"].values() for step in job["steps"])
    assert "helm package charts/ascend-fleet" in scripts
    assert re.search(r'helm push "dist/ascend-fleet-\$VERSION\.tgz" "\$CHART_REGISTRY"', scripts)
    assert flow["env"]["CHART_REGISTRY"].startswith("oci://")
    assert re.search(r"gh release create .*\n.*\n\s+crds/\*\.yaml", scripts)
    # The tag must be the package's and the chart's version, or the chart would name images nobody pushed.
    assert 'if [ "$version" != "$package" ]' in scripts


def test_the_operators_default_picker_is_the_released_one():
    """The operator without the chart (its settings' default) runs the picker the release pushes, as the chart does."""
    assert workflow()["env"]["REGISTRY"] == PROJECT_REGISTRY
    assert default_images()["picker"].format(version=package_version()) == DEFAULT_PICKER_IMAGE
