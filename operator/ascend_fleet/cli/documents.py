"""Reading AscendInference documents from files or stdin, with errors a user can act on."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import yaml


class DocumentError(Exception):
    """A file that cannot be read or parsed."""


@dataclass
class Document:
    source: str  # "file.yaml" or "file.yaml#2" for the second document in a stream
    body: dict


def load(paths: list[str]) -> list[Document]:
    """Every non-empty YAML document in the given files ("-" reads stdin)."""
    documents = []
    for path in paths:
        text = _read(path)
        try:
            bodies = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as error:
            raise DocumentError(f"{path}: not valid YAML: {error}") from None
        for index, body in enumerate(bodies, start=1):
            if not isinstance(body, dict):
                raise DocumentError(f"{path}: document {index} is a {type(body).__name__}, not an object")
            documents.append(Document(path if len(bodies) == 1 else f"{path}#{index}", body))
    return documents


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as error:
        raise DocumentError(f"{path}: cannot read: {error.strerror}") from None
