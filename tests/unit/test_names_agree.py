"""Docs and code name things the same way: every label or annotation key of the API's group that the docs, the
README, the chart and the examples write is one the operator uses (api/names.py), spelt as the code spells it."""

from __future__ import annotations

import re

from ascend_fleet.api import names
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER
from tests.support.paths import ROOT

# A key under the API's domain, with whatever prefix the text gives it (a bare `ascendfleet.io/x` included).
KEY = re.compile(r"[a-z0-9.-]*ascend-?fleet\.io/[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
TEXTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*.yaml")),
    ROOT / "charts" / "ascend-fleet" / "README.md",
    ROOT / "charts" / "ascend-fleet" / "values.yaml",
    *sorted((ROOT / "charts" / "ascend-fleet" / "templates").glob("*")),
]


def known_keys() -> set[str]:
    """The group-prefixed names the operator writes or reads: labels, annotations and the API version."""
    values = {value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}
    return {value for value in values if value.startswith(f"{names.GROUP}/")}


def keys_in(text: str) -> set[str]:
    return {key.rstrip(".") for key in KEY.findall(text)}


def test_every_key_the_docs_name_is_one_the_code_uses():
    known = known_keys()
    assert {names.ANNOTATION_TRAFFIC, names.LABEL_NAME, names.API_VERSION} <= known
    unknown = {
        f"{path.relative_to(ROOT)}: {key}" for path in TEXTS for key in keys_in(path.read_text()) - known
    }
    assert not unknown, "names the code does not use (see api/names.py):\n" + "\n".join(sorted(unknown))


def test_the_check_catches_a_misspelt_key():
    assert keys_in("the `ascendfleet.io/traffic` annotation") - known_keys() == {"ascendfleet.io/traffic"}
    assert keys_in("label `ascend-fleet.io/name`.") - known_keys() == {"ascend-fleet.io/name"}


def test_the_docs_name_the_objective_header_the_picker_reads():
    routing = (ROOT / "docs" / "routing.md").read_text()
    assert f"`{OBJECTIVE_HEADER}" in routing
    headers = set(re.findall(r"x-gateway-[a-z-]+", routing))
    assert headers <= {OBJECTIVE_HEADER, "x-gateway-destination-endpoint", "x-gateway-model-name-rewrite"}, (
        headers
    )
