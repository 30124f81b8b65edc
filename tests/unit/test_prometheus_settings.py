"""Prometheus connection settings and how an HTTP answer becomes a condition reason (no server needed)."""

from __future__ import annotations

import pytest
import requests
from pydantic import ValidationError

from ascend_fleet.api.settings import OperatorSettings, PrometheusSettings
from ascend_fleet.control.prometheus import Failed, answer, read_credentials

URL = "http://prometheus:9090"


def response(status: int, body: str, reason: str = "") -> requests.Response:
    made = requests.Response()
    made.status_code, made._content, made.reason = status, body.encode(), reason
    return made


def test_settings_file_keys_are_camel_case():
    settings = OperatorSettings.model_validate(
        {
            "prometheus": {
                "url": URL,
                "basicAuth": {"usernameFile": "/u", "passwordFile": "/p"},
                "caFile": "/ca.crt",
                "headers": {"X-Scope-OrgID": "team-a"},
            }
        }
    ).prometheus
    assert (settings.basic_auth.username_file, settings.basic_auth.password_file) == ("/u", "/p")
    assert settings.ca_file == "/ca.crt" and settings.headers == {"X-Scope-OrgID": "team-a"}


@pytest.mark.parametrize(
    "settings, sentence",
    [
        (
            {"bearerTokenFile": "/t", "basicAuth": {"usernameFile": "/u", "passwordFile": "/p"}},
            "prometheus.bearerTokenFile and prometheus.basicAuth both set",
        ),
        (
            {"caFile": "/ca", "insecureSkipVerify": True},
            "prometheus.caFile and prometheus.insecureSkipVerify",
        ),
        ({"headers": {"authorization": "Basic x"}}, "prometheus.headers sets authorization"),
        ({"basicAuth": {"usernameFile": "/u"}}, "passwordFile"),
    ],
)
def test_contradictory_settings_are_refused_with_a_sentence(settings, sentence):
    with pytest.raises(ValidationError, match=sentence):
        PrometheusSettings.model_validate({"url": URL, **settings})


def test_credentials_are_read_from_files_without_the_trailing_newline(tmp_path):
    (tmp_path / "token").write_text("abc\n")
    credentials = read_credentials(
        PrometheusSettings(url=URL, bearer_token_file=str(tmp_path / "token"), headers={"X-Scope-OrgID": "a"})
    )
    assert credentials.headers == {"X-Scope-OrgID": "a", "Authorization": "Bearer abc"}
    assert credentials.auth is None and credentials.verify is True


def test_ca_file_and_skip_verify_decide_verification():
    assert read_credentials(PrometheusSettings(url=URL, ca_file="/ca.crt")).verify == "/ca.crt"
    assert read_credentials(PrometheusSettings(url=URL, insecure_skip_verify=True)).verify is False


@pytest.mark.parametrize(
    "status, body, reason, message",
    [
        (
            401,
            "Unauthorized\n",
            "PrometheusUnauthorized",
            "refused the operator's credentials (HTTP 401: Unauthorized)",
        ),
        (
            403,
            '{"status":"error","errorType":"forbidden","error":"no access"}',
            "PrometheusUnauthorized",
            "(HTTP 403 forbidden: no access)",
        ),
        (
            400,
            '{"status":"error","errorType":"bad_data","error":"parse error at char 5"}',
            "QueryFailed",
            "Prometheus answered HTTP 400 bad_data: parse error at char 5 (query: up)",
        ),
        (
            422,
            '{"status":"error","errorType":"execution","error":"many-to-many matching"}',
            "QueryFailed",
            "HTTP 422 execution: many-to-many matching",
        ),
        (
            503,
            '{"status":"error","errorType":"unavailable","error":"too many queries"}',
            "PrometheusUnavailable",
            f"Prometheus at {URL} answered HTTP 503 unavailable: too many queries",
        ),
        (
            502,
            "<html>Bad Gateway</html>",
            "PrometheusUnavailable",
            "answered HTTP 502: <html>Bad Gateway</html>",
        ),
        (200, "<html>login</html>", "PrometheusUnavailable", "not the query API's JSON (<html>login</html>)"),
    ],
)
def test_status_and_body_decide_the_reason(status, body, reason, message):
    with pytest.raises(Failed) as failed:
        answer(response(status, body), URL, "up")
    assert failed.value.reason == reason
    assert message in failed.value.message


def test_a_success_gives_the_result_list():
    body = '{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"2"]}]}}'
    assert answer(response(200, body), URL, "up") == [{"metric": {}, "value": [1, "2"]}]
