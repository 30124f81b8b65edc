"""A Prometheus URL with ``user:password@`` is refused wherever it comes in, and the password is never printed.

The operator names its Prometheus in conditions (``MetricsAvailable``), Events and logs, so a URL with
credentials is refused at settings load, from the file, the environment and the command-line flags alike,
with one line that does not repeat it; the operator then never starts, so nothing reaches an object.
"""

from __future__ import annotations

import logging
import os

import pytest

from ascend_fleet.api.settings import PrometheusSettings, url_credentials_problem
from ascend_fleet.cli.documents import DocumentError
from ascend_fleet.cli.inputs import read_settings
from ascend_fleet.cli.main import main
from ascend_fleet.control.prometheus import Prometheus

SECRET = "hunter2-s3cret"
WITH_CREDENTIALS = [
    f"http://admin:{SECRET}@prometheus.monitoring:9090",
    f"https://{SECRET}@prometheus.example",  # a token as the user name
    f"http://admin:{SECRET}@[::1]:9090/prometheus?x=1",
    f"admin:{SECRET}@prometheus:9090",  # no scheme
]
WITHOUT = [
    "http://prometheus.monitoring:9090",
    "https://prometheus.example/path/with@sign",  # an @ in the path is no credential
    "http://[::1]:9090/?q=a@b",
    "http://prometheus:9090#frag@ment",
]


@pytest.mark.parametrize("url", WITH_CREDENTIALS)
def test_a_url_with_userinfo_is_a_problem(url):
    assert url_credentials_problem(url)


@pytest.mark.parametrize("url", WITHOUT)
def test_a_url_without_userinfo_is_not(url):
    assert url_credentials_problem(url) is None
    assert PrometheusSettings(url=url).url == url


def refused(**where) -> str:
    with pytest.raises(DocumentError) as error:
        read_settings(**where)
    message = str(error.value)
    assert "\n" not in message
    assert SECRET not in message
    assert "prometheus.url: the URL holds credentials" in message
    assert "prometheus.basicAuth.usernameFile and passwordFile, or prometheus.bearerTokenFile" in message
    return message


@pytest.mark.parametrize("url", WITH_CREDENTIALS)
def test_refused_from_the_file_the_environment_and_a_flag(tmp_path, url):
    config = tmp_path / "config.yaml"
    config.write_text(f"prometheus:\n  url: '{url}'\n")
    refused(path=str(config), environ={})
    refused(path=None, environ={"ASCEND_FLEET_PROMETHEUS_URL": url})
    refused(path=None, environ={}, prometheus_url=url)


def test_a_flag_without_credentials_overrides_the_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("prometheus:\n  url: http://file:9090\n  timeout: 3s\n")
    settings = read_settings(str(config), {}, prometheus_url="http://flag:9090")
    assert (settings.prometheus.url, settings.prometheus.timeout) == ("http://flag:9090", 3.0)


def test_a_client_made_in_code_refuses_it_too():
    with pytest.raises(ValueError) as error:
        Prometheus(WITH_CREDENTIALS[0])
    assert SECRET not in str(error.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--prometheus-url", WITH_CREDENTIALS[0]],
        ["memory-report", "llm", "-o", "report.csv", "--prometheus-url", WITH_CREDENTIALS[0]],
    ],
    ids=["run", "memory-report"],
)
def test_the_commands_stop_with_one_line_and_log_nothing_of_it(argv, capsys, caplog, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("ASCEND_FLEET_CONFIG", "ASCEND_FLEET_PROMETHEUS_URL"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.DEBUG)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "holds credentials" in err
    assert SECRET not in out + err
    assert all(SECRET not in record.getMessage() for record in caplog.records)
    assert not os.listdir(tmp_path)  # nothing written either
