"""spec.engine.compilation: rendered into each engine's own options, refused with a sentence where it cannot be."""

from __future__ import annotations

import json
import typing

import pytest

from ascend_fleet.api.compilation import FUSION_PASSES, GraphMode
from ascend_fleet.engines import facts_of
from ascend_fleet.engines.base import GRAPH_MODES
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.children import COMPILE_CACHE_VOLUME, render_replica
from ascend_fleet.render.engine import Rank, engine_env, engine_flags
from ascend_fleet.render.metadata import Owner
from tests.support.documents import inference

VLLM_0_11 = "quay.io/ascend/vllm-ascend:v0.11.0"
SGLANG_0_5_10 = "lmsysorg/sglang:v0.5.10-cann8.3.rc1-910b"


def doc(engine: str, compilation: dict, **engine_fields) -> dict:
    return inference().engine(engine, compilation=compilation, **engine_fields).build()


def flags(body: dict) -> dict[str, str | None]:
    valid = validate(body)
    return {f.name: f.value for f in engine_flags(valid.obj.spec, valid.layout, Rank(0, 0, 1))}


def env(body: dict) -> dict[str, str]:
    valid = validate(body)
    return {
        e["name"]: e.get("value", "") for e in engine_env(valid.obj.spec, valid.layout, "llm", Rank(0, 0, 1))
    }


def refused(body: dict) -> list[str]:
    with pytest.raises(InvalidSpec) as error:
        validate(body)
    return error.value.problems


def test_the_api_names_the_graph_modes_and_passes_the_engines_render():
    assert typing.get_args(GraphMode) == GRAPH_MODES
    for engine in ("vllm-ascend", "sglang"):
        own = facts_of(engine).compilation
        assert own is not None
        assert set(own.graph_modes) == set(GRAPH_MODES)
        assert set(own.fusion) <= set(FUSION_PASSES)
    assert set(facts_of("vllm-ascend").compilation.fusion) == set(FUSION_PASSES)  # type: ignore[union-attr]


# vLLM: eager is --enforce-eager; the other modes, the capture size and the passes are one --compilation-config.
def test_vllm_eager_is_enforce_eager_and_nothing_else():
    found = flags(doc("vllm-ascend", {"graphMode": "eager"}))
    assert "--enforce-eager" in found and found["--enforce-eager"] is None
    assert "--compilation-config" not in found


@pytest.mark.parametrize(
    "mode,cudagraph_mode", [("piecewise", "PIECEWISE"), ("fullDecodeOnly", "FULL_DECODE_ONLY")]
)
def test_vllm_graph_modes_capture_size_and_passes_are_one_compilation_config(mode, cudagraph_mode):
    compilation = {"graphMode": mode, "maxCaptureBatchSize": 48, "fusion": ["normQuant", "attnQuant"]}
    found = flags(doc("vllm-ascend", compilation))
    assert json.loads(found["--compilation-config"] or "") == {
        "cudagraph_mode": cudagraph_mode,
        "max_cudagraph_capture_size": 48,
        "pass_config": {"fuse_norm_quant": True, "fuse_attn_quant": True},
    }
    assert "--enforce-eager" not in found


def test_vllm_a_capture_size_alone_leaves_the_graph_mode_to_the_engine():
    found = flags(doc("vllm-ascend", {"maxCaptureBatchSize": 16}))
    assert json.loads(found["--compilation-config"] or "") == {"max_cudagraph_capture_size": 16}


def test_without_compilation_no_compilation_option_is_generated():
    for engine in ("vllm-ascend", "sglang"):
        found = flags(inference().engine(engine).build())
        assert not {f for f in found if "graph" in f or "compilation" in f or f == "--enforce-eager"}


def test_a_cache_dir_alone_renders_no_flag_only_the_cache_root():
    assert "--compilation-config" not in flags(doc("vllm-ascend", {"cacheDir": "/var/cache/c"}))
    assert env(doc("vllm-ascend", {"cacheDir": "/var/cache/c"}))["VLLM_CACHE_ROOT"] == "/var/cache/c"
    assert env(doc("sglang", {"cacheDir": "/var/cache/c"}))["SGLANG_CACHE_DIR"] == "/var/cache/c"
    assert "VLLM_CACHE_ROOT" not in env(inference().engine("vllm-ascend").build())


