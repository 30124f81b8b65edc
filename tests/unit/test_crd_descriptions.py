"""Every field of the CRD says what it is: `kubectl explain` is the first thing a user reads."""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from ascend_fleet.api.crd import crd
from tests.support.paths import CRD_FILE, ROOT

CHART_CRD = ROOT / "charts" / "ascend-fleet" / "crds" / CRD_FILE.name


def fields(node: dict, path: str) -> Iterator[tuple[str, dict]]:
    """Every named field under ``node`` (object properties, also inside list items and map values)."""
    for key, child in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        yield here, child
        yield from fields(child, here)
    if isinstance(node.get("items"), dict):
        yield from fields(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from fields(node["additionalProperties"], f"{path}{{}}")


# The API server refuses a CRD whose top-level metadata schema says anything but name and generateName.
SERVER_FORBIDS = {"metadata"}


def first_undescribed(schema: dict) -> str | None:
    return next(
        (
            path
            for path, node in fields(schema, "")
            if not node.get("description") and path not in SERVER_FORBIDS
        ),
        None,
    )


def test_every_field_of_the_generated_schema_has_a_description():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert first_undescribed(schema) is None, f"{first_undescribed(schema)} has no description"


def test_the_checked_in_crds_have_them_too():
    for path in (CRD_FILE, CHART_CRD):
        schema = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        missing = first_undescribed(schema)
        assert missing is None, f"{path.relative_to(ROOT)}: {missing} has no description (run `make crds`)"


def test_top_level_metadata_stays_as_the_server_wants_it():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["metadata"] == {"type": "object"}


def test_the_walk_names_the_first_missing_path():
    schema = {
        "properties": {
            "spec": {
                "description": "s",
                "properties": {"items": {"description": "i", "items": {"properties": {"name": {}}}}},
            }
        }
    }
    assert first_undescribed(schema) == "spec.items[].name"
