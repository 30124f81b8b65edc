"""The Dockerfiles, checked without a Docker engine: they parse, pin their bases, run as non-root, hold no secrets,
copy only what the build context sends, and build FROM the upstream engine images the operator defaults to.

``make images`` builds them where a Docker engine exists.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ascend_fleet.api.images import DEFAULT_IMAGES
from ascend_fleet.render.routing import PICKER_GRPC_PORT, PICKER_HEALTH_PORT, PICKER_METRICS_PORT, PICKER_UID
from tests.support.paths import ROOT

IMAGES = ROOT / "images"
DOCKERFILES = {path.parent.name: path for path in sorted(IMAGES.glob("*/Dockerfile"))}
SECRET_NAMES = re.compile(
    r"(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.I
)
SECRET_FILES = (
    "*.pem",
    "*.key",
    "*id_rsa*",
    "*id_ed25519*",
    ".netrc",
    ".pypirc",
    ".npmrc",
    "*.p12",
    ".docker/config.json",
    ".env",
    "*kubeconfig*",
)


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int
    flags: list[str] = field(default_factory=list)

    def words(self) -> list[str]:
        """Arguments of the exec (JSON) form, or the shell form split on blanks."""
        if self.args.startswith("["):
            return json.loads(self.args)
        return self.args.split()


def parse(text: str) -> list[Instruction]:
    """Dockerfile lines to instructions: comments and blank lines dropped, backslash continuations joined,
    leading --flags split off (the BuildKit parser agrees; see test_buildkit_parser_agrees)."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = pending + stripped
        pending = ""
        keyword, _, rest = line.partition(" ")
        rest = rest.strip()
        flags = []
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        instructions.append(Instruction(keyword.upper(), rest, start, flags))
    assert not pending, "the file ends inside a line continuation"
    return instructions


def stages(instructions: list[Instruction]) -> tuple[dict[str, str], list[list[Instruction]]]:
    """Global ARG defaults, and the instructions of each stage (starting with its FROM)."""
    global_args: dict[str, str] = {}
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            result.append([instruction])
        elif result:
            result[-1].append(instruction)
        else:
            assert instruction.keyword == "ARG", f"line {instruction.line}: only ARG may come before FROM"
            name, _, default = instruction.args.partition("=")
            global_args[name] = default
    return global_args, result


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m[1], m[0]), text)


def base_images(path: Path) -> list[str]:
    """The image of every FROM, with ARG defaults filled in; stage names (FROM build) excluded."""
    global_args, all_stages = stages(parse(path.read_text()))
    names, images = set(), []
    for stage in all_stages:
        words = stage[0].words()
        image = expand(words[0], global_args)
        if image not in names:
            images.append(image)
        if len(words) == 3 and words[1].upper() == "AS":
            names.add(words[2])
    return images


@pytest.fixture(params=sorted(DOCKERFILES), ids=sorted(DOCKERFILES))
def dockerfile(request) -> Path:
    return DOCKERFILES[request.param]


def test_the_four_images_exist():
    assert set(DOCKERFILES) == {"operator", "vllm-ascend", "sglang", "picker"}


def test_parses(dockerfile):
    instructions = parse(dockerfile.read_text())
    known = {
        "FROM",
        "ARG",
        "ENV",
        "LABEL",
        "WORKDIR",
        "COPY",
        "ADD",
        "RUN",
        "USER",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "HEALTHCHECK",
        "SHELL",
        "STOPSIGNAL",
        "VOLUME",
        "ONBUILD",
    }
    assert instructions and {i.keyword for i in instructions} <= known
    for instruction in instructions:
        if instruction.keyword in ("ENTRYPOINT", "CMD"):
            instruction.words()  # the exec form is valid JSON


def test_buildkit_parser_agrees(dockerfile):
    """Docker's own parser (the `dockerfile` package wraps BuildKit's) reads the same instructions."""
    buildkit = pytest.importorskip(
        "dockerfile", reason="pip install dockerfile (BuildKit's parser) to cross-check"
    )
    ours = [(i.keyword, i.line) for i in parse(dockerfile.read_text())]
    theirs = [(c.cmd.upper(), c.start_line) for c in buildkit.parse_file(str(dockerfile))]
    assert ours == theirs


