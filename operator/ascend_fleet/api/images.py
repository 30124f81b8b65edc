"""Engine images: the default per engine and chip, and which engine version an image carries.

This is the one home of the default engine images (docs/engines.md shows the same table). Generated flags
that exist only from some engine version are decided from the image's version: an upstream tag starts
with ``v<version>`` (``quay.io/ascend/vllm-ascend:v0.23.0.post1-a3`` carries vLLM 0.23.0,
``lmsysorg/sglang:v0.5.14-cann9.0.0-910b`` SGLang 0.5.14). Any other tag (a platform's own build, the
project's engine images tagged with the project version) is taken to carry the default image's version,
since the project's images are built on top of the defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .checks import ENGINE_CHIPS

Version = tuple[int, int, int]


@dataclass(frozen=True)
class EngineRelease:
    """One default upstream image and what it carries."""

    engine: str  # vllm-ascend | sglang
    image: str
    version: str  # the vLLM or SGLang release inside (vllm-ascend pairs with the vLLM of the same number)
    cann: str
    chips: tuple[str, ...]


VLLM_ASCEND_TAG = "v0.23.0.post1"
SGLANG_TAG = "v0.5.14-cann9.0.0"

RELEASES: tuple[EngineRelease, ...] = (
    EngineRelease(
        "vllm-ascend", f"quay.io/ascend/vllm-ascend:{VLLM_ASCEND_TAG}", "0.23.0", "9.1.0", ("ascend910b",)
    ),
    EngineRelease(
        "vllm-ascend",
        f"quay.io/ascend/vllm-ascend:{VLLM_ASCEND_TAG}-a3",
        "0.23.0",
        "9.1.0",
        ("ascend910_93",),
    ),
    # SGLang's Ascend docs cover A2 and A3; 910A gets the A2 build (not covered upstream, see docs/engines.md).
    EngineRelease(
        "sglang", f"lmsysorg/sglang:{SGLANG_TAG}-910b", "0.5.14", "9.0.0", ("ascend910b", "ascend910a")
    ),
    EngineRelease("sglang", f"lmsysorg/sglang:{SGLANG_TAG}-a3", "0.5.14", "9.0.0", ("ascend910_93",)),
)

DEFAULT_IMAGES: dict[tuple[str, str], str] = {
    (release.engine, chip): release.image for release in RELEASES for chip in release.chips
}

# Repositories of the upstream engine images: they do not contain this project's exporter.
UPSTREAM_REPOSITORIES = frozenset({"quay.io/ascend/vllm-ascend", "lmsysorg/sglang"})

# Chips each engine supports upstream (the API refuses other pairs with a sentence).
SUPPORTED_CHIPS = ENGINE_CHIPS

# Versions from which a generated flag exists (the engines' own parsers in tests/engines check the defaults).
SGLANG_MODELSLIM: Version = (0, 5, 7)  # --quantization modelslim
VLLM_NATIVE_MULTI_NODE: Version = (0, 23, 0)  # --nnodes/--node-rank/--master-addr/--headless
SGLANG_PLUGINS: Version = (0, 5, 14)  # the sglang.srt.plugins entry point group (absent up to 0.5.10)

_TAG_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)")


def default_image(engine: str, chip: str) -> str | None:
    """The upstream image for an engine and chip, or None where the engine does not support the chip."""
    return DEFAULT_IMAGES.get((engine, chip))


def default_version(engine: str) -> Version:
    """The engine version of the default images (all chips carry the same one)."""
    release = next(r for r in RELEASES if r.engine == engine)
    return parse_version(release.version)


def parse_version(text: str) -> Version:
    major, minor, patch = (int(part) for part in text.split(".")[:3])
    return major, minor, patch


def repository(image: str) -> str:
    """The image reference without its tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def image_version(engine: str, image: str) -> Version:
    """The vLLM or SGLang version an image carries: from a ``v<x.y.z>`` tag, else the default image's."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    match = _TAG_VERSION.match(tag)
    if match:
        return int(match.group(1)), int(match.group(2)), int(match.group(3))
    return default_version(engine)


def has_exporter(image: str) -> bool:
    """False for the upstream engine images, which lack the project's exporter; True for any other build."""
    return repository(image) not in UPSTREAM_REPOSITORIES


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)
