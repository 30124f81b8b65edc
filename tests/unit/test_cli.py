"""The CLI as a user runs it: real subprocesses, exit codes and messages."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.support.paths import CRD_FILE, EXAMPLES, ROOT

SEED = ROOT / "examples" / "vllm-tp4-pp2-dp2.yaml"


def cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "ascend_fleet.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_plan_shows_the_seed_layout():
    result = cli("plan", str(SEED))
    assert result.returncode == 0, result.stderr
    assert "qwen-7b: 2 replicas x 1 pod x 8 NPUs = 16 NPUs" in result.stdout
    header = result.stdout.splitlines()[0].split()
    assert header[:3] == ["NAME", "ENGINE", "CHIP"]


def test_validate_accepts_every_example():
    result = cli("validate", *map(str, EXAMPLES))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" is valid (") == len(EXAMPLES)


def chart_settings(tmp_path) -> str:
    """The operator's settings as the chart installs them by default: its engine images at the chart's
    appVersion (an example validated without them draws the upstream images' no-exporter warning)."""
    chart = ROOT / "charts" / "ascend-fleet"
    version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    values = yaml.safe_load((chart / "values.yaml").read_text())
    images = {key: f"{image['repository']}:{image['tag'] or version}{image.get('suffix', '')}"
              for key, image in values["engineImages"].items()}  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"images": images}))
    return str(path)


def test_no_example_turns_on_what_validate_warns_about(tmp_path):
    result = cli("validate", "--config", chart_settings(tmp_path), "-o", "json", *map(str, EXAMPLES))
    assert result.returncode == 0, result.stderr
    warned = {
        item["source"].rsplit("/", 1)[-1]: item["warnings"] for item in json.loads(result.stdout)["items"]
    }
    assert set(warned) == {path.name for path in EXAMPLES}
    for name, warnings in warned.items():
        assert not warnings, f"examples/{name}: {warnings}"


def test_a_two_role_fleet_is_summed_up_per_role():
    result = cli("validate", str(ROOT / "examples" / "vllm-disaggregated.yaml"))
    assert result.returncode == 0, result.stderr
    assert (
        "qwen-pd is valid (prefill: 1 replica x 1 pod x 4 NPUs = 4 NPUs; "
        "decode: 2 replicas x 1 pod x 2 NPUs = 4 NPUs)"
    ) in result.stdout


BAD_STREAM = """\
apiVersion: inference.ascendfleet.io/v1alpha1
kind: AscendInference
metadata: {name: first}
spec:
  model: {name: m, path: /models/m}
  engine: {type: vllm-ascend, args: ["--port=9"]}
  parallelism: {tensor: 3, pipeline: 3}
---
apiVersion: inference.ascendfleet.io/v1alpha1
kind: AscendInference
metadata: {name: second}
spec:
  model: {name: m, path: /models/m}
  engine: {type: sglang}
  memory: {staticFraction: 0.9}
  rules: [{metric: npu_utilization, threshold: "120%", for: 5m, action: scale_up}]
"""


def test_validate_lists_every_problem_and_exits_2():
    result = cli("validate", "-", stdin=BAD_STREAM)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert any(
        line.startswith("-#1 (first): spec.parallelism:") and "tensor must divide 8" in line for line in lines
    )
    assert any("-#2 (second): spec.memory: memory fractions add up to 1.30" in line for line in lines)
    assert any("-#2 (second): spec.rules.0.threshold: '120%' is out of range" in line for line in lines)


def test_user_arg_conflict_is_reported():
    doc = yaml.safe_load(SEED.read_text())
    doc["spec"]["engine"]["args"] = ["--max-num-seqs", "8"]
    result = cli("validate", "-", stdin=yaml.safe_dump(doc))
    assert result.returncode == 2
    assert "repeats the generated '--max-num-seqs 32' (from spec.batching.maxBatchSize)" in result.stderr


def test_missing_file_and_broken_yaml_are_clear():
    result = cli("validate", "no-such-file.yaml")
    assert result.returncode == 2 and "no-such-file.yaml: cannot read" in result.stderr
    result = cli("plan", "-", stdin="spec: [unclosed")
    assert result.returncode == 2 and "not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr


def test_render_is_a_yaml_stream_with_namespace():
    result = cli("render", "-n", "llm", str(SEED))
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert sorted({o["kind"] for o in objects}) == ["NetworkPolicy", "Pod", "PodDisruptionBudget", "Service"]
    assert {o["metadata"]["namespace"] for o in objects} == {"llm"}
    assert len([o for o in objects if o["kind"] == "Pod"]) == 2


def test_render_refuses_invalid_input():
    result = cli("render", "-", stdin=BAD_STREAM)
    assert result.returncode == 2 and result.stdout == ""


