"""The memory report's reads: Prometheus range queries and, when a cluster is reachable, ``status.actions``.

Prometheus is asked with the operator's own client settings (URL, timeout, credentials, CA, headers), so
the report works against the same server, tenant and Secret files as the control loop.
"""

from __future__ import annotations

from collections.abc import Mapping

import requests

from ..api import names
from ..api.settings import PrometheusSettings
from ..control.prometheus import Failed, answer, read_credentials
from .memory import ReportWindow


class HistoryUnavailable(Exception):
    """Prometheus gave no usable answer; the message says why, as the control loop's condition would."""


def query_range(
    settings: PrometheusSettings, queries: Mapping[str, str], window: ReportWindow
) -> dict[str, list]:
    """Column -> the matrix ``result`` of its range query over ``window``."""
    if not settings.url:
        raise HistoryUnavailable(
            "no Prometheus to read: pass --prometheus-url, set ASCEND_FLEET_PROMETHEUS_URL, "
            "or --config with the operator's prometheus.url"
        )
    url = settings.url.rstrip("/")
    try:
        credentials = read_credentials(settings)
    except Failed as failure:
        raise HistoryUnavailable(failure.message) from None
    answers: dict[str, list] = {}
    with requests.Session() as session:
        for column, promql in queries.items():
            form = {"query": promql, "start": f"{window.start:.3f}", "end": f"{window.end:.3f}"}
            form["step"] = f"{window.step:g}"
            try:
                response = session.post(
                    f"{url}/api/v1/query_range",
                    data=form,
                    headers=credentials.headers,
                    auth=credentials.auth,
                    verify=credentials.verify,
                    timeout=settings.timeout,
                )
                answers[column] = answer(response, url, promql)
            except Failed as failure:
                raise HistoryUnavailable(failure.message) from None
            except requests.RequestException as error:
                raise HistoryUnavailable(
                    f"Prometheus at {url} is unreachable ({type(error).__name__})"
                ) from None
    return answers


def recorded_actions(namespace: str, name: str, kubeconfig: str | None) -> tuple[list[dict], str | None]:
    """The object's ``status.actions``, or none and the reason when no cluster or object is reachable."""
    from ..kube import Kube, KubeError

    try:
        kube = Kube.connect(kubeconfig)
        obj = kube.get(names.KIND, namespace, name)
    except (KubeError, OSError) as error:
        return [], f"restart_service actions not marked: {namespace}/{name} is not readable ({error})"
    except Exception as error:  # the client's configuration errors have no common base class
        return [], f"restart_service actions not marked: no cluster reachable ({type(error).__name__})"
    return list((obj.get("status") or {}).get("actions") or []), None
