"""YAML input is read as kubectl's strict decoding reads it, within bounds, each refusal one line."""

from __future__ import annotations

import pytest
import yaml

from ascend_fleet.api import strict_yaml
from ascend_fleet.api.strict_yaml import MAX_ALIASED_NODES, YAMLRefused, load_all, load_document
from ascend_fleet.cli.documents import DocumentError, yaml_problem
from tests.hostile.conftest import CORPUS, validate_in_child


def refusal(text: str) -> str:
    with pytest.raises(yaml.YAMLError) as refused:
        load_all(text)
    return yaml_problem(refused.value)


def test_a_billion_laughs_is_refused_before_it_is_expanded():
    problem = refusal((CORPUS / "billion-laughs.yaml").read_text())
    assert problem == (
        f"the aliases of this document stand for more than {MAX_ALIASED_NODES} nodes (the last is *d); write "
        "the repeated parts out, or repeat them less at line 6, column 8"
    )


def test_a_few_aliases_are_fine_and_merge_keys_may_override():
    assert load_document("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\ne: *b\n") == {
        "base": {"x": 1, "y": 2},
        "d": {"x": 3, "y": 2},
        "e": {"x": 1, "y": 2},
    }


def test_an_alias_inside_its_own_node_is_refused():
    assert refusal("a: &x [1, *x]\n") == "the alias *x refers to a node that contains it at line 1, column 11"


def test_a_10000_deep_nesting_is_one_line():
    assert refusal("[" * 10_000 + "]" * 10_000) == "exceeded maximum nesting depth at line 1, column 1001"


def test_a_block_nesting_deeper_than_the_bound_is_refused():
    text = "".join(" " * i + f"k{i}:\n" for i in range(150)) + " " * 150 + "v: 1\n"
    assert (
        refusal(text)
        == "nested deeper than 100 levels; an AscendInference nests about 20 at line 100, column 100"
    )


def test_duplicate_keys_are_refused_naming_the_key_and_both_lines():
    assert refusal("a: 1\nb:\n  c: 2\n  c: 3\n") == (
        "the key 'c' is set twice in one mapping (line 3 and line 4); kubectl refuses duplicate keys, keep one "
        "at line 4, column 3"
    )


def test_keys_that_differ_in_type_are_two_keys():
    assert load_document('1: a\n"1": b\n') == {1: "a", "1": "b"}


def test_each_document_of_a_stream_has_its_own_alias_budget():
    document = "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * 90) + "]\n"
    assert len(load_all("---\n".join([document] * 3))) == 3


def test_refusals_are_yaml_errors_with_a_mark():
    with pytest.raises(YAMLRefused) as refused:
        load_document("a: 1\na: 2\n")
    assert refused.value.problem_mark is not None and refused.value.problem_mark.line == 1


def test_a_file_over_the_api_servers_request_limit_is_refused_unread(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: " + b"x" * strict_yaml.MAX_INPUT_BYTES + b"\n")
    done = validate_in_child(str(big))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: {big}: over 3 MiB, the most the API server accepts in one request; split the documents into "
        "several files"
    ]


def test_stdin_is_bounded_too(tmp_path, monkeypatch):
    from ascend_fleet.cli import documents

    class Stdin:
        class buffer:  # noqa: N801 - sys.stdin's attribute
            @staticmethod
            def read(size: int) -> bytes:
                return b"x" * size

    monkeypatch.setattr(documents.sys, "stdin", Stdin)
    with pytest.raises(DocumentError, match="over 3 MiB"):
        documents.load(["-"])


def test_a_100_kb_query_file_is_one_line_from_the_cli(tmp_path):
    query = "+".join(["a"] * (50 * 1024))
    path = tmp_path / "query.yaml"
    path.write_text(
        "apiVersion: inference.ascendfleet.io/v1alpha1\nkind: AscendInference\nmetadata: {name: q}\nspec:\n"
        "  model: {name: m, path: /models/m}\n  engine: {type: sglang}\n"
        f"  rules: [{{query: '{query}', threshold: 1, for: 5m, action: scale_up}}]\n"
    )
    done = validate_in_child(str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert "spec.rules.0.query: 102399 characters, over the 2048 a rule's query may have" in line
