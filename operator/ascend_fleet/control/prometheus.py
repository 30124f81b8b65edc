"""The control loop's Prometheus client: the only module that imports prometheus_api_client.

The client is blocking (``requests``), so every query runs in a worker thread with the configured
timeout, both on the HTTP request and around the thread, and the operator's event loop never waits
on Prometheus. A failure is reported per query as a reason the ``MetricsAvailable`` condition shows:
``PrometheusUnavailable`` (unreachable, timed out, overloaded) or ``QueryFailed`` (Prometheus rejected
the PromQL, e.g. a raw query in a rule with a syntax error).
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
from collections.abc import Sequence

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from ..telemetry import PROMETHEUS_FAILURES
from .queries import Observations, Query

log = logging.getLogger(__name__)
# Queries of one cycle run side by side, but few at a time, to keep the load on Prometheus polite.
PARALLEL_QUERIES = 4
_HTTP_ERROR = re.compile(r"HTTP Status Code (\d+) \((.*)\)$", re.DOTALL)
_REJECTED = {400, 422}  # bad_data, execution error: the query itself is wrong


class Prometheus:
    """Runs a cycle's queries against one Prometheus server."""

    def __init__(self, url: str, timeout: float = 10.0, parallel: int = PARALLEL_QUERIES):
        self.url, self.timeout = url.rstrip("/"), float(timeout)
        # No retries: a cycle that fails is simply tried again one interval later, from scratch.
        # One client per concurrent query, because a requests.Session is not documented as thread-safe.
        self._idle: list[PrometheusConnect] = []
        self._parallel = max(1, parallel)

    def _client(self) -> PrometheusConnect:
        return PrometheusConnect(
            url=self.url, retry=Retry(total=0, raise_on_status=False), timeout=self.timeout, method="POST"
        )

    async def observe(self, queries: Sequence[Query], step: float, at: float) -> Observations:
        """Evaluate every query at time ``at`` and collect the answers (or why there is none)."""
        observations = Observations()
        slots = asyncio.Semaphore(self._parallel)  # per call: the loop may differ between calls
        await asyncio.gather(*(self._one(query, step, at, observations, slots) for query in queries))
        return observations

    async def _one(
        self, query: Query, step: float, at: float, observations: Observations, slots: asyncio.Semaphore
    ) -> None:
        async with slots:
            client = self._idle.pop() if self._idle else self._client()
            try:
                await self._ask(client, query, step, at, observations)
            finally:
                self._idle.append(client)

    async def _ask(
        self, client: PrometheusConnect, query: Query, step: float, at: float, observations: Observations
    ) -> None:
        promql = query.promql(step)
        try:
            result = await asyncio.wait_for(
                asyncio.to_thread(
                    client.custom_query, promql, params={"time": f"{at:.3f}"}, timeout=self.timeout
                ),
                self.timeout + 1.0,
            )
        except TimeoutError:
            self._failed(
                observations,
                query,
                "PrometheusUnavailable",
                f"Prometheus at {self.url} did not answer within {self.timeout:g}s",
            )
        except requests.RequestException as error:
            self._failed(
                observations,
                query,
                "PrometheusUnavailable",
                f"Prometheus at {self.url} is unreachable ({type(error).__name__})",
            )
        except PrometheusApiClientException as error:
            status, message = _http_error(str(error))
            reason = "QueryFailed" if status in _REJECTED else "PrometheusUnavailable"
            self._failed(
                observations,
                query,
                reason,
                f"Prometheus answered {status or 'an error'}: {message}"
                + (f" (query: {promql})" if reason == "QueryFailed" else ""),
            )
        except ValueError as error:  # an answer that is not the JSON the API documents
            self._failed(
                observations, query, "PrometheusUnavailable", f"unreadable answer from Prometheus: {error}"
            )
        else:
            observations.record(query, result if isinstance(result, list) else [])

    @staticmethod
    def _failed(observations: Observations, query: Query, reason: str, message: str) -> None:
        PROMETHEUS_FAILURES.inc()
        log.debug("query failed (%s): %s", reason, message)
        observations.fail(query, reason, message)


def _http_error(text: str) -> tuple[int | None, str]:
    """Status and the API's own error text from the client's exception message."""
    match = _HTTP_ERROR.search(text)
    if not match:
        return None, text
    status, body = int(match.group(1)), match.group(2)
    try:
        raw = ast.literal_eval(body)
        document = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        return status, str(document.get("error") or document)
    except (ValueError, SyntaxError, AttributeError):
        return status, body[:300]
