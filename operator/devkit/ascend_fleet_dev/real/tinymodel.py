"""A tiny Llama model that vLLM's CPU build serves, made from a seed: the same bytes on every build.

No model hub is reachable from the machines that run the real engines, and none is needed: a real
``vllm serve`` needs a config, weights, a tokenizer and a chat template, not a model that says anything
useful. This module writes all four from :data:`SEED`:

- ``config.json``: a Llama with 2 layers, hidden size 256 and 4 heads of 64 (vLLM's CPU attention wants a
  head size that is a multiple of 32), float32;
- ``model.safetensors``: normal random weights (numpy's PCG64 stream, stable across numpy releases),
  written in the safetensors layout by this module itself;
- ``tokenizer.json`` / ``tokenizer_config.json``: a byte-level BPE trained here on text made from the seed,
  so that any prompt encodes; the config carries the chat template;
- ``generation_config.json``.

It imports nothing from the operator, so the engine environment's Python runs it as a file::

    python tinymodel.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
from pathlib import Path
from typing import Any

SEED = 20
LAYERS = 2
HIDDEN = 256
HEADS = 4
HEAD_DIM = 64
INTERMEDIATE = 512
MAX_POSITIONS = 4096
TOKENIZER_VOCABULARY = 1024
WEIGHT_STD = 0.02

BOS, EOS, UNK, PAD = "<s>", "</s>", "<unk>", "<pad>"
SPECIAL_TOKENS = (BOS, EOS, UNK, PAD)  # ids 0 to 3, in this order
BYTE_ALPHABET = 256  # a byte-level BPE starts from one token per byte, numbered after the special tokens
# The byte tokens' ids: a prompt of token ids drawn from these is valid for every tokenizer this module trains.
BYTE_TOKEN_IDS = range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + BYTE_ALPHABET)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)

# Words the tokenizer's training text is drawn from: enough variety for a few hundred merges.
_WORD_TEXT = (
    "the a an of to in on for with from by at as is are was were be been it this that these those "
    "engine model request token prompt answer queue batch cache memory device node pod fleet server "
    "client route pool class priority latency throughput second minute hour first last next short long "
    "small large fast slow real simulated ready healthy metric series label value count sum rate ratio "
    "user assistant system hello world question chat completion stream tensor pipeline layer head weight "
    "one two three four five six seven eight nine ten hundred thousand zero"
)
_WORDS = tuple(_WORD_TEXT.split())


def training_text(seed: int = SEED, sentences: int = 4000) -> list[str]:
    """Sentences of the tokenizer's training text, drawn from :data:`_WORDS` by a seeded generator."""
    draw = random.Random(seed)
    lines = []
    for _ in range(sentences):
        words = [draw.choice(_WORDS) for _ in range(draw.randint(4, 16))]
        lines.append(" ".join(words).capitalize() + draw.choice((".", "?", "!", ",")))
    return lines


def train_tokenizer(seed: int = SEED) -> Any:
    """A byte-level BPE tokenizer (``tokenizers.Tokenizer``) with the special tokens first (ids 0..3)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCABULARY,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(seed), trainer=trainer)
    return tokenizer


def weight_shapes(vocabulary: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the Llama checkpoint, by the names transformers and vLLM load, in a fixed order."""
    shapes: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocabulary, HIDDEN))]
    attention = HEADS * HEAD_DIM
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        shapes += [
            (f"{prefix}.input_layernorm.weight", (HIDDEN,)),
            (f"{prefix}.self_attn.q_proj.weight", (attention, HIDDEN)),
            (f"{prefix}.self_attn.k_proj.weight", (attention, HIDDEN)),
            (f"{prefix}.self_attn.v_proj.weight", (attention, HIDDEN)),
            (f"{prefix}.self_attn.o_proj.weight", (HIDDEN, attention)),
            (f"{prefix}.post_attention_layernorm.weight", (HIDDEN,)),
            (f"{prefix}.mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN)),
            (f"{prefix}.mlp.up_proj.weight", (INTERMEDIATE, HIDDEN)),
            (f"{prefix}.mlp.down_proj.weight", (HIDDEN, INTERMEDIATE)),
        ]
    return [*shapes, ("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (vocabulary, HIDDEN))]


def weights(vocabulary: int, seed: int = SEED) -> dict[str, bytes]:
    """Each tensor's little-endian float32 bytes: norms are ones, the rest normal(0, WEIGHT_STD)."""
    import numpy as np

    draw = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(vocabulary):
        if name.endswith("norm.weight"):
            values = np.ones(shape, dtype="<f4")
        else:
            values = draw.normal(0.0, WEIGHT_STD, size=shape).astype("<f4")
        out[name] = values.tobytes()
    return out


def safetensors_bytes(tensors: dict[str, bytes], shapes: dict[str, tuple[int, ...]]) -> bytes:
    """The safetensors layout: an 8-byte little-endian header size, a JSON header, then the raw data.

    The header lists tensors by name with their data offsets; spaces pad it to 8 bytes, as the format allows.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        size = len(tensors[name])
        header[name] = {"dtype": "F32", "shape": list(shapes[name]), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(tensors[name] for name in sorted(tensors))


def config(vocabulary: int, bos: int, eos: int, pad: int) -> dict[str, Any]:
    """The transformers ``config.json`` of the model."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": vocabulary,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "torch_dtype": "float32",
    }


def tokenizer_config() -> dict[str, Any]:
    """The transformers ``tokenizer_config.json``, with the chat template."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "add_bos_token": False,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
    }


def build(directory: Path, seed: int = SEED) -> Path:
    """Write the model's :data:`FILES` into ``directory`` (created); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(seed)
    vocabulary = tokenizer.get_vocab_size()
    ids = {token: tokenizer.token_to_id(token) for token in (BOS, EOS, PAD)}
    shapes = dict(weight_shapes(vocabulary))
    (directory / "model.safetensors").write_bytes(safetensors_bytes(weights(vocabulary, seed), shapes))
    tokenizer.save(str(directory / "tokenizer.json"))
    documents = {
        "config.json": config(vocabulary, ids[BOS], ids[EOS], ids[PAD]),
        "generation_config.json": {"bos_token_id": ids[BOS], "eos_token_id": ids[EOS]},
        "tokenizer_config.json": tokenizer_config(),
    }
    for name, document in documents.items():
        (directory / name).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return directory


def main(argv: list[str]) -> int:
    """``python tinymodel.py OUT_DIR``: build the model into OUT_DIR."""
    if len(argv) != 1:
        print("usage: python tinymodel.py OUT_DIR", file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread: the merges come out the same
    print(build(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
