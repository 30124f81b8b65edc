"""Every value that reaches a shell stays a value: the Ray gang's ``bash -c`` scripts hold nothing from the spec.

Kubernetes expands ``$(VAR)`` in a container's command and args before any shell reads them, so an
``engine.env`` value referenced from ``engine.args`` lands in the command as it is. The test expands the rendered
commands as the kubelet does, runs them with bash and stub ``ray``/``vllm`` programs that record their argv, and
finds the hostile values as plain arguments, with nothing run that the operator did not write.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_fleet.render import render_all, validate
from ascend_fleet_dev.real.vllm_engine import engine_environment, expand_variables
from tests.support.documents import inference

BASH = shutil.which("bash")
HOSTILE = {
    "SEMICOLON": "x; touch {canary}; #",
    "SUBSHELL": "$(touch {canary})",
    "BACKQUOTES": "`touch {canary}`",
    "NEWLINE": "a\ntouch {canary}\n",
    "QUOTES": "x' \"; touch {canary}; echo '",
    "DOLLAR": "${{PATH}}$$",
}
STUB = """#!/bin/sh
# Records the argv it was started with, one JSON list a line.
{python} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> {log}.$(basename "$0")
"""


def gang(canary: Path) -> list[dict]:
    env = [{"name": name, "value": value.format(canary=canary)} for name, value in HOSTILE.items()]
    doc = (
        inference("ray")
        .engine("vllm-ascend")
        .spec(
            parallelism={"tensor": 8, "pipeline": 2},
            engine={
                "type": "vllm-ascend",
                "multiNode": "ray",
                "env": env,
                "args": ["--chat-template=$(SEMICOLON)"],
            },
        )
        .build()
    )
    return [o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"]


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_hostile_env_values_reach_ray_and_vllm_as_plain_arguments(tmp_path):
    canary = tmp_path / "canary"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv"
    for program in ("ray", "vllm"):
        stub = bin_dir / program
        stub.write_text(STUB.format(python=sys.executable, log=log))
        stub.chmod(0o755)
    pods = gang(canary)
    assert len(pods) == 2
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        env = engine_environment(container, {"status.podIP": "10.0.0.1", "metadata.namespace": "ns"})
        argv = [expand_variables(token, env) for token in container["command"]]
        assert argv[:2] == ["/bin/bash", "-c"]
        assert subprocess.run([BASH, "-n", "-c", argv[2]], check=False).returncode == 0
        # The scripts are constants: no value of the spec is in them.
        assert not any(value.format(canary=canary)[:3] in argv[2] for value in HOSTILE.values())
        done = subprocess.run(
            [BASH, *argv[1:]],
            env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert not canary.exists()
    (head, worker) = [json.loads(line) for line in (tmp_path / "argv.ray").read_text().splitlines()]
    assert head == ["start", "--head", "--port=6379"]
    assert worker == ["start", "--address=ray-0.ray-pods.ns.svc:6379", "--block"]
    (serve,) = [json.loads(line) for line in (tmp_path / "argv.vllm").read_text().splitlines()]
    assert serve[0] == "serve"
    assert f"--chat-template={HOSTILE['SEMICOLON'].format(canary=canary)}" in serve


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_value_is_one_argument_of_vllm_serve(tmp_path, name):
    canary = tmp_path / "canary"
    value = HOSTILE[name].format(canary=canary)
    env = [{"name": name, "value": value}]
    doc = (
        inference("ray")
        .engine("vllm-ascend")
        .spec(
            parallelism={"tensor": 8, "pipeline": 2},
            engine={
                "type": "vllm-ascend",
                "multiNode": "ray",
                "env": env,
                "args": [f"--chat-template=$({name})"],
            },
        )
        .build()
    )
    leader = next(o for o in render_all(validate(doc).obj) if o["kind"] == "Pod")
    (container,) = leader["spec"]["containers"]
    expanded = [expand_variables(token, engine_environment(container, {})) for token in container["command"]]
    script = expanded[2]
    # bash runs the script with the serve argv as its parameters; printf shows them, one per line, as bash sees them.
    shown = subprocess.run(
        [
            BASH,
            "-c",
            script.replace('exec "$@"', 'printf "%s\\0" "$@"').replace("ray start", "true"),
            *expanded[3:],
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    words = shown.stdout.split("\0")[:-1]
    assert words == expanded[4:]
    assert f"--chat-template={expand_variables(value, {})}" in words  # the kubelet reads $$ in a value as $
    assert not canary.exists()
