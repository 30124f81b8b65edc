"""docs/api.md is the reference generated from the models, and it is current."""

from __future__ import annotations

from ascend_fleet.api.reference import describe, render, schema, sections
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "api.md"


def test_checked_in_reference_is_current():
    assert PAGE.read_text() == render(), (
        "docs/api.md is stale: run `python -m ascend_fleet.api.reference > docs/api.md`"
    )


def test_every_field_is_in_the_reference_with_its_description():
    page = render()
    for path, node in sections(schema(), ""):
        if path == "metadata":
            continue
        heading = f"## `{path}`" if path else "## AscendInference"
        assert heading in page, f"no section for {path}"
        for key, child in node["properties"].items():
            link = f"{path}.{key}" if path else key
            description = " ".join(describe(link, child).split()).replace("|", "\\|")
            assert description, f"{link} has no description"
            assert f"| `{key}`" in page and description in page, f"{path}.{key} missing from the reference"


def test_required_fields_and_enums_are_marked():
    page = render()
    assert "| `model` **required** |" in page and "| `engine` **required** |" in page
    assert "one of `vllm-ascend`, `sglang`" in page