def test_crd_command_prints_the_checked_in_crd():
    result = cli("crd")
    assert result.returncode == 0
    assert result.stdout == CRD_FILE.read_text()


def test_render_and_validate_use_the_operators_configuration(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "images:\n  sglang: registry.example.com/ai/sglang:v0.5.14-fleet1\n"
        "control:\n  catalog:\n    ttft_p95: 'histogram_quantile(0.95, x)'\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "apiVersion: inference.ascendfleet.io/v1alpha1\nkind: AscendInference\nmetadata: {name: s}\n"
        "spec:\n  model: {name: m, path: /models/m}\n  engine: {type: sglang}\n"
        "  rules: [{metric: ttft_p95, threshold: 2, for: 5m, action: scale_up}]\n"
    )
    rendered = cli("render", "--config", str(config), str(spec))
    assert rendered.returncode == 0, rendered.stderr
    assert "image: registry.example.com/ai/sglang:v0.5.14-fleet1" in rendered.stdout
    assert "ASCEND_FLEET_EXPORTER" in rendered.stdout and "warning" not in rendered.stderr
    # Without the configuration: the upstream image, no exporter, a warning; the catalog is not checked.
    plain = cli("render", str(spec))
    assert "image: lmsysorg/sglang:" in plain.stdout and "ASCEND_FLEET_EXPORTER" not in plain.stdout
    assert "without this project's exporter" in plain.stderr
    config.write_text("control:\n  catalogPreset: ascend-fleet\n")
    refused = cli("validate", "--config", str(config), str(spec))
    assert refused.returncode == 2 and "unknown metric 'ttft_p95'" in refused.stderr


def test_dev_and_dev_cluster_pass_real_and_prometheus_through(monkeypatch):
    """`dev --real` once ran the demo on the emulator: the flag never reached the demo's options."""
    from ascend_fleet.cli import main as cli
    from ascend_fleet_dev import serve
    from ascend_fleet_dev.demo import runner

    seen = {}
    monkeypatch.setattr(runner, "run_demo", lambda options: seen.setdefault("dev", options) and 0)
    monkeypatch.setattr(serve, "serve_real", lambda *a, **kw: seen.setdefault("dev-cluster", kw) and None)
    assert cli.main(["dev", "--real", "--timeout", "5"]) == 0
    assert seen["dev"].real is True
    assert cli.main(["dev-cluster", "--real", "--prometheus"]) == 0
    assert seen["dev-cluster"]["prometheus"] is True


def test_dev_cluster_passes_real_engines_through_and_needs_real_for_them(monkeypatch, capsys):
    from ascend_fleet.cli import main as cli
    from ascend_fleet_dev import serve

    seen: dict = {}
    monkeypatch.setattr(serve, "serve_real", lambda *a, **kw: seen.update(kw))
    assert cli.main(["dev-cluster", "--real"]) == 0
    assert seen["engines"] == "simulated" and seen["real_engine_limit"] == 2
    assert cli.main(["dev-cluster", "--real", "--engines", "vllm", "--max-real-engines", "3"]) == 0
    assert seen["engines"] == "vllm" and seen["real_engine_limit"] == 3
    seen.clear()
    assert cli.main(["dev-cluster", "--engines", "vllm"]) == 2
    assert seen == {} and "--engines vllm runs on the real control plane only" in capsys.readouterr().err


def test_dev_cluster_kube_version_chooses_the_control_plane_release_and_needs_real(monkeypatch, capsys):
    from ascend_fleet.cli import main as cli
    from ascend_fleet_dev import serve
    from ascend_fleet_dev.real import controlplane
    from ascend_fleet_dev.real.kubeversions import KUBE_VERSION_ENV

    monkeypatch.delenv(KUBE_VERSION_ENV, raising=False)
    monkeypatch.delenv("ASCEND_FLEET_CONTROLPLANE", raising=False)
    chosen = []
    monkeypatch.setattr(
        serve, "serve_real", lambda *a, **kw: chosen.append(controlplane.ControlPlane().kube_version)
    )
    assert cli.main(["dev-cluster", "--real", "--kube-version", "1.30"]) == 0
    assert chosen == ["1.30"]
    monkeypatch.delenv(KUBE_VERSION_ENV)
    assert cli.main(["dev-cluster", "--kube-version", "1.30"]) == 2
    assert "--kube-version chooses the real control plane's release (add --real)" in capsys.readouterr().err
    try:
        controlplane.ensure_binary(kube_version="1.27", build=False)
    except controlplane.ControlPlaneUnavailable as error:
        assert "Kubernetes 1.27 is not built here; choose one of 1.30, 1.34" in str(error)
    else:
        raise AssertionError("a minor without a module must be refused")
