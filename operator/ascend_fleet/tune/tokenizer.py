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
