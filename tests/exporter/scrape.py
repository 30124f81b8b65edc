"""Helpers for tests that read exposition text the way Prometheus tooling does."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Exposition text as ``{sample name: {sorted label pairs: value}}``, failing on duplicate series."""
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            values = series.setdefault(sample.name, {})
            assert labels not in values, f"duplicate series {sample.name}{dict(labels)}"
            values[labels] = sample.value
    return series


def by_device(series: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> dict[str, float]:
    """The values of one metric keyed by their ``device`` label (the only label a device series has)."""
    values = {}
    for labels, value in series.get(name, {}).items():
        assert [key for key, _ in labels] == ["device"], labels
        values[labels[0][1]] = value
    return values


def scrape(port: int, path: str = "/metrics", timeout: float = 2.0) -> tuple[str, str]:
    """Body and content type of ``GET http://127.0.0.1:<port><path>``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return response.read().decode("utf-8"), response.headers["Content-Type"]