def test_bases_are_pinned(dockerfile):
    for image in base_images(dockerfile):
        if image == "scratch":  # the empty image, nothing pulled
            continue
        assert "$" not in image, f"{image}: an ARG without a default"
        name, _, digest = image.partition("@")
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
        assert digest.startswith("sha256:") or (tag and tag != "latest" and re.search(r"\d", tag)), (
            f"{dockerfile.parent.name}: base {image} is not pinned to a versioned tag or digest"
        )


def test_runs_as_non_root(dockerfile):
    global_args, all_stages = stages(parse(dockerfile.read_text()))
    final = all_stages[-1]
    args = dict(global_args)
    for instruction in final:
        if instruction.keyword == "ARG":
            name, _, default = instruction.args.partition("=")
            args[name] = default
    users = [expand(i.args, args) for i in final if i.keyword == "USER"]
    assert users, (
        f"{dockerfile.parent.name}: the final stage sets no USER (it would run as the base's, often root)"
    )
    user = users[-1].split(":")[0]
    assert user not in ("root", "0", ""), f"{dockerfile.parent.name} runs as {users[-1]}"
    assert user.isdigit(), "a numeric USER lets Kubernetes' runAsNonRoot verify it"


def test_no_secrets(dockerfile):
    text = dockerfile.read_text()
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text), "credentials in a URL"
    for instruction in parse(text):
        if instruction.keyword in ("ENV", "ARG"):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", instruction.args) or [
                instruction.args.split()[0]
            ]:
                assert not SECRET_NAMES.search(name), f"line {instruction.line}: {name} looks like a secret"
        if instruction.keyword in ("COPY", "ADD"):
            for source in instruction.words()[:-1]:
                assert not any(
                    fnmatch.fnmatch(Path(source).name, p) or fnmatch.fnmatch(source, p) for p in SECRET_FILES
                ), f"line {instruction.line} copies {source}"
        if instruction.keyword == "ADD":
            assert not re.match(r"https?://", instruction.args), "ADD of a URL is neither pinned nor checked"


def dockerignore_rules() -> list[tuple[bool, str]]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!").rstrip("/")))
    return rules


def sent_to_builder(relative: str) -> bool:
    """Whether .dockerignore lets a path into the build context (last matching rule wins, as Docker does)."""
    sent = True
    for include, pattern in dockerignore_rules():
        pattern = pattern.replace("**/", "*/")
        parts = relative.split("/")
        if any(fnmatch.fnmatch("/".join(parts[:n]), pattern) for n in range(1, len(parts) + 1)):
            sent = include
    return sent


def test_copied_sources_exist_and_reach_the_builder(dockerfile):
    for instruction in parse(dockerfile.read_text()):
        if instruction.keyword == "COPY" and not any(f.startswith("--from") for f in instruction.flags):
            for source in instruction.words()[:-1]:
                assert (ROOT / source).exists(), f"{dockerfile.parent.name}: COPY {source}: no such file"
                assert sent_to_builder(source.rstrip("/")), f"{source} is excluded by .dockerignore"


def test_dockerignore_keeps_the_context_small():
    for path in (
        ".git",
        ".venv",
        "tests",
        "charts",
        "docs",
        ".pytest_cache",
        "operator/ascend_fleet.egg-info",
        "operator/ascend_fleet/__pycache__",
    ):
        assert not sent_to_builder(path), f"{path} would be sent to the builder"
    assert sent_to_builder("operator/ascend_fleet/cli/main.py") and sent_to_builder("pyproject.toml")


def test_operator_image():
    instructions = parse(DOCKERFILES["operator"].read_text())
    entrypoint = [i.words() for i in instructions if i.keyword == "ENTRYPOINT"]
    assert entrypoint == [["ascend-fleet"]]
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    assert "pip wheel" in runs and "pip install" in runs
    assert "65532" in " ".join(i.args for i in instructions if i.keyword == "USER"), "the chart's runAsUser"


