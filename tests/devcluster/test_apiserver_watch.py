"""Watches of the local Kubernetes API: resourceVersions, resuming, selectors, timeouts and bookmarks."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request

import kmock
import kubernetes.watch

from ascend_fleet_dev.emulator.apiserver import LocalKubernetes

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def watch_events(list_function, *args, count: int | None = None, **kwargs) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the first ``count`` events, or of all until the watch times out."""
    watch = kubernetes.watch.Watch()
    kwargs.setdefault("timeout_seconds", 2)
    events = []
    for event in watch.stream(list_function, *args, **kwargs):
        events.append(
            (event["type"], event["object"].metadata.name, event["object"].metadata.resource_version)
        )
        if len(events) == count:
            watch.stop()
    return events


def raw_watch(url: str, path: str, *, until: str, **params: str) -> list[dict]:
    """The events of a watch over plain HTTP, up to the first one of type ``until``."""
    query = urllib.parse.urlencode({"watch": "true", "timeoutSeconds": "5", **params})
    events: list[dict] = []
    with NO_PROXY.open(f"{url}{path}?{query}", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        while not events or events[-1]["type"] != until:
            events.append(json.loads(response.readline()))
    return events


def test_watch_replays_changes_after_a_resource_version_with_their_new_versions(core, test_namespace):
    start = core.list_namespaced_config_map(test_namespace).metadata.resource_version
    created = core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "a"}})
    patched = core.patch_namespaced_config_map("a", test_namespace, {"data": {"k": "v"}})
    core.delete_namespaced_config_map("a", test_namespace)
    events = watch_events(core.list_namespaced_config_map, test_namespace, resource_version=start, count=3)
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    versions = [int(version) for _, _, version in events]
    assert versions[:2] == [int(created.metadata.resource_version), int(patched.metadata.resource_version)]
    assert versions[0] < versions[1] < versions[2]


def test_watch_without_a_resource_version_starts_with_the_current_objects(core, test_namespace):
    for name in ("b", "a"):
        core.create_namespaced_config_map(test_namespace, {"metadata": {"name": name}})
    events = watch_events(core.list_namespaced_config_map, test_namespace, count=2)
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_label_selector_on_a_watch_reports_objects_entering_and_leaving_it(core, test_namespace):
    start = core.list_namespaced_config_map(test_namespace).metadata.resource_version
    core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "a", "labels": {"tier": "web"}}})
    core.create_namespaced_config_map(
        test_namespace, {"metadata": {"name": "other", "labels": {"tier": "db"}}}
    )
    for tier in ("db", "web"):
        core.patch_namespaced_config_map("a", test_namespace, {"metadata": {"labels": {"tier": tier}}})
    events = watch_events(
        core.list_namespaced_config_map,
        test_namespace,
        resource_version=start,
        label_selector="tier=web",
        count=3,
    )
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "a")]


def test_field_selector_on_a_watch(core, test_namespace):
    start = core.list_namespaced_config_map(test_namespace).metadata.resource_version
    for name in ("a", "b", "c"):
        core.create_namespaced_config_map(test_namespace, {"metadata": {"name": name}})
    core.delete_namespaced_config_map("b", test_namespace)
    events = watch_events(
        core.list_namespaced_config_map,
        test_namespace,
        resource_version=start,
        field_selector="metadata.name=b",
        count=2,
    )
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "b"), ("DELETED", "b")]


def test_a_watch_ends_after_timeout_seconds(core, test_namespace):
    began = time.monotonic()
    assert watch_events(core.list_namespaced_config_map, test_namespace, timeout_seconds=1) == []
    assert 0.9 < time.monotonic() - began < 5


def test_initial_events_end_with_a_bookmark(dev_cluster, core, test_namespace):
    core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "a"}})
    events = raw_watch(
        dev_cluster.url,
        f"/api/v1/namespaces/{test_namespace}/configmaps",
        sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
        allowWatchBookmarks="true",
        until="BOOKMARK",
    )
    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


def test_a_forgotten_resource_version_is_410_expired():
    asyncio.run(_test_a_forgotten_resource_version_is_410_expired())


async def _test_a_forgotten_resource_version_is_410_expired():
    async with LocalKubernetes(watch_history=2) as emulator, kmock.Server(emulator) as server:
        path = "/api/v1/namespaces/default/configmaps"
        async with server.client.get(path) as response:
            start = (await response.json())["metadata"]["resourceVersion"]
        for name in ("a", "b", "c"):
            async with server.client.post(path, json={"metadata": {"name": name}}) as response:
                assert response.status == 201
        async with server.client.get(path, params={"watch": "1", "resourceVersion": start}) as response:
            events = [json.loads(line) async for line in response.content if line.strip()]
    assert [(e["type"], e["object"]["code"], e["object"]["reason"]) for e in events] == [
        ("ERROR", 410, "Expired")
    ]


def test_an_idle_watch_that_allows_bookmarks_gets_them():
    asyncio.run(_test_an_idle_watch_that_allows_bookmarks_gets_them())


async def _test_an_idle_watch_that_allows_bookmarks_gets_them():
    async with LocalKubernetes(bookmark_interval=0.1) as emulator, kmock.Server(emulator) as server:
        params = {"watch": "1", "resourceVersion": "1", "allowWatchBookmarks": "true"}
        async with server.client.get("/api/v1/namespaces/default/configmaps", params=params) as response:
            event = json.loads(await response.content.readline())
    assert event["type"] == "BOOKMARK"
    assert event["object"]["metadata"]["resourceVersion"] == str(emulator.store.revision)
