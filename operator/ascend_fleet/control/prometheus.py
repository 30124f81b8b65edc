"""The control loop's Prometheus client: instant queries over Prometheus's HTTP API with ``requests``.

The client is blocking, so every query runs in a worker thread with the configured timeout, both on the
HTTP request and around the thread, and the operator's event loop never waits on Prometheus. Credentials
(a bearer token file or basic-auth files), a CA bundle and extra headers (a tenant's ``X-Scope-OrgID``)
come from :class:`~ascend_fleet.api.settings.PrometheusSettings`; the files are read again every cycle, so
rotated Secrets apply without a restart.

A failure is reported per query as a reason the ``MetricsAvailable`` condition shows, decided from the
HTTP status and the API's JSON body (``errorType``, ``error``): ``PrometheusUnauthorized`` (401/403: the
credentials are wrong or missing), ``QueryFailed`` (400/422: Prometheus rejected the PromQL) or
``PrometheusUnavailable`` (unreachable, TLS refused, timed out, overloaded).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import requests
import urllib3

from ..api.settings import PrometheusSettings, url_credentials_problem
from ..telemetry import PROMETHEUS_FAILURES
from .queries import Observations, Query

_log = logging.getLogger(__name__)
# Queries of one cycle run side by side, but few at a time, to keep the load on Prometheus polite.
PARALLEL_QUERIES = 4
_REJECTED = {400, 422}  # bad_data, execution error: the query itself is wrong
_UNAUTHORIZED = {401, 403}
_BODY_EXCERPT = 300


class Failed(Exception):
    """A query that got no usable answer: the condition reason and the sentence it shows."""

    def __init__(self, reason: str, message: str):
        super().__init__(reason, message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class Credentials:
    """What one cycle sends besides the query: read from the settings' files when the cycle starts."""

    headers: dict[str, str]
    auth: tuple[str, str] | None
    verify: bool | str


def read_credentials(settings: PrometheusSettings) -> Credentials:
    """The headers, basic auth and TLS verification for one cycle; :class:`Failed` if a file is unreadable."""
    headers = dict(settings.headers)
    auth = None
    try:
        if settings.bearer_token_file:
            headers["Authorization"] = f"Bearer {_read(settings.bearer_token_file)}"
        if settings.basic_auth:
            auth = (_read(settings.basic_auth.username_file), _read(settings.basic_auth.password_file))
    except OSError as error:
        raise Failed(
            "PrometheusUnauthorized",
            f"cannot read the Prometheus credentials file {error.filename} ({error.strerror})",
        ) from None
    verify: bool | str = settings.ca_file or not settings.insecure_skip_verify
    return Credentials(headers, auth, verify)


def _read(path: str) -> str:
    # Secrets mounted from files usually end in a newline that is not part of the value.
    return Path(path).read_text(encoding="utf-8").strip()


def answer(response: requests.Response, url: str, promql: str) -> list:
    """The result list of a query answer, or :class:`Failed` with the reason its status and body give."""
    try:
        document = response.json()
    except ValueError:
        document = None
    if not isinstance(document, dict):
        document = {}
    error = str(document.get("error") or response.text[:_BODY_EXCERPT].strip() or response.reason)
    kind = document.get("errorType")
    said = f"HTTP {response.status_code}" + (f" {kind}" if kind else "")
    if response.status_code in _UNAUTHORIZED:
        raise Failed(
            "PrometheusUnauthorized",
            f"Prometheus at {url} refused the operator's credentials ({said}: {error}); check "
            "prometheus.bearerTokenFile or prometheus.basicAuth and the Secret they are mounted from",
        )
    if response.status_code in _REJECTED:
        raise Failed("QueryFailed", f"Prometheus answered {said}: {error} (query: {promql})")
    if response.status_code != 200:
        raise Failed("PrometheusUnavailable", f"Prometheus at {url} answered {said}: {error}")
    if document.get("status") != "success" or not isinstance(document.get("data"), dict):
        raise Failed(
            "PrometheusUnavailable",
            f"unreadable answer from Prometheus at {url}: not the query API's JSON ({error[:100]})",
        )
    result = document["data"].get("result")
    return result if isinstance(result, list) else []


