"""Engine images: the default per engine and chip, and which engine version an image carries.

The defaults are each engine's release table (``ascend_fleet/engines/<engine>.py``, shown in
docs/engines.md); this module answers the questions the API and the CLI ask of them. Generated flags
that exist only from some engine version are decided from the image's version: an upstream tag starts
with ``v<version>`` (``quay.io/ascend/vllm-ascend:v0.23.0.post1-a3`` carries vLLM 0.23.0,
``lmsysorg/sglang:v0.5.14-cann9.0.0-910b`` SGLang 0.5.14). Any other tag (a platform's own build, the
project's engine images tagged with the project version) is taken to carry the default image's version,
since the project's images are built on top of the defaults.
"""

from __future__ import annotations

from .. import __version__
from ..engines.base import Version, format_version, parse_version, repository
from ..engines.registry import UnknownEngine, builtin_facts, facts_of, has_exporter

__all__ = [
    "DEFAULT_IMAGES",
    "DEFAULT_PICKER_IMAGE",
    "PROJECT_REGISTRY",
    "Version",
    "default_image",
    "default_version",
    "format_version",
    "has_exporter",
    "image_version",
    "parse_version",
    "repository",
    "supported_chips",
]

# The production engines' default image per (engine, chip), as docs/engines.md lists them.
DEFAULT_IMAGES: dict[tuple[str, str], str] = {
    (facts.type, chip): release.image
    for facts in builtin_facts()
    for release in facts.releases
    for chip in release.chips
}


# Where the release workflow pushes the project's images (.github/workflows/release.yml's REGISTRY), the
# repositories the chart's values name.
PROJECT_REGISTRY = "ghcr.io/ascend-fleet"
# The project's endpoint picker (images/picker): the upstream picker of the release tools/epp/go.mod pins, with
# the project's plugins registered, tagged with the package version as the release workflow tags it. The
# upstream image would refuse every configuration naming one of those plugins.
DEFAULT_PICKER_IMAGE = f"{PROJECT_REGISTRY}/picker:{__version__}"


def default_image(engine: str, chip: str) -> str | None:
    """The upstream image for an engine and chip, or None where the engine does not support the chip."""
    try:
        return facts_of(engine).default_image(chip)
    except UnknownEngine:
        return None


def default_version(engine: str) -> Version:
    """The engine version of the default images (all chips carry the same one)."""
    return facts_of(engine).default_version()


def image_version(engine: str, image: str) -> Version:
    """The vLLM or SGLang version an image carries: from a ``v<x.y.z>`` tag, else the default image's."""
    return facts_of(engine).image_version(image)


def supported_chips(engine: str) -> tuple[str, ...]:
    """Chips an engine supports upstream (the API refuses other pairs with a sentence)."""
    return facts_of(engine).chips
