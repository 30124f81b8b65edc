"""The tiny model: the same bytes on every build, in a layout vLLM loads."""

from __future__ import annotations

import json
import struct
import subprocess

from ascend_fleet_dev.real import tinymodel
from ascend_fleet_dev.real.tinymodel import FILES, safetensors_bytes, weight_shapes

from .support import vllm_cpu_or_skip


def build_with(python: str, out) -> dict[str, bytes]:
    subprocess.run([python, str(tinymodel.__file__), str(out)], check=True, capture_output=True, timeout=300)
    return {name: (out / name).read_bytes() for name in FILES}


def test_two_builds_with_the_engine_python_give_identical_files(tmp_path):
    built = vllm_cpu_or_skip()
    first = build_with(str(built.python), tmp_path / "first")
    second = build_with(str(built.python), tmp_path / "second")
    assert first == second
    assert first == {name: (built.model / name).read_bytes() for name in FILES}  # and the cached one


def test_the_safetensors_header_lists_every_tensor_at_its_offset():
    shapes = {"b": (2,), "a": (1, 3)}
    data = {"a": b"\0" * 12, "b": b"\1" * 8}
    blob = safetensors_bytes(data, shapes)
    size = struct.unpack("<Q", blob[:8])[0]
    assert size % 8 == 0
    header = json.loads(blob[8 : 8 + size])
    assert header["a"] == {"dtype": "F32", "shape": [1, 3], "data_offsets": [0, 12]}
    assert header["b"] == {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}
    assert blob[8 + size :] == data["a"] + data["b"]


def test_the_model_is_a_small_llama_with_a_head_size_vllms_cpu_attention_takes():
    names = dict(weight_shapes(640))
    assert tinymodel.HEAD_DIM % 32 == 0 and tinymodel.HEADS * tinymodel.HEAD_DIM == tinymodel.HIDDEN
    assert names["model.layers.1.self_attn.q_proj.weight"] == (256, 256)
    assert "model.layers.2.input_layernorm.weight" not in names
    assert sum(1 for name in names if name.endswith("norm.weight")) == 2 * tinymodel.LAYERS + 1


def test_the_byte_token_ids_are_the_tokenizers_one_token_per_byte():
    """A prompt of token ids drawn from ``BYTE_TOKEN_IDS`` (the routed test's flood) is one the built tokenizer
    holds: the special tokens first, then the 256 single-character byte tokens, then the merges."""
    vocabulary = json.loads((vllm_cpu_or_skip().model / "tokenizer.json").read_text())["model"]["vocab"]
    token_of = {number: token for token, number in vocabulary.items()}
    assert [token_of[n] for n in range(len(tinymodel.SPECIAL_TOKENS))] == list(tinymodel.SPECIAL_TOKENS)
    byte_tokens = {token_of[n] for n in tinymodel.BYTE_TOKEN_IDS}
    assert len(byte_tokens) == tinymodel.BYTE_ALPHABET and all(len(token) == 1 for token in byte_tokens)
    assert len(token_of[tinymodel.BYTE_TOKEN_IDS.stop]) > 1  # the first merge
