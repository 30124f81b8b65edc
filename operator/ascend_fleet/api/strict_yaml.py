"""YAML as kubectl's strict decoding reads it, with bounds that keep a hostile file from costing more than a second.

PyYAML's safe loader accepts a key twice (the last wins), expands aliases without limit (a few lines of
"billion laughs" stand for a billion nodes, which later walks of the tree pay for) and composes nesting by
recursion (ten thousand levels end in a RecursionError). This loader refuses each with one sentence at the
line where it starts; the CLI also refuses files over the API server's request limit before reading them.
"""

from __future__ import annotations

from typing import Any

import yaml

# The API server refuses a request body over 3 MiB, so no object it would accept is bigger.
MAX_INPUT_BYTES = 3 * 2**20
# An AscendInference nests about 20 levels, its pod template included.
MAX_DEPTH = 100
# Nodes that aliases may stand for in one document, each counted as often as it is referred to.
MAX_ALIASED_NODES = 10_000

_MERGE = "tag:yaml.org,2002:merge"


class YAMLRefused(yaml.MarkedYAMLError):
    """YAML that parses but that the project refuses: a duplicate key, too many aliases, too deep a nesting."""

    def __init__(self, problem: str, mark: yaml.Mark | None):
        super().__init__(problem=problem, problem_mark=mark)


# libyaml's parser where PyYAML was built with it (ten times faster than PyYAML's own); composing stays in
# Python, where it can count.
_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))
_CParser: Any = yaml.cyaml.CParser if _LIBYAML else None  # type: ignore[attr-defined]
_PARSING: tuple[type, ...] = (
    (_CParser,) if _LIBYAML else (yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser)
)


# The parser base is chosen at import, which a type checker cannot follow.
class StrictLoader(
    yaml.composer.Composer,
    yaml.constructor.SafeConstructor,
    yaml.resolver.Resolver,
    *_PARSING,  # type: ignore[misc]
):
    """The safe loader, refusing duplicate keys, nesting deeper than MAX_DEPTH and aliases past MAX_ALIASED_NODES."""

    def __init__(self, stream: str) -> None:
        if _LIBYAML:
            _CParser.__init__(self, stream)
        else:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # a composed node's id -> the nodes it stands for, aliases expanded
        self._aliased = 0

    def compose_document(self) -> Any:
        self._sizes, self._aliased = {}, 0
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:  # the alias is inside the node it names: a structure without end
                raise YAMLRefused(
                    f"the alias *{event.anchor} refers to a node that contains it", event.start_mark
                )
            self._aliased += size
            if self._aliased > MAX_ALIASED_NODES:
                raise YAMLRefused(
                    f"the aliases of this document stand for more than {MAX_ALIASED_NODES} nodes (the last "
                    f"is *{event.anchor}); write the repeated parts out, or repeat them less",
                    event.start_mark,
                )
            return node
        if self._depth >= MAX_DEPTH:
            raise YAMLRefused(
                f"nested deeper than {MAX_DEPTH} levels; an AscendInference nests about 20",
                self.peek_event().start_mark,
            )
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        inside: list[int] = [self._sizes.get(id(child), 1) for child in _children(node)]
        self._sizes[id(node)] = 1 + sum(inside)
        return node

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], yaml.Mark] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE:
                continue
            first = seen.setdefault((key.tag, key.value), key.start_mark)
            if first is not key.start_mark:
                raise YAMLRefused(
                    f"the key {key.value!r} is set twice in one mapping (line {first.line + 1} and line "
                    f"{key.start_mark.line + 1}); kubectl refuses duplicate keys, keep one",
                    key.start_mark,
                )
        return node


def _children(node: yaml.Node | None) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream, or :class:`YAMLRefused` / another ``yaml.YAMLError`` for the first problem."""
    loader = StrictLoader(text)
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()


def load_document(text: str) -> Any:
    """The one document of a YAML text (None when it holds none), refused as :func:`load_all` refuses."""
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