# SGLang: each phase's graph backend, and the decode phase's largest captured batch.
@pytest.mark.parametrize(
    "mode,decode,prefill",
    [
        ("eager", "disabled", "disabled"),
        ("piecewise", "full", "tc_piecewise"),
        ("fullDecodeOnly", "full", "disabled"),
    ],
)
def test_sglang_graph_modes_are_per_phase_backends(mode, decode, prefill):
    found = flags(doc("sglang", {"graphMode": mode}))
    assert (found["--cuda-graph-backend-decode"], found["--cuda-graph-backend-prefill"]) == (decode, prefill)
    assert "--cuda-graph-max-bs-decode" not in found


def test_sglang_capture_size_is_the_decode_phases():
    found = flags(doc("sglang", {"graphMode": "fullDecodeOnly", "maxCaptureBatchSize": 96}))
    assert found["--cuda-graph-max-bs-decode"] == "96"


# Refusals, each a sentence.
def test_fusion_on_sglang_is_refused_with_the_engine_that_has_passes():
    (problem,) = refused(doc("sglang", {"fusion": ["normQuant"]}))
    assert problem == (
        "spec.engine: compilation.fusion: SGLang names no fusion passes of its own to turn on; remove "
        "compilation.fusion, or use engine.type vllm-ascend"
    )


@pytest.mark.parametrize("extra", [{"maxCaptureBatchSize": 8}, {"fusion": ["actQuant"]}])
def test_eager_with_graph_settings_is_refused(extra):
    (problem,) = refused(doc("vllm-ascend", {"graphMode": "eager", **extra}))
    assert problem.startswith(
        "spec.engine.compilation: graphMode eager runs without torch.compile and graphs"
    )


def test_a_pass_named_twice_and_an_unknown_pass_are_refused():
    (twice,) = refused(doc("vllm-ascend", {"fusion": ["normQuant", "normQuant"]}))
    assert twice == "spec.engine.compilation: fusion: name each pass once; repeated: normQuant"
    (unknown,) = refused(doc("vllm-ascend", {"fusion": ["fuse_norm_quant"]}))
    assert unknown.startswith("spec.engine.compilation.fusion.0: Input should be 'normQuant'")


@pytest.mark.parametrize(
    "engine,image,label,since",
    [
        ("vllm-ascend", VLLM_0_11, "vLLM 0.11.0", "vLLM 0.23.0"),
        ("sglang", SGLANG_0_5_10, "SGLang 0.5.10", "SGLang 0.5.14"),
    ],
)
def test_an_image_older_than_the_release_read_is_refused(engine, image, label, since):
    (problem,) = refused(doc(engine, {"graphMode": "eager"}, image=image))
    assert problem.startswith(f"spec.engine.compilation: image {image} carries {label}")
    assert problem.endswith(f"use an image with {since} or newer, or leave spec.engine.compilation out")


@pytest.mark.parametrize(
    "cache_dir,message",
    [
        ("/models/cache", "overlaps model.mountPath '/models'"),
        ("/dev/shm/cache", "overlaps /dev/shm"),
        ("/var/../cache", "a path without . or .. segments"),
    ],
)
def test_a_cache_dir_the_pod_cannot_write_is_refused(cache_dir, message):
    body = doc("vllm-ascend", {"cacheDir": cache_dir})
    body["spec"]["model"]["volume"] = {"persistentVolumeClaim": {"claimName": "models"}}
    (problem,) = refused(body)
    assert message in problem


def test_a_cache_dir_over_the_host_driver_is_refused_without_the_ascend_runtime():
    body = doc("sglang", {"cacheDir": "/usr/local/dcmi/cache"})
    body["spec"]["hardware"] = {"ascendRuntime": False}
    (problem,) = refused(body)
    assert "overlaps /usr/local/dcmi" in problem


def test_the_cache_root_variable_set_in_env_too_is_refused():
    body = doc("vllm-ascend", {"cacheDir": "/var/cache/c"}, env=[{"name": "VLLM_CACHE_ROOT", "value": "/x"}])
    (problem,) = refused(body)
    assert problem.endswith("VLLM_CACHE_ROOT is what spec.engine.compilation.cacheDir sets; set one of them")