# The operator's own modules that `ascend-fleet run` loads; the image imports them after cutting its dependencies.
RUNTIME_MODULES = (
    "ascend_fleet.cli.main",
    "ascend_fleet.cli.runtime",
    "ascend_fleet.handlers.operator",
    "ascend_fleet.handlers.control",
    "ascend_fleet.handlers.leader",
    "ascend_fleet.control.loop",
    "ascend_fleet.kube",
    "ascend_fleet.reconcile",
    "ascend_fleet.status",
    "ascend_fleet.observed",
    "ascend_fleet.promql.guarded",
)
# Parts of the kubernetes client the operator never imports (the image deletes them): the asyncio half and the
# generated per-group API classes.
UNUSED_CLIENT_PARTS = ("kubernetes/aio", "kubernetes/client/api")


def operator_install() -> str:
    """The final stage's RUN that installs the package."""
    _, all_stages = stages(parse(DOCKERFILES["operator"].read_text()))
    (run,) = [i.args for i in all_stages[-1] if i.keyword == "RUN" and "pip install" in i.args]
    return run


def test_operator_image_drops_what_it_never_imports():
    """The install removes the client's unused half and the test folders, then proves the runtime still imports."""
    run = operator_install()
    steps = [step.strip() for step in run.split("&&")]
    install = next(n for n, step in enumerate(steps) if "pip install" in step)
    removals = [n for n, step in enumerate(steps) if step.startswith(("rm ", "find "))]
    for part in UNUSED_CLIENT_PARTS:
        assert any(f'"$site/{part}"' in steps[n] for n in removals), f"the image keeps {part}"
    assert any("-name tests" in steps[n] for n in removals), "the dependencies' test folders stay"
    (check,) = [n for n, step in enumerate(steps) if step.startswith("python -c")]
    imported = set(re.findall(r"ascend_fleet[\w.]*", steps[check]))
    assert imported == set(RUNTIME_MODULES), "the image's import check names the runtime modules"
    help_check = next(n for n, step in enumerate(steps) if step.startswith("ascend-fleet --help"))
    assert install < min(removals) and max(removals) < check and max(removals) < help_check, (
        "the checks run after the cut, so a cut that breaks the runtime fails the build"
    )


@pytest.mark.parametrize("module", RUNTIME_MODULES)
def test_the_image_imports_real_modules(module):
    relative = Path("operator", *module.split("."))
    assert (ROOT / relative).is_dir() or (ROOT / relative).with_suffix(".py").is_file(), module


# A use of what the operator image deletes: a generated API class, the client's api package or its asyncio half.
UNUSED_CLIENT_USE = re.compile(
    r"\bclient\.[A-Z]\w*Api\b|from kubernetes\.client import [^#]*Api\b|kubernetes\.client\.api\b|kubernetes\.aio\b"
)


def unused_client_uses(paths) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if UNUSED_CLIENT_USE.search(line)
    ]


def test_runtime_code_sends_requests_through_the_api_client():
    """The image has no kubernetes/client/api: the operator's code (the dev kit is a distribution the image lacks)
    uses the client's ApiClient, never its generated classes such as CoreV1Api."""
    runtime = sorted((ROOT / "operator" / "ascend_fleet").rglob("*.py"))
    assert not unused_client_uses(runtime), (
        "these use a part of the kubernetes client the operator image deletes; send the request with Kube "
        "(ApiClient.call_api) or keep the part in images/operator/Dockerfile"
    )
    # The check can fail: the dev kit does use the generated classes.
    assert unused_client_uses(sorted((ROOT / "operator" / "devkit" / "ascend_fleet_dev").rglob("*.py")))


@pytest.mark.parametrize("engine", ["vllm-ascend", "sglang"])
def test_engine_images_extend_the_operators_default_upstream_image(engine):
    images = base_images(DOCKERFILES[engine])
    assert images[-1] == DEFAULT_IMAGES[(engine, "ascend910b")], "the engine image's base"
    text = DOCKERFILES[engine].read_text()
    assert "UNCONFIRMED" in text, "say that the upstream tag is not confirmed"
    runs = " ".join(i.args for i in parse(text) if i.keyword == "RUN")
    assert "--no-deps" in runs, (
        "only this package goes into the engine image, not the operator's dependencies"
    )
    module = {"vllm-ascend": "ascend_fleet_exporter.vllm_plugin", "sglang": "ascend_fleet_exporter.sglang"}[
        engine
    ]
    assert f"import {module}" in runs, "the build proves the exporter imports"


