"""Every argv the operator generates, through vLLM's and SGLang's own parsers (``make test-engines``).

The engines' Python packages, at the versions the default images carry, live in their own cached virtual
environment (``make test-engines`` builds it; ASCEND_FLEET_ENGINES_PYTHON names its interpreter). Cases are the
examples plus generated variants of precision, batching, priority, memory, exporter and multi-pod layouts on
both A2 and A3, rendered with ``ascend-fleet render`` itself. Any argv an engine refuses fails its test.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from ascend_fleet.api import images, names
from ascend_fleet.engines import facts_of
from ascend_fleet.layout import plan
from ascend_fleet.render.engine import Rank, engine_flags
from ascend_fleet.render.validation import validate
from tests.support.documents import inference
from tests.support.paths import EXAMPLES, ROOT

ENGINES_PYTHON = os.environ.get("ASCEND_FLEET_ENGINES_PYTHON")
pytestmark = pytest.mark.skipif(
    not ENGINES_PYTHON,
    reason="the engines' parsers run under `make test-engines` (ASCEND_FLEET_ENGINES_PYTHON)",
)
CHECKER = Path(__file__).with_name("parse_argv.py")
PROJECT_IMAGE = {
    "vllm-ascend": "ghcr.io/ascend-fleet/vllm-ascend:0.1.0",
    "sglang": "ghcr.io/ascend-fleet/sglang:0.1.0",
}
# What the kubelet would put into the fieldRef variables.
FIELD_VALUES = {"metadata.name": "llm-0", "metadata.namespace": "default", "status.podIP": "10.0.0.7"}
ACCEPTED: dict[str, int] = {}  # engine -> argvs accepted, for the terminal summary


def doc(name: str, kind: str, chip: str, **spec) -> dict:
    return inference(name).engine(kind).section("hardware", chip=chip).merge(**spec).build()


def compiled_cases(engine: str) -> dict[str, dict]:
    """spec.engine.compilation: every graph mode, the capture size, the fusion passes, the compile cache."""
    fusion = ["normQuant", "actQuant", "attnQuant"] if engine == "vllm-ascend" else []
    compiled = {"maxCaptureBatchSize": 64, "cacheDir": "/var/cache/compile"}
    cases = {}
    for mode, extra in (
        ("eager", {}),
        ("piecewise", {**compiled, "fusion": fusion}),
        ("fullDecodeOnly", compiled),
    ):
        cases[f"compiled-{mode}"] = {"engine": {"type": engine, "compilation": {"graphMode": mode, **extra}}}
    cases["compiled-capture-only"] = {"engine": {"type": engine, "compilation": {"maxCaptureBatchSize": 8}}}
    return cases


def variants() -> list[tuple[str, dict]]:
    """Generated specs: each engine x chip x one setting varied (plus a few together)."""
    out = []
    for engine in ("vllm-ascend", "sglang"):
        for chip in ("ascend910b", "ascend910_93"):
            node = 16 if chip == "ascend910_93" else 8
            tag = f"{engine}-{chip}"
            cases = {
                "defaults": {},
                "fp16": {"precision": "fp16"},
                "int8": {"precision": "int8"},
                "batching": {
                    "batching": {"maxBatchSize": 64, "maxBatchTokens": 8192},
                    "model": {"maxModelLen": 16384},
                },
                "priority": {"scheduling": {"priority": True}},
                "memory": {
                    "memory": {
                        "staticFraction": 0.7,
                        "dynamicFraction": 0.2,
                        "reserveFraction": 0.1,
                        "expandableSegments": False,
                    }
                },
                "tp-pp-one-pod": {"parallelism": {"tensor": 4, "pipeline": 2}},
                "exporter-image": {"engine": {"type": engine, "image": PROJECT_IMAGE[engine]}},
                "multi-pod": {"parallelism": {"tensor": node, "pipeline": 2}},
                "multi-pod-4": {"parallelism": {"tensor": node // 2, "pipeline": 8}},
                "everything": {
                    "precision": "int8",
                    "scheduling": {"priority": True},
                    "batching": {"maxBatchSize": 32, "maxBatchTokens": 4096},
                    "parallelism": {"tensor": node, "pipeline": 2},
                    "engine": {
                        "type": engine,
                        "image": PROJECT_IMAGE[engine],
                        "args": ["--enable-prefix-caching"]
                        if engine == "vllm-ascend"
                        else ["--enable-torch-compile"],
                    },
                },
            }
            cases.update(compiled_cases(engine))
            # Two-role fleets (spec.disaggregation): each role's argv, the KV-transfer flags included.
            cases["two-roles"] = {
                "disaggregation": {
                    "prefill": {"parallelism": {"tensor": 4}},
                    "decode": {"parallelism": {"tensor": 2, "data": 2}},
                }
            }
            cases["two-roles-multi-pod"] = {
                "disaggregation": {
                    "prefill": {"parallelism": {"tensor": node, "pipeline": 2}},
                    "decode": {"parallelism": {"tensor": node // 2}},
                    "kvTransfer": {"port": 40000},
                }
            }
            if engine == "vllm-ascend":
                for connector in ("MooncakeLayerwiseConnector", "AscendStoreConnector"):
                    cases[f"two-roles-{connector}"] = {
                        "disaggregation": {
                            "prefill": {"parallelism": {"tensor": 2}},
                            "decode": {"parallelism": {"tensor": 4}},
                            "kvTransfer": {"connector": connector},
                        }
                    }
                cases["multi-pod-ray"] = {
                    "parallelism": {"tensor": node, "pipeline": 2},
                    "engine": {"type": engine, "multiNode": "ray"},
                }
            out += [
                (f"{tag}-{name}", doc(f"v{len(out) + index}", engine, chip, **spec))
                for index, (name, spec) in enumerate(cases.items())
            ]
    return out


def render(docs: list[dict]) -> list[dict]:
    """Objects as ``ascend-fleet render`` prints them (the command itself, not the library)."""
    result = subprocess.run(
        [sys.executable, "-m", "ascend_fleet.cli.main", "render", "-"],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ escapes, anything else stays."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def container_env(container: dict) -> dict[str, str]:
    """The container's variables in order, each expanded only from the ones before it (as Kubernetes does)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env)
        else:
            env[entry["name"]] = FIELD_VALUES[entry["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def engine_argv(pod: dict) -> list[str] | None:
    """The engine's own argv in a pod (None for a Ray worker, which starts no engine)."""
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
    env = container_env(container)
    command = [expand(token, env) for token in container["command"]]
    if command[:2] == ["/bin/bash", "-c"]:
        script = command[2]
        if not script.endswith('exec "$@"'):
            assert "ray start --address=" in script, script
            return None
        return command[4:]  # bash -c SCRIPT $0 ARGV...: the serve argv as positional parameters
    return command


@cache
def cases() -> dict[str, list[dict]]:
    """Every distinct engine argv, per engine, from the examples and the variants."""
    docs = [(path.stem, d) for path in EXAMPLES for d in yaml.safe_load_all(path.read_text()) if d]
    docs += variants()
    by_engine: dict[str, dict[tuple, dict]] = {"vllm": {}, "sglang": {}}
    objects = render([d for _, d in docs])
    labels = {d["metadata"]["name"]: label for label, d in docs}
    for obj in objects:
        if obj["kind"] != "Pod":
            continue
        argv = engine_argv(obj)
        if argv is None:
            continue
        engine = "vllm" if argv[0] == "vllm" else "sglang"
        owner = obj["metadata"]["labels"][names.LABEL_NAME]
        rank = obj["metadata"]["labels"][names.LABEL_RANK]
        role = obj["metadata"]["labels"].get(names.LABEL_PD_ROLE)
        where = f"{role}/rank{rank}" if role else f"rank{rank}"
        by_engine[engine].setdefault(tuple(argv), {"id": f"{labels[owner]}/{where}", "argv": argv})
    return {engine: list(found.values()) for engine, found in by_engine.items()}


def ascend_connectors() -> str:
    """vllm-ascend's KV connectors, as its platform registers them with vLLM (the engine facts list them)."""
    kv = facts_of("vllm-ascend").kv_transfer
    assert kv is not None
    return ",".join(connector.name for connector in kv.connectors)


def results(engine: str, checked: list[dict], *, kv_connectors: bool = False) -> list[dict]:
    """The engine's own parser on a few cases (``{"id", "argv"}``): one result per case, with ``ok``."""
    env = {**os.environ, "ASCEND_FLEET_KV_CONNECTORS": ascend_connectors()} if kv_connectors else None
    result = subprocess.run(
        [ENGINES_PYTHON, str(CHECKER), engine],
        input=json.dumps(checked),
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env=env,
    )
    return json.loads(result.stdout[result.stdout.rfind("@@RESULTS@@") + len("@@RESULTS@@") :])["results"]


def with_value(case: dict, flag: str, wrong, case_id: str) -> dict:
    """``case`` with the value after ``flag`` replaced by ``wrong(value)``."""
    argv = list(case["argv"])
    argv[argv.index(flag) + 1] = wrong(argv[argv.index(flag) + 1])
    return {"id": case_id, "argv": argv}


@cache
def parsed(engine: str) -> dict:
    result = subprocess.run(
        [ENGINES_PYTHON, str(CHECKER), engine],
        input=json.dumps(cases()[engine]),
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env={
            **os.environ,
            "VLLM_LOGGING_LEVEL": "ERROR",
            "TOKENIZERS_PARALLELISM": "false",
            "ASCEND_FLEET_KV_CONNECTORS": ascend_connectors(),
        },
    )
    marker = result.stdout.rfind("@@RESULTS@@")
    assert result.returncode == 0 and marker >= 0, result.stderr[-4000:]
    answer = json.loads(result.stdout[marker + len("@@RESULTS@@") :])
    ACCEPTED[engine] = sum(r["ok"] for r in answer["results"])
    return answer


def test_the_engines_python_carries_the_default_images_versions():
    script = "import importlib.metadata as m; print(m.version('vllm'), m.version('sglang'))"
    found = subprocess.run(
        [ENGINES_PYTHON, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert found == [
        images.format_version(images.default_version("vllm-ascend")),
        images.format_version(images.default_version("sglang")),
    ]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_generated_argv_passes_the_engines_parser(engine):
    answer = parsed(engine)
    assert len(answer["results"]) >= 20, "too few cases: the renderer produced fewer argvs than expected"
    refused = [f"{r['id']}: {r['error']}" for r in answer["results"] if not r["ok"]]
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_bad_flag_is_refused(engine):
    """The checker must be able to fail: a misspelt flag, and the priority flags this project generated before
    (SGLang refuses priority scheduling on its lpm/priority policies at start), are refused."""
    good = cases()[engine][0]["argv"]
    old_priority = (
        ["--enable-priority-scheduling", "--schedule-policy", "priority"]
        if engine == "sglang"
        else ["--scheduling-policy", "lowest-first"]
    )
    bad = [
        {"id": "misspelt", "argv": [*good, "--tensor-paralel-sise", "2"]},
        {"id": "priority-policy", "argv": [*good, *old_priority]},
    ]
    answer = results(engine, bad)
    assert [r["ok"] for r in answer] == [False, False], answer


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_alias_table_matches_the_parser(engine):
    """The facts' aliases list every other spelling the parser has for each generated flag and layout flag, and no
    parser option is a proper prefix of a generated spelling (the conflict check reads such prefixes as
    abbreviations)."""
    kind = "vllm-ascend" if engine == "vllm" else "sglang"
    answer = parsed(engine)
    options = answer["options"]
    spec = validate(
        doc(
            "a",
            kind,
            "ascend910b",
            scheduling={"priority": True},
            precision="int8",
            batching={"maxBatchSize": 8, "maxBatchTokens": 64},
            model={"maxModelLen": 64},
            parallelism={"tensor": 8, "pipeline": 2},
        )
    ).obj.spec
    layout = plan(spec)
    generated = {f.name for rank in (0, 1) for f in engine_flags(spec, layout, Rank(0, rank, 2))}
    # The layout flags args may not set are spelled as the parser spells them too, each with all its aliases.
    for name in sorted(generated | set(facts_of(kind).layout_flags)):
        action = next((o for o in options if name in o), None)
        assert action is not None, f"{name} is not an option of the {engine} parser"
        assert sorted(set(action) - {name}) == sorted(facts_of(kind).aliases.get(name, ())), name
    every = [s for o in options for s in o if s.startswith("--")]
    for name in generated:
        own = {name, *facts_of(kind).aliases.get(name, ())}
        clashes = [s for s in every if s not in own and name.startswith(s)]
        assert not clashes, f"{clashes} are options of their own and prefixes of {name}"
    assert answer["allow_abbrev"] is True


def test_underscore_rule_matches_vllm():
    """vLLM reads --a_b as --a-b (the conflict check relies on it); SGLang does not (the facts' underscores)."""
    vllm_case = copy.deepcopy(cases()["vllm"][0])
    vllm_case["argv"] = [*vllm_case["argv"], "--enable_prefix_caching"]
    sglang_case = copy.deepcopy(cases()["sglang"][0])
    sglang_case["argv"] = [*sglang_case["argv"], "--enable_torch_compile"]
    outcome = {}
    for engine, case in (("vllm", vllm_case), ("sglang", sglang_case)):
        outcome[engine] = results(engine, [case])[0]["ok"]
    assert outcome == {"vllm": facts_of("vllm-ascend").underscores, "sglang": facts_of("sglang").underscores}


def test_the_engines_plugin_loaders_find_the_exporter():
    """vLLM's and SGLang's own loaders discover the project's entry points and can call them."""
    script = (
        "import sglang.srt.plugins as s, vllm.plugins as v\n"
        "found = s.load_plugins_by_group(s.GENERAL_PLUGINS_GROUP)\n"
        "found['ascend_fleet_exporter'][0]()\n"
        "import json; print(json.dumps([sorted(found), sorted(v.load_plugins_by_group(v.DEFAULT_PLUGINS_GROUP))]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_FLEET_EXPORTER"}
    result = subprocess.run(
        [ENGINES_PYTHON, "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sglang_plugins, vllm_plugins = json.loads(result.stdout.strip().splitlines()[-1])
    assert "ascend_fleet_exporter" in sglang_plugins and "ascend_fleet_exporter" in vllm_plugins


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_compilation_argv_passes_the_engines_parser(engine):
    """spec.engine.compilation's cases (the compiled example and the variants), on their own: each engine's
    parser (vLLM: its config build too) takes every key and value the operator renders."""
    answer = parsed(engine)
    compiled = [r for r in answer["results"] if "compil" in r["id"]]
    assert len(compiled) >= (5 if engine == "vllm" else 4), [r["id"] for r in compiled]
    refused = [f"{r['id']}: {r['error']}" for r in compiled if not r["ok"]]
    assert not refused, "\n".join(refused)


def test_a_bad_compilation_value_is_refused():
    """The checker fails on a compilation value the engine does not have: a graph mode vLLM's config build does
    not know, a phase backend SGLang's parser does not offer."""
    bad = []
    for engine, flag, wrong in (
        ("vllm", "--compilation-config", lambda v: v.replace('"PIECEWISE"', '"PIECEWISE_ONLY"')),
        ("sglang", "--cuda-graph-backend-decode", lambda v: "tc_piecewize"),
    ):
        case = next(
            c for c in cases()[engine] if flag in c["argv"] and "PIECEWISE" in " ".join(c["argv"]).upper()
        )
        bad.append((engine, with_value(case, flag, wrong, "bad-compilation")))
    for engine, case in bad:
        answer = results(engine, [case], kv_connectors=True)
        assert answer[0]["ok"] is False, (engine, answer)


def test_a_bad_kv_transfer_setting_is_refused():
    """The parsers check the KV-transfer settings too: a kv_role vLLM does not know, a mode SGLang does not."""
    bad = []
    for engine, flag, wrong in (
        ("vllm", "--kv-transfer-config", lambda v: v.replace('"kv_producer"', '"producer"')),
        ("sglang", "--disaggregation-mode", lambda v: "prefil"),
    ):
        case = next(c for c in cases()[engine] if flag in c["argv"])
        bad.append((engine, with_value(case, flag, wrong, "bad-kv")))
    for engine, case in bad:
        answer = results(engine, [case], kv_connectors=True)
        assert answer[0]["ok"] is False, (engine, answer)