class Prometheus:
    """Runs a cycle's queries against one Prometheus server."""

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        parallel: int = PARALLEL_QUERIES,
        settings: PrometheusSettings | None = None,
    ):
        if url_credentials_problem(
            url
        ):  # settings refuse it at load; a client made in code is held to it too
            raise ValueError(f"Prometheus URL: {url_credentials_problem(url)}")
        self.url, self.timeout = url.rstrip("/"), float(timeout)
        self.settings = settings or PrometheusSettings(url=url, timeout=timeout)
        # One requests.Session per concurrent query: it is not documented as thread-safe.
        # No retries: a cycle that fails is simply tried again one interval later, from scratch.
        self._idle: list[requests.Session] = []
        self._parallel = max(1, parallel)

    @classmethod
    def from_settings(cls, settings: PrometheusSettings) -> Prometheus:
        """The client the operator's settings describe (URL, timeout, credentials, TLS, headers)."""
        if not settings.url:
            raise ValueError("prometheus.url is not set")
        if settings.insecure_skip_verify:
            # Said once here instead of urllib3's warning on every query of every cycle.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            _log.warning(
                "prometheus.insecureSkipVerify: Prometheus's TLS certificate at %s is not verified",
                settings.url,
            )
        return cls(settings.url, settings.timeout, settings=settings)

    async def observe(self, queries: Sequence[Query], step: float, at: float) -> Observations:
        """Evaluate every query at time ``at`` and collect the answers (or why there is none)."""
        observations = Observations()
        try:
            credentials = read_credentials(self.settings)
        except Failed as failure:
            for query in queries:
                self._failed(observations, query, failure)
            return observations
        slots = asyncio.Semaphore(self._parallel)  # per call: the loop may differ between calls
        await asyncio.gather(
            *(self._one(query, step, at, credentials, observations, slots) for query in queries)
        )
        return observations

    async def instant(self, promql: str, at: float) -> list:
        """One instant query outside the rules' windows (the KVTransfer condition's); :class:`Failed` says why
        there is no answer."""
        credentials = read_credentials(self.settings)
        session = self._idle.pop() if self._idle else requests.Session()
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._post, session, promql, at, credentials), self.timeout + 1.0
            )
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            self._idle.append(session)

    async def _one(
        self,
        query: Query,
        step: float,
        at: float,
        credentials: Credentials,
        observations: Observations,
        slots: asyncio.Semaphore,
    ) -> None:
        async with slots:
            session = self._idle.pop() if self._idle else requests.Session()
            promql = query.promql(step)
            try:
                result = await asyncio.wait_for(
                    asyncio.to_thread(self._post, session, promql, at, credentials), self.timeout + 1.0
                )
            except TimeoutError:
                self._failed(observations, query, self._timed_out())
            except Failed as failure:
                self._failed(observations, query, failure)
            else:
                observations.record(query, result)
            finally:
                self._idle.append(session)

    def _post(self, session: requests.Session, promql: str, at: float, credentials: Credentials) -> list:
        try:
            response = session.post(
                f"{self.url}/api/v1/query",
                data={"query": promql, "time": f"{at:.3f}"},
                headers=credentials.headers,
                auth=credentials.auth,
                verify=credentials.verify,
                timeout=self.timeout,
            )
        except requests.Timeout:
            raise self._timed_out() from None
        except requests.exceptions.SSLError as error:
            raise Failed(
                "PrometheusUnavailable",
                f"TLS with Prometheus at {self.url} failed ({_innermost(error)}); set prometheus.caFile to "
                "the CA that signs its certificate",
            ) from None
        except requests.RequestException as error:
            raise Failed(
                "PrometheusUnavailable", f"Prometheus at {self.url} is unreachable ({type(error).__name__})"
            ) from None
        return answer(response, self.url, promql)

    def _timed_out(self) -> Failed:
        return Failed(
            "PrometheusUnavailable", f"Prometheus at {self.url} did not answer within {self.timeout:g}s"
        )

    @staticmethod
    def _failed(observations: Observations, query: Query, failure: Failed) -> None:
        PROMETHEUS_FAILURES.inc()
        _log.debug("query failed (%s): %s", failure.reason, failure.message)
        observations.fail(query, failure.reason, failure.message)


def _innermost(error: BaseException) -> str:
    """The deepest cause's text: requests wraps the ssl module's sentence in two layers of retry errors."""
    for _ in range(6):
        inner = next((arg for arg in error.args if isinstance(arg, BaseException)), None)
        inner = inner or error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    return str(error)[:_BODY_EXCERPT]
