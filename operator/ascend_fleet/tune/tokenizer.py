"""A small word-level tokenizer the benchmark client counts tokens with, made on the spot.

Benchmark clients draw prompts of N tokens through a tokenizer, which would otherwise be downloaded
with the model. The project makes its own: words ``t0`` .. ``t4095`` separated by spaces, so one word is
one token for the client, for the simulated engines (which count words) and for a reader. Against a
real engine, ``--tokenizer`` points at the model's own tokenizer directory instead.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCABULARY = 4096
# What transformers' AutoTokenizer loads a directory from; one of them must be there.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def write_word_tokenizer(directory: Path) -> Path:
    """Write a transformers-loadable tokenizer (tokenizer.json + tokenizer_config.json) into ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {"[UNK]": 0, **{f"t{i}": i + 1 for i in range(VOCABULARY - 1)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1 << 20}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def check_tokenizer(directory: Path) -> Path:
    """``directory`` when it holds a tokenizer the client can load; else a ValueError saying what would fit."""
    if not directory.is_dir():
        raise ValueError(
            f"--tokenizer {directory} is not a directory; pass the directory of the model the engine "
            f"serves (the one vllm serve loads), which holds {' or '.join(TOKENIZER_FILES)}"
        )
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"--tokenizer {directory} holds neither {' nor '.join(TOKENIZER_FILES)}; pass the directory "
            f"of the model the engine serves (the one vllm serve loads)"
        )
    return directory
