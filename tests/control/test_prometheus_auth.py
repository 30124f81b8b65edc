"""The control loop's client against a real Prometheus that demands TLS and basic auth, and a tenant proxy.

Prometheus serves HTTPS with a certificate from a CA made here with openssl, and asks for basic auth through its own
``--web.config.file``; a small HTTP proxy in front of it refuses requests without the tenant header, as Mimir
and Cortex do. Each failure must come back as a reason and a sentence a user can act on.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import http.server
import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from ascend_fleet.api.settings import PrometheusSettings
from ascend_fleet.control.prometheus import Prometheus
from ascend_fleet.control.queries import Observations, Query, QueryWindow
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import guarded_popen

pytestmark = pytest.mark.prometheus
USER, PASSWORD, TENANT, TOKEN = "fleet", "s3cret-password", "team-a", "token-of-the-operator"
STEP = 1.0
# Labelled like a catalog entry, so the answer maps to one object; `up` of the self-scrape keeps it fresh.
QUERY = Query(
    QueryWindow(
        'label_replace(label_replace(vector(0.5), "namespace", "ns", "", ""), "inference", "f", "", "")',
        2,
        "fleet",
    ),
    "min",
)


def bcrypt(password: str) -> str:
    """A bcrypt hash for web.config's basic_auth_users, from the C library's crypt(3) (libxcrypt)."""
    library = ctypes.util.find_library("crypt")
    if library is None:
        pytest.skip("no libcrypt to hash the basic-auth password with")
    crypt = ctypes.CDLL(library).crypt
    crypt.restype, crypt.argtypes = ctypes.c_char_p, [ctypes.c_char_p, ctypes.c_char_p]
    salt = "$2b$05$" + secrets.token_urlsafe(16)[:22].replace("-", ".").replace("_", "/")
    hashed = crypt(password.encode(), salt.encode())
    if not hashed or not hashed.startswith(b"$2b$"):
        pytest.skip("this libcrypt has no bcrypt")
    return hashed.decode()


def certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it, made with openssl: (ca, cert, key) files."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make the test CA with")
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key, request = directory / "server.crt", directory / "server.key", directory / "server.csr"
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    ec_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    commands = [
        ["req", "-x509", *ec_key, "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=test CA"],
        ["req", *ec_key, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
        [
            "x509",
            "-req",
            "-in",
            request,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-out",
            cert,
            "-days",
            "1",
        ]
        + ["-extfile", directory / "san.ext"],
    ]
    for command in commands:
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    return ca, cert, key


@pytest.fixture(scope="module")
def secure_prometheus(prometheus_binary, tmp_path_factory):
    """A real Prometheus on HTTPS with basic auth, scraping itself every second: (url, files)."""
    home = tmp_path_factory.mktemp("secure-prometheus")
    ca, cert, key = certificates(home)
    (home / "password").write_text(PASSWORD + "\n")
    (home / "wrong-password").write_text("not-the-password\n")
    (home / "user").write_text(USER + "\n")
    (home / "web.yml").write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                "basic_auth_users": {USER: bcrypt(PASSWORD)},
            }
        )
    )
    port = free_port()
    scrape = {
        "job_name": "self",
        "scheme": "https",
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        "tls_config": {"ca_file": str(ca)},
        "basic_auth": {"username": USER, "password_file": str(home / "password")},
    }
    (home / "prometheus.yml").write_text(
        yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]})
    )
    process = guarded_popen(
        [
            prometheus_binary,
            f"--config.file={home / 'prometheus.yml'}",
            f"--web.config.file={home / 'web.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(home / "log").open("w"),
    )
    url = f"https://127.0.0.1:{port}"
    try:
        wait_fresh(url, (USER, PASSWORD), str(ca), process, home / "log")
        yield url, home
    finally:
        process.terminate()
        process.wait(10)


def wait_fresh(url: str, auth: tuple[str, str], ca: str, process: subprocess.Popen, log: Path) -> None:
    """Until the test query answers: the self-scrape has stored enough `up` for its freshness guard."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"prometheus exited: {log.read_text()[-2000:]}"
        try:
            answer = requests.post(
                f"{url}/api/v1/query", data={"query": QUERY.promql(STEP)}, auth=auth, verify=ca, timeout=2
            )
            if answer.ok and answer.json()["data"]["result"]:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    pytest.fail(f"prometheus never scraped itself: {log.read_text()[-2000:]}")


class TenantProxy(http.server.ThreadingHTTPServer):
    """Forwards queries to Prometheus only with the tenant header, else 401 as Mimir answers.

    A bearer token is checked here and swapped for Prometheus's basic auth, as an OAuth proxy in front
    of Prometheus (OpenShift's) does.
    """

    def __init__(self, upstream: str, ca: str):
        super().__init__(("127.0.0.1", 0), _TenantHandler)
        self.upstream, self.ca, self.tenants_seen = upstream, ca, []


class _TenantHandler(http.server.BaseHTTPRequestHandler):
    server: TenantProxy

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        tenant = self.headers.get("X-Scope-OrgID")
        self.server.tenants_seen.append(tenant)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if tenant != TENANT:
            self._reply(401, b"no org id\n", "text/plain")
            return
        authorization = self.headers.get("Authorization", "")
        auth = None
        if authorization.startswith("Bearer "):
            if authorization != f"Bearer {TOKEN}":
                self._reply(403, b'{"status":"error","errorType":"forbidden","error":"token rejected"}', "")
                return
            authorization, auth = "", (USER, PASSWORD)
        headers = {"Content-Type": self.headers.get("Content-Type", "")}
        if authorization:
            headers["Authorization"] = authorization
        upstream = requests.post(
            self.server.upstream + self.path,
            data=body,
            headers=headers,
            auth=auth,
            verify=self.server.ca,
            timeout=10,
        )
        self._reply(upstream.status_code, upstream.content, upstream.headers.get("Content-Type", ""))

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        """Quiet: the test output is the assertions."""


