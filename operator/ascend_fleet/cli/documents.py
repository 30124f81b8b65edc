"""Reading AscendInference documents from files, directories or stdin, with errors a user can act on.

Inputs follow kubectl's ``-f``: a file, ``-`` for stdin, or a directory (its ``.yaml``, ``.yml`` and
``.json`` files in name order; with ``recursive`` its subdirectories too). Every problem is one line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..api import names, strict_yaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class DocumentError(Exception):
    """An input that cannot be read or parsed; the message is one line naming the input."""


@dataclass
class Document:
    """One AscendInference document and where it came from."""

    source: str  # "file.yaml" or "file.yaml#2" for the second document in a stream
    body: dict


@dataclass
class Loaded:
    """The AscendInference documents of the inputs, and one line per other document that was skipped."""

    documents: list[Document] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def load(paths: list[str], recursive: bool = False) -> Loaded:
    """Every AscendInference document in the given inputs; other kinds are skipped with one line each."""
    loaded = Loaded()
    for path in expand(paths, recursive):
        bodies = _parse(path, _read(path))
        for index, body in enumerate(bodies, start=1):
            source = path if len(bodies) == 1 else f"{path}#{index}"
            if not isinstance(body, dict):
                raise DocumentError(f"{source}: the document is a {type(body).__name__}, not an object")
            for item_source, item in _items(source, body):
                if is_ascend_inference(item):
                    loaded.documents.append(Document(item_source, item))
                else:
                    loaded.skipped.append(
                        f"{item_source}: skipped {kind_and_name(item)}: not an {names.KIND}"
                    )
    return loaded


def expand(paths: list[str], recursive: bool = False) -> list[str]:
    """The files named by the inputs: directories become their manifest files, as ``kubectl -f DIR [-R]``."""
    files: list[str] = []
    for path in paths:
        if path != "-" and Path(path).is_dir():
            pattern = "**/*" if recursive else "*"
            found = sorted(
                str(p) for p in Path(path).glob(pattern) if p.is_file() and p.suffix in MANIFEST_SUFFIXES
            )
            if not found:
                raise DocumentError(f"{path}: no {', '.join(MANIFEST_SUFFIXES)} files in this directory")
            files += found
        else:
            files.append(path)
    return files


def is_ascend_inference(body: dict) -> bool:
    """Whether a document is meant as an AscendInference: its kind says so, or it names no kind at all.

    Either way validate then checks apiVersion and kind, so a wrong group or a missing kind gets its sentence.
    """
    kind = body.get("kind")
    return kind is None or kind == names.KIND


def kind_and_name(body: dict) -> str:
    """``Kind/name`` of a document, for the skipped line."""
    name = (body.get("metadata") or {}).get("name", "?") if isinstance(body.get("metadata"), dict) else "?"
    return f"{body.get('kind')}/{name}"


def _items(source: str, body: dict) -> list[tuple[str, dict]]:
    """A ``kind: List`` (what ``kubectl get -o yaml`` writes) is its items; any other document is itself."""
    if body.get("kind") == "List" and isinstance(body.get("items"), list):
        return [(f"{source}[{i}]", item) for i, item in enumerate(body["items"]) if isinstance(item, dict)]
    return [(source, body)]


def _parse(path: str, text: str) -> list:
    if not text.strip():
        raise DocumentError(f"{path}: the input is empty")
    try:
        bodies = [d for d in strict_yaml.load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise DocumentError(f"{path}: not valid YAML: {yaml_problem(error)}") from None
    if not bodies:
        raise DocumentError(f"{path}: no documents, only comments or separators")
    return bodies


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML parse error as one line: what is wrong, and the line and column where."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = error.problem or error.context or "cannot parse"
        return f"{what}{where}"
    return " ".join(str(error).split())


def _read(path: str) -> str:
    limit = strict_yaml.MAX_INPUT_BYTES
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as error:
        raise DocumentError(f"{path}: cannot read: {error.strerror}") from None
    if len(data) > limit:
        raise DocumentError(
            f"{path}: over {limit // 2**20} MiB, the most the API server accepts in one request; split the "
            "documents into several files"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = data[error.start]
        raise DocumentError(f"{path}: not UTF-8 text (byte 0x{byte:02x} at offset {error.start})") from None
