"""The production WSGI application (hikyaku/wsgi.py), called as a WSGI server calls it.

Agents' JSON-RPC calls take a short middleware chain. The middleware it leaves out has no
effect on them by design (that is why it can go), so what these tests hold it to is what
must survive: security headers, the body limit, the request log, no cookies. Everything
else must still get the full chain (sessions, CSRF)."""

import io
import json
import logging

import pytest
from django.conf import settings

from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def wsgi_call(method: str, path: str, body: bytes = b"", headers: dict | None = None):
    from hikyaku.wsgi import application

    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_HOST": "localhost",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "http",
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()},
    }
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = response_headers

    body_out = b"".join(application(environ, start_response))
    headers_out: dict[str, list[str]] = {}
    for name, value in captured["headers"]:
        headers_out.setdefault(name.lower(), []).append(value)
    return captured["status"], headers_out, body_out


@pytest.fixture
def allow_localhost(settings):
    settings.ALLOWED_HOSTS = ["localhost"]


def test_a_jsonrpc_call_keeps_its_security_headers_and_request_log_and_sets_no_cookie(
    tenant, allow_localhost, caplog
):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "wsgi-1",
                    "role": "ROLE_USER",
                    "parts": [{"text": "through the WSGI app"}],
                    "metadata": {"destination": bob.id},
                }
            },
        }
    ).encode()
    with caplog.at_level(logging.INFO, logger="hikyaku.request"):
        status, headers, out = wsgi_call(
            "POST", "/a2a/", body, {"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"}
        )
    assert status == 200, out
    assert json.loads(out)["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "frame-ancestors 'none'" in headers["content-security-policy"][0]
    assert headers["x-content-type-options"] == ["nosniff"]
    assert headers["x-frame-options"] == ["DENY"]
    assert headers["x-request-id"]
    assert "set-cookie" not in headers and "vary" not in headers  # no session, no CSRF
    # The request log line (its records: the handler's stream is whatever stderr was when the
    # first test imported hikyaku.wsgi, which configures logging).
    assert "POST /a2a/ 200" in [r.getMessage()[: len("POST /a2a/ 200")] for r in caplog.records]


def test_an_oversized_jsonrpc_body_is_still_refused(allow_localhost):
    body = b"{" + b" " * (settings.HIKYAKU_MAX_BODY_BYTES + 1) + b"}"
    status, _, out = wsgi_call("POST", "/", body)
    assert status == 413, out


def test_the_web_ui_still_gets_sessions_and_csrf(allow_localhost):
    status, headers, _ = wsgi_call("GET", "/accounts/login/", headers={"Accept": "text/html"})
    assert status == 200
    assert any(c.strip().startswith("csrftoken=") for c in headers.get("set-cookie", []))
    assert headers["x-frame-options"] == ["DENY"]