def test_the_cache_dir_gets_an_empty_dir_that_a_template_mount_replaces():
    body = doc("vllm-ascend", {"cacheDir": "/var/cache/c"})
    valid = validate(body)
    (pod,) = [
        o
        for o in render_replica(valid.obj.spec, Owner("llm", "default"), 0, valid.layout)
        if o["kind"] == "Pod"
    ]
    (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    assert {"name": COMPILE_CACHE_VOLUME, "mountPath": "/var/cache/c"} in engine["volumeMounts"]
    assert {"name": COMPILE_CACHE_VOLUME, "emptyDir": {}} in pod["spec"]["volumes"]

    body["spec"]["template"] = {
        "spec": {
            "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": "cache"}}],
            "containers": [
                {"name": "engine", "volumeMounts": [{"name": "claim", "mountPath": "/var/cache/c"}]}
            ],
        }
    }
    valid = validate(body)
    (pod,) = [
        o
        for o in render_replica(valid.obj.spec, Owner("llm", "default"), 0, valid.layout)
        if o["kind"] == "Pod"
    ]
    (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    assert [m["name"] for m in engine["volumeMounts"] if m["mountPath"] == "/var/cache/c"] == ["claim"]


def test_a_read_only_template_mount_at_the_cache_dir_is_refused():
    body = doc("vllm-ascend", {"cacheDir": "/var/cache/c"})
    body["spec"]["template"] = {
        "spec": {
            "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": "cache"}}],
            "containers": [
                {
                    "name": "engine",
                    "volumeMounts": [{"name": "claim", "mountPath": "/var/cache/c", "readOnly": True}],
                }
            ],
        }
    }
    (problem,) = refused(body)
    assert "is mounted read-only; drop readOnly, or point cacheDir elsewhere" in problem


# engine.args may not set what compilation sets, in any spelling the engine's parser takes.
@pytest.mark.parametrize(
    "arg",
    [
        "--compilation-config={}",
        "--compilation-config.cudagraph_mode=FULL",
        "--compilation_config.mode=3",
        "-cc.cudagraph_mode=NONE",
        "-cc",
        "--compilation",
    ],
)
def test_vllm_args_repeating_the_generated_compilation_config_are_refused(arg):
    body = doc("vllm-ascend", {"graphMode": "piecewise"}, args=[arg])
    (problem,) = refused(body)
    assert problem.startswith(f"spec.engine.args: {arg!r} repeats the generated '--compilation-config ")


@pytest.mark.parametrize(
    "arg,option",
    [
        ("-O3", "--optimization-level"),
        ("-O.x=1", "--optimization-level"),
        ("-O", "--optimization-level"),
        ("--optimization-level=2", "--optimization-level"),
        ("--compilation-config.mode=0", "--compilation-config"),
        ("--max-cudagraph-capture-size=8", "--max-cudagraph-capture-size"),
        ("--cudagraph_capture_sizes", "--cudagraph-capture-sizes"),
        ("--no-enforce-eager", "--no-enforce-eager"),
    ],
)
def test_vllm_args_changing_what_compilation_sets_are_refused(arg, option):
    body = doc("vllm-ascend", {"graphMode": "eager"}, args=[arg])
    (problem,) = refused(body)
    assert problem.startswith(
        f"spec.engine.args: {arg!r} ({option}) changes what spec.engine.compilation sets"
    )


@pytest.mark.parametrize(
    "arg",
    [
        "--disable-cuda-graph",
        "--cuda-graph-max-bs=8",
        "--cuda-graph-config={}",
        "--enforce-piecewise-cuda-graph",
    ],
)
def test_sglang_args_changing_what_compilation_sets_are_refused(arg):
    (problem,) = refused(doc("sglang", {"cacheDir": "/var/cache/c"}, args=[arg]))
    assert problem.startswith(f"spec.engine.args: {arg!r} (")
    assert "changes what spec.engine.compilation sets" in problem


def test_compilation_options_stay_free_in_args_without_compilation():
    vllm = inference().engine("vllm-ascend", args=["-O3", "--compilation-config.cudagraph_mode=FULL"]).build()
    sglang = inference().engine("sglang", args=["--disable-cuda-graph", "--enable-torch-compile"]).build()
    assert validate(vllm) and validate(sglang)


def test_sglangs_parser_takes_no_dotted_keys_so_a_dotted_flag_is_not_read_as_its_base():
    """SGLang has no dotted JSON keys: ``--cuda-graph-config.x`` is not its ``--cuda-graph-config`` (nor refused)."""
    assert validate(doc("sglang", {"cacheDir": "/var/cache/c"}, args=["--served-model.name"]))


def test_a_dotted_key_of_any_generated_json_option_is_caught_too():
    """The dotted reading is the parser's, not compilation's: a two-role fleet's --kv-transfer-config as well."""
    body = (
        inference()
        .engine("vllm-ascend", args=["--kv-transfer-config.kv_role=kv_both"])
        .section(
            "disaggregation", prefill={"parallelism": {"tensor": 2}}, decode={"parallelism": {"tensor": 2}}
        )
        .build()
    )
    problems = refused(body)
    assert problems and all(
        p.startswith("spec.engine.args: '--kv-transfer-config.kv_role=kv_both' repeats the generated")
        for p in problems
    )
