"""kmock's DSL still works on LocalKubernetes: user reactions answer first, and writes still commit."""

from __future__ import annotations

import asyncio
import time

import kmock

from ascend_fleet_dev.emulator.apiserver import LocalKubernetes

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def test_a_reaction_replaces_the_answer_but_the_write_is_committed():
    asyncio.run(_test_a_reaction_replaces_the_answer_but_the_write_is_committed())


async def _test_a_reaction_replaces_the_answer_but_the_write_is_committed():
    async with LocalKubernetes() as emulator, kmock.Server(emulator) as server:
        emulator[f"post {CONFIGMAPS}"] << 503
        async with server.client.post(CONFIGMAPS, json={"metadata": {"name": "a"}}) as response:
            assert response.status == 503
        async with server.client.get(f"{CONFIGMAPS}/a") as response:
            assert response.status == 200  # "committed, response lost": the client must cope
        assert emulator.objects["v1/configmaps", "default", "a"]["metadata"]["name"] == "a"


def test_fallback_reactions_answer_only_what_the_api_does_not_serve():
    asyncio.run(_test_fallback_reactions_answer_only_what_the_api_does_not_serve())


async def _test_fallback_reactions_answer_only_what_the_api_does_not_serve():
    async with LocalKubernetes() as emulator, kmock.Server(emulator) as server:
        emulator.fallback["get /openapi/v2"] << {"swagger": "2.0"}
        emulator.fallback[f"get {CONFIGMAPS}"] << {"never": "served"}
        async with server.client.get("/openapi/v2") as response:
            assert (response.status, await response.json()) == (200, {"swagger": "2.0"})
        async with server.client.get(CONFIGMAPS) as response:
            assert (await response.json())["kind"] == "ConfigMapList"
        async with server.client.get("/nothing/here") as response:
            assert (response.status, (await response.json())["kind"]) == (404, "Status")


def test_requests_stay_fast_however_many_came_before():
    asyncio.run(_test_requests_stay_fast_however_many_came_before())


async def _test_requests_stay_fast_however_many_came_before():
    async with LocalKubernetes() as emulator, kmock.Server(emulator) as server:

        async def average_get_seconds(count: int) -> float:
            began = time.perf_counter()
            for _ in range(count):
                async with server.client.get("/api/v1/namespaces/default") as response:
                    assert response.status == 200
            return (time.perf_counter() - began) / count

        early = await average_get_seconds(50)
        for index in range(1000):
            async with server.client.post(CONFIGMAPS, json={"metadata": {"name": f"cm{index}"}}):
                pass
        assert await average_get_seconds(50) < max(early * 5, 0.005)