def picker_build() -> tuple[str, str]:
    """The build stage's working directory and the RUN that builds the picker."""
    _, all_stages = stages(parse(DOCKERFILES["picker"].read_text()))
    build = all_stages[0]
    (workdir,) = [i.args for i in build if i.keyword == "WORKDIR"]
    (run,) = [i.args for i in build if i.keyword == "RUN" and "build.sh" in i.args]
    return workdir, run


def test_picker_image_builds_with_the_script_make_epp_runs(tmp_path, monkeypatch):
    """The image runs tools/epp/build.sh, the command the local build (`make epp`, the tests' picker) runs, so the
    two cannot drift: no `go build` of the image's own, and the dev kit's build calls the same script."""
    from ascend_fleet_dev.real import controlplane, dataplane

    workdir, run = picker_build()
    text = DOCKERFILES["picker"].read_text()
    assert workdir == "/src/tools/epp" and "COPY tools/epp/ ./" in text
    assert re.fullmatch(r"GOOS=\$TARGETOS GOARCH=\$TARGETARCH bash build\.sh /out/epp", run), run
    assert "go build" not in text, "the image builds through tools/epp/build.sh alone"
    # The dev kit's build (what `make epp` calls), caught at the subprocess it starts.
    started: list[list[str]] = []

    def record(argv, **_):
        started.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.delenv("ASCEND_FLEET_EPP", raising=False)
    monkeypatch.setattr(controlplane, "cache_dir", lambda name: tmp_path / name)
    monkeypatch.setattr(controlplane.subprocess, "run", record)
    binary = dataplane.ensure_picker()
    builds = [
        argv for argv in started if argv[0] != "go" and not argv[0].endswith("/go")
    ]  # go env: the digest
    assert builds == [["bash", str(ROOT / "tools" / "epp" / "build.sh"), str(binary)]]
    assert "ensure_picker" in (ROOT / "Makefile").read_text().split("\nepp:")[1].split("\n\n")[0]
    # Static binaries: the image's final stage is empty but for them.
    assert "export CGO_ENABLED=0" in (ROOT / "tools" / "epp" / "build.sh").read_text()


def test_picker_image_is_the_binaries_the_operator_renders_for():
    instructions = parse(DOCKERFILES["picker"].read_text())
    assert base_images(DOCKERFILES["picker"])[-1] == "scratch"
    _, all_stages = stages(instructions)
    build_from = all_stages[0][0]
    assert build_from.flags == ["--platform=$BUILDPLATFORM"], "cross-compiled on the builder, no emulation"
    copied = [i.words() for i in all_stages[-1] if i.keyword == "COPY"]
    assert copied == [["/out/epp", "/epp"], ["/out/classifier", "/classifier"]]
    assert [i.words() for i in instructions if i.keyword == "ENTRYPOINT"] == [["/epp"]]
    (user,) = [i.args for i in all_stages[-1] if i.keyword == "USER"]
    assert user == f"{PICKER_UID}:{PICKER_UID}", "the rendered pod's runAsUser"
    (exposed,) = [i.words() for i in instructions if i.keyword == "EXPOSE"]
    assert exposed == [str(p) for p in (PICKER_GRPC_PORT, PICKER_HEALTH_PORT, PICKER_METRICS_PORT)]
    assert sent_to_builder("tools/epp/main.go") and not sent_to_builder("tools/controlplane/go.mod")


def test_pip_installs_keep_no_cache():
    for name, path in DOCKERFILES.items():
        for instruction in parse(path.read_text()):
            if instruction.keyword == "RUN" and "pip install" in instruction.args:
                assert "--no-cache-dir" in instruction.args or "PIP_NO_CACHE_DIR=1" in path.read_text(), name


def test_the_parser_catches_root_and_unpinned_bases(tmp_path):
    """The checks above can fail."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN \\\n  echo hi\nUSER root\n")
    assert base_images(bad) == ["python:latest"]
    assert [i.keyword for i in parse(bad.read_text())] == ["FROM", "RUN", "USER"]
    with pytest.raises(AssertionError):
        test_bases_are_pinned(bad)
    with pytest.raises(AssertionError):
        test_runs_as_non_root(bad)
    secret = tmp_path / "secret"
    secret.write_text("FROM python:3.11.11\nENV HF_TOKEN=abc\nUSER 1000\n")
    with pytest.raises(AssertionError):
        test_no_secrets(secret)
