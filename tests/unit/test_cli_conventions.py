"""The CLI's day-one conventions: --version, completion, -o json|yaml, kubectl-like inputs, one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib.metadata import version

import pytest
import yaml

from ascend_fleet.api.settings import OperatorSettings, ReconcileSettings
from ascend_fleet.reconcile.observe import is_picker_object
from ascend_fleet.reconcile.plan import Observed, plan_pass
from ascend_fleet.render import validate
from ascend_fleet.render.routing import PickerSettings
from tests.support.paths import EXAMPLES, ROOT
from tests.unit.test_cli import SEED, cli

ROUTED = ROOT / "examples" / "vllm-routed.yaml"
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n"


def test_version_is_the_package_version():
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"ascend-fleet {version('ascend-fleet')}"


def test_bash_completion_completes_commands_and_options():
    """The generated script, sourced in a real bash, offers the subcommands and a command's options."""
    script = cli("completion", "bash")
    assert script.returncode == 0, script.stderr

    def complete(*words: str) -> list[str]:
        line = " ".join(["ascend-fleet", *words])
        probe = (
            f"{script.stdout}\nCOMP_WORDS=(ascend-fleet {' '.join(words)}); COMP_CWORD={len(words)}; "
            f'COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}; _shtab_ascend_fleet; printf "%s\\n" "${{COMPREPLY[@]}}"'
        )
        run = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert "validate" in complete("va") and "render" not in complete("va")
    assert {"--output", "--recursive"} <= set(complete("plan", "--"))
    assert {"bash", "zsh", "fish"} == set(complete("completion", ""))


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_are_scripts_for_that_shell(shell):
    result = cli("completion", shell)
    assert result.returncode == 0, result.stderr
    if shell == "zsh":
        assert "#compdef ascend-fleet" in result.stdout and "{-R,--recursive}" in result.stdout
    else:
        assert "-a validate" in result.stdout
        assert "_using validate' -s R -l recursive" in result.stdout
    if shutil.which(shell):  # the shell's own parser, where it is installed
        check = subprocess.run([shell, "-n"], input=result.stdout, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr


def test_completion_refuses_an_unknown_shell():
    result = cli("completion", "tcsh-9")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.parametrize("command", ["plan", "validate"])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_structured_output_is_one_report(command, fmt):
    result = cli(command, "-o", fmt, str(SEED), "-", stdin=CONFIGMAP)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert set(report) == {"items", "skipped"}
    (item,) = report["items"]
    assert item["source"] == str(SEED) and item["name"] == "qwen-7b" and item["valid"] is True
    assert item["problems"] == [] and item["warnings"]  # the upstream image warns about its exporter
    assert item["layout"]["totalNpus"] == 16 and item["layout"]["podsPerReplica"] == 1
    assert item["layout"]["summary"] == "2 replicas x 1 pod x 8 NPUs = 16 NPUs"
    assert report["skipped"] == ["-: skipped ConfigMap/settings: not an AscendInference"]


def test_structured_output_lists_problems_and_exits_2():
    from tests.unit.test_cli import BAD_STREAM

    result = cli("validate", "-o", "json", "-", stdin=BAD_STREAM)
    assert result.returncode == 2
    items = json.loads(result.stdout)["items"]
    assert [(i["name"], i["valid"], i["layout"]) for i in items] == [
        ("first", False, None),
        ("second", False, None),
    ]
    assert any("tensor must divide 8" in p for p in items[0]["problems"])
    assert "-#1 (first): spec.parallelism:" in result.stderr  # the same lines as with -o table


def test_directories_recursion_and_repeated_f(tmp_path):
    (tmp_path / "nested").mkdir()
    shutil.copy(SEED, tmp_path / "seed.yaml")
    shutil.copy(ROUTED, tmp_path / "nested" / "routed.yml")
    (tmp_path / "notes.txt").write_text("not a manifest")
    flat = cli("validate", str(tmp_path))
    assert flat.returncode == 0, flat.stderr
    assert flat.stdout.count(" is valid (") == 1
    deep = cli("validate", "-R", str(tmp_path))
    assert deep.stdout.count(" is valid (") == 2 and "routed.yml: qwen-routed is valid" in deep.stdout
    flags = cli("plan", "-f", str(SEED), "-f", str(ROUTED))
    assert flags.returncode == 0 and "qwen-7b:" in flags.stdout and "qwen-routed:" in flags.stdout
    every = cli("validate", str(ROOT / "examples"))
    assert every.stdout.count(" is valid (") == len(EXAMPLES)


def bad_input_line(*args: str, stdin: str | None = None) -> str:
    """Run the CLI on a bad input; it must exit 2 with exactly one line on stderr, which is returned."""
    result = cli(*args, stdin=stdin)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_every_bad_input_is_one_line_and_exit_2(tmp_path):
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes("metadata: {name: caf\xe9}\n".encode("latin-1"))
    assert (
        bad_input_line("validate", str(binary)) == f"error: {binary}: not UTF-8 text (byte 0xe9 at offset 20)"
    )
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert bad_input_line("plan", str(empty)) == f"error: {empty}: the input is empty"
    assert "only comments" in bad_input_line("render", "-", stdin="# nothing\n---\n")
    assert (
        bad_input_line("validate", "missing.yaml")
        == "error: missing.yaml: cannot read: No such file or directory"
    )
    assert bad_input_line("validate", str(tmp_path / "nothing-here"), "-f", str(empty)).endswith(
        "cannot read: No such file or directory"
    )
    assert "not valid YAML: " in bad_input_line("plan", "-", stdin="spec: [unclosed\n")
    only_other = cli("validate", "-", stdin=CONFIGMAP)
    assert only_other.returncode == 2
    assert only_other.stderr.splitlines() == [
        "-: skipped ConfigMap/settings: not an AscendInference",
        "error: -: no AscendInference documents in the input",
    ]


def test_a_wrong_config_is_one_line(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("control:\n  catalogPreset: nope\n  maxWindow: soon\nimages: [a]\nunknownKey: 1\n")
    line = bad_input_line("validate", "--config", str(config), str(SEED))
    assert line.startswith(f"error: {config}: not a usable operator configuration: control.catalogPreset: ")
    assert "control.maxWindow: " in line and "images: " in line
    config.write_text("control: [unclosed\n")
    assert "not valid YAML: " in bad_input_line("render", "--config", str(config), str(SEED))
    assert bad_input_line("render", "--config", str(tmp_path / "no.yaml"), str(SEED)).endswith(
        "no.yaml: cannot read: No such file or directory"
    )


def test_other_kinds_are_skipped_with_one_line_each(tmp_path):
    stream = tmp_path / "mixed.yaml"
    stream.write_text(
        f"{CONFIGMAP}---\n{SEED.read_text()}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\n"
    )
    result = cli("render", str(stream))
    assert result.returncode == 0, result.stderr
    skipped = [line for line in result.stderr.splitlines() if ": skipped " in line]
    assert skipped == [
        f"{stream}#1: skipped ConfigMap/settings: not an AscendInference",
        f"{stream}#3: skipped Secret/s: not an AscendInference",
    ]
    assert {o["kind"] for o in yaml.safe_load_all(result.stdout)} == {
        "Pod",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }


def test_render_writes_no_anchors():
    """Every pod repeats the same probe; the stream must spell each one out instead of `&id001`/`*id001`."""
    result = cli("render", *map(str, EXAMPLES))
    assert result.returncode == 0, result.stderr
    assert "&id0" not in result.stdout and "*id0" not in result.stdout
    pods = [o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "Pod"]
    assert len(pods) > 2


def operator_creates(body: dict, settings: OperatorSettings) -> list[dict]:
    """What the operator creates for a new object, pass after pass, each seeing the previous passes' objects."""
    from ascend_fleet.reconcile.apply import with_default_image

    valid = validate(with_default_image(body, settings))
    picker = PickerSettings(image=settings.routing.picker_image)
    observed, created = Observed(), []
    for _ in range(5):
        creates = plan_pass(
            valid.obj,
            valid.layout,
            observed,
            0.0,
            ReconcileSettings(),
            picker,
            network=settings.network_policy,
        ).creates
        if not creates:
            break
        created += creates
        for obj in creates:
            kind, name = obj["kind"], obj["metadata"]["name"]
            if kind == "Pod":
                observed.pods.append(obj)
            elif kind == "Service":
                observed.services[name] = obj
            elif kind == "PodDisruptionBudget" and not is_picker_object(obj):
                observed.pdb = obj
            elif kind == "NetworkPolicy":
                observed.network_policy = obj
            else:
                observed.routing[(kind, name)] = obj
    return created


def test_render_with_config_is_what_the_operator_creates(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "images:\n  vllm-ascend: registry.example.com/ai/vllm-ascend:0.1.0\n"
        "routing:\n  pickerImage: registry.example.com/mirror/epp:v1.5.0\n"
        "networkPolicy:\n  extraPeers:\n  - {namespaceLabels: {team: callers}, podLabels: {}}\n"
    )
    result = cli("render", "--config", str(config), str(ROUTED))
    assert result.returncode == 0, result.stderr
    rendered = list(yaml.safe_load_all(result.stdout))
    images = {c["image"] for o in rendered for c in _containers(o)}
    assert images == {"registry.example.com/ai/vllm-ascend:0.1.0", "registry.example.com/mirror/epp:v1.5.0"}
    policy = next(o for o in rendered if o["kind"] == "NetworkPolicy")
    callers = {"namespaceSelector": {"matchLabels": {"team": "callers"}}, "podSelector": {}}
    assert callers in policy["spec"]["ingress"][1]["from"]
    expected = operator_creates(
        yaml.safe_load(ROUTED.read_text()), OperatorSettings.load(str(config), environ={})
    )

    def key(obj: dict) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    assert sorted(rendered, key=key) == sorted(expected, key=key)


def _containers(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    pod = spec if obj["kind"] == "Pod" else ((spec.get("template") or {}).get("spec") or {})
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def test_an_ascend_inference_of_the_wrong_group_is_checked_not_skipped():
    wrong = "apiVersion: v1\nkind: AscendInference\nmetadata: {name: x}\nspec: {}\n"
    result = cli("validate", "-", stdin=wrong)
    assert result.returncode == 2
    assert "- (x): apiVersion is 'v1'; it must be 'inference.ascendfleet.io/v1alpha1'" in result.stderr
    assert "skipped" not in result.stderr