@pytest.fixture(scope="module")
def tenant_proxy(secure_prometheus):
    url, home = secure_prometheus
    proxy = TenantProxy(url, str(home / "ca.crt"))
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield proxy
    proxy.shutdown()
    proxy.server_close()


def observe(**settings) -> Observations:
    client = Prometheus.from_settings(PrometheusSettings.model_validate({"timeout": 5, **settings}))
    return asyncio.run(client.observe([QUERY], STEP, time.time()))


def basic_auth(home: Path, password: str = "password") -> dict:
    return {"usernameFile": str(home / "user"), "passwordFile": str(home / password)}


def test_basic_auth_and_ca_file_get_answers(secure_prometheus):
    url, home = secure_prometheus
    observations = observe(url=url, basicAuth=basic_auth(home), caFile=str(home / "ca.crt"))
    assert observations.failures == {}
    assert list(observations.series[QUERY].values()) == [0.5]


def test_wrong_password_is_unauthorized_with_a_sentence(secure_prometheus):
    url, home = secure_prometheus
    observations = observe(url=url, basicAuth=basic_auth(home, "wrong-password"), caFile=str(home / "ca.crt"))
    failure = observations.failures[QUERY]
    assert failure.reason == "PrometheusUnauthorized"
    assert f"Prometheus at {url} refused the operator's credentials (HTTP 401" in failure.message
    assert "prometheus.basicAuth" in failure.message


def test_unknown_ca_is_a_tls_failure_naming_ca_file(secure_prometheus):
    url, home = secure_prometheus
    failure = observe(url=url, basicAuth=basic_auth(home)).failures[QUERY]
    assert failure.reason == "PrometheusUnavailable"
    assert failure.message.startswith(f"TLS with Prometheus at {url} failed (")
    assert "certificate verify failed" in failure.message and "prometheus.caFile" in failure.message


def test_skip_verify_reaches_a_self_signed_server(secure_prometheus):
    url, home = secure_prometheus
    observations = observe(url=url, basicAuth=basic_auth(home), insecureSkipVerify=True)
    assert observations.failures == {} and list(observations.series[QUERY].values()) == [0.5]


def test_missing_password_file_says_which(secure_prometheus):
    url, home = secure_prometheus
    failure = observe(url=url, basicAuth=basic_auth(home, "absent"), caFile=str(home / "ca.crt")).failures[
        QUERY
    ]
    assert failure.reason == "PrometheusUnauthorized"
    assert (
        failure.message
        == f"cannot read the Prometheus credentials file {home / 'absent'} (No such file or directory)"
    )


def test_rejected_query_reports_prometheus_error_type(secure_prometheus):
    url, home = secure_prometheus
    broken = Query(QueryWindow("sum(", 2, "fleet"), "min")
    client = Prometheus.from_settings(
        PrometheusSettings.model_validate(
            {"url": url, "basicAuth": basic_auth(home), "caFile": str(home / "ca.crt")}
        )
    )
    failure = asyncio.run(client.observe([broken], STEP, time.time())).failures[broken]
    assert failure.reason == "QueryFailed"
    assert failure.message.startswith("Prometheus answered HTTP 400 bad_data: ")
    assert "parse error" in failure.message


def test_tenant_header_reaches_the_proxy(secure_prometheus, tenant_proxy):
    _, home = secure_prometheus
    url = f"http://127.0.0.1:{tenant_proxy.server_address[1]}"
    tenant_proxy.tenants_seen.clear()
    observations = observe(url=url, basicAuth=basic_auth(home), headers={"X-Scope-OrgID": TENANT})
    assert observations.failures == {} and list(observations.series[QUERY].values()) == [0.5]
    assert tenant_proxy.tenants_seen == [TENANT]


def test_missing_tenant_is_unauthorized_with_the_proxy_text(secure_prometheus, tenant_proxy):
    _, home = secure_prometheus
    url = f"http://127.0.0.1:{tenant_proxy.server_address[1]}"
    failure = observe(url=url, basicAuth=basic_auth(home)).failures[QUERY]
    assert failure.reason == "PrometheusUnauthorized"
    assert "(HTTP 401: no org id)" in failure.message


def test_bearer_token_file_is_sent_and_reread(secure_prometheus, tenant_proxy, tmp_path):
    url = f"http://127.0.0.1:{tenant_proxy.server_address[1]}"
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    settings = {"url": url, "bearerTokenFile": str(token), "headers": {"X-Scope-OrgID": TENANT}}
    client = Prometheus.from_settings(PrometheusSettings.model_validate(settings))
    first = asyncio.run(client.observe([QUERY], STEP, time.time()))
    assert first.failures == {} and list(first.series[QUERY].values()) == [0.5]
    token.write_text("rotated-to-something-else")  # a rotated Secret applies on the next cycle
    failure = asyncio.run(client.observe([QUERY], STEP, time.time())).failures[QUERY]
    assert failure.reason == "PrometheusUnauthorized"
    assert "(HTTP 403 forbidden: token rejected)" in failure.message
    assert "prometheus.bearerTokenFile" in failure.message
