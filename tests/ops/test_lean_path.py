"""The agents' hot path (hikyaku/lean.py) answers exactly what Django answers.

`POST /`, `POST /a2a/` and `GET /api/v1/agents` are served in front of Django's handler by the
WSGI application and the ASGI dispatcher. Each request below is sent to the production WSGI
application and, with the same environ, to the Django handler that served it before
(hikyaku.wsgi's API middleware chain for the JSON-RPC calls, the full stack and DRF for the
list): the status, the body and every header but the per-request id must be the same, and
the request log and metrics must see the call alike.
"""

from __future__ import annotations

import io
import json
import logging

import pytest

from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _environ(path: str, body: bytes, headers: dict) -> dict:
    return {
        "REQUEST_METHOD": "POST",
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
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()},
    }


def _call(app, path: str, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = response_headers

    out = b"".join(app(_environ(path, body, headers), start_response))
    merged: dict[str, list[str]] = {}
    for name, value in captured["headers"]:
        merged.setdefault(name.lower(), []).append(value)
    return captured["status"], merged, out


def _both(path: str, body: bytes, headers: dict) -> tuple[tuple, tuple]:
    from hikyaku.wsgi import api_handler, application

    lean = _call(application, path, body, headers)
    django = _call(api_handler(), path, body, headers)
    return lean, django


@pytest.fixture
def pair(tenant, settings):
    settings.ALLOWED_HOSTS = ["localhost"]
    return factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")


def _rpc(method: str, params: dict, request_id=1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    ).encode()


def _send(to: str, message_id: str = "lean-1") -> bytes:
    message = {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": [{"text": "über the hot path"}, {"data": {"n": 1, "big": 10**30}}],
        "metadata": {"destination": to},
    }
    return _rpc("SendMessage", {"message": message})


def _cases(alice, bob):
    token = {"Authorization": f"Bearer {alice.token}"}
    v1 = {**token, "A2A-Version": "1.0"}
    return [
        ("/a2a/", _send(bob.id), v1),
        ("/", _send(bob.id, "lean-0.3"), token),
        (
            "/a2a/",
            _rpc("ListTasks", {"status": "unread"}),
            {"Authorization": f"Bearer {bob.token}", "A2A-Version": "1.0"},
        ),
        ("/a2a/", _rpc("GetTask", {"id": "00000000-0000-0000-0000-000000000000"}), v1),
        ("/a2a/", _rpc("NoSuchMethod", {}), v1),
        ("/a2a/", b"{not json", v1),
        ("/a2a/", _rpc("GetTask", {"id": "x"}), {"Authorization": "Bearer hka_wrong"}),
        ("/a2a/", _rpc("GetTask", {"id": "x"}), {**token, "A2A-Version": "9.0"}),
        ("/a2a/", _rpc("SendMessage", {"message": {"parts": []}}), v1),
    ]


def test_every_answer_equals_the_django_chains(pair):
    """Byte for byte. Both sends are made once first, so each chain answers them as a replay
    read back from the database: a fresh answer and its replay are equal as JSON, not as bytes,
    since Postgres's jsonb keeps an object's keys in an order of its own."""
    from hikyaku.wsgi import application

    alice, bob = pair
    cases = _cases(alice, bob)
    for path, body, headers in cases[:2]:
        fresh = _call(application, path, body, headers)
        (lean_status, _, lean_body), (status, _, django_body) = _both(path, body, headers)
        assert fresh[0] == lean_status == status == 200
        assert json.loads(fresh[2]) == json.loads(lean_body) == json.loads(django_body)
    for path, body, headers in cases:
        (lean_status, lean_headers, lean_body), (status, django_headers, django_body) = _both(
            path, body, headers
        )
        assert (lean_status, json.loads(lean_body)) == (status, json.loads(django_body)), body
        assert lean_body == django_body
        for name in ("x-request-id", "content-length"):
            lean_headers.pop(name), django_headers.pop(name, None)
        assert lean_headers == django_headers, body


def test_the_hot_path_keeps_the_callers_request_id_and_logs_and_counts_the_call(pair, caplog):
    from hikyaku import metrics
    from hikyaku.wsgi import application

    alice, bob = pair
    before = metrics.REQUESTS.labels(route="a2a", method="POST", status="200")._value.get()
    with caplog.at_level(logging.INFO, logger="hikyaku.request"):
        status, headers, body = _call(
            application,
            "/a2a/",
            _send(bob.id, "logged"),
            {
                "Authorization": f"Bearer {alice.token}",
                "A2A-Version": "1.0",
                "X-Request-Id": "abc-123",
            },
        )
    assert status == 200 and headers["x-request-id"] == ["abc-123"]
    (line,) = [r for r in caplog.records if r.name == "hikyaku.request"]
    assert line.getMessage().startswith("POST /a2a/ 200")
    assert (line.request_id, line.route, line.rpc_method) == ("abc-123", "a2a", "SendMessage")
    assert (line.tenant_id, line.agent_id) == (str(alice.model.tenant_id), alice.id)
    assert (
        metrics.REQUESTS.labels(route="a2a", method="POST", status="200")._value.get() == before + 1
    )


def test_what_the_hot_path_leaves_to_django_still_works(pair, settings):
    """An oversized body, a streaming method and a GET are Django's to answer."""
    from hikyaku.wsgi import application

    alice, bob = pair
    status, _, _ = _call(
        application, "/a2a/", b"{" + b" " * settings.HIKYAKU_MAX_BODY_BYTES + b"}", {}
    )
    assert status == 413
    settings.SECURE_HSTS_SECONDS = 3600  # a setting the hot path does not reproduce
    status, headers, body = _call(
        application,
        "/a2a/",
        _send(bob.id, "hsts"),
        {"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
    )
    assert status == 200 and json.loads(body)["result"]["task"]["id"]


@pytest.fixture
def max_age():
    """Sets the test connection's CONN_MAX_AGE, which applies from its next connect."""
    from django.db import connection

    saved = connection.settings_dict["CONN_MAX_AGE"]

    def reconnect_with(seconds: int) -> None:
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = seconds
        connection.ensure_connection()

    yield reconnect_with
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = saved


def test_the_hot_path_keeps_or_closes_its_connection_by_conn_max_age(pair, max_age):
    """As Django's handler does between requests: a request made within CONN_MAX_AGE reuses
    the connection; with CONN_MAX_AGE=0 the connection is closed when the request ends."""
    from django.db import connection

    from hikyaku.wsgi import application

    _, bob = pair
    headers = {"Authorization": f"Bearer {bob.token}", "A2A-Version": "1.0"}
    body = _rpc("ListTasks", {"status": "unread"})
    max_age(600)
    kept = connection.connection
    for _ in range(2):
        assert _call(application, "/a2a/", body, headers)[0] == 200
        assert connection.connection is kept
    max_age(0)
    assert _call(application, "/a2a/", body, headers)[0] == 200
    assert connection.connection is None


def test_a_receiver_of_the_request_signals_hears_every_hot_path_request(pair):
    """The hot path does what Django's own receivers of request_started and request_finished
    do without dispatching the signals (hikyaku/lean.py); any other receiver still hears
    each request begin and end, in that order."""
    from django.core import signals

    from hikyaku import lean
    from hikyaku.wsgi import application

    def direct() -> bool:
        return lean._only_djangos(signals.request_started) and lean._only_djangos(
            signals.request_finished
        )

    # With the broker's apps loaded only Django's receivers listen, so the cheap way is taken.
    assert direct()

    _, bob = pair
    heard = []

    def started(sender, **kwargs):
        heard.append("started")

    def finished(sender, **kwargs):
        heard.append("finished")

    headers = {"Authorization": f"Bearer {bob.token}", "A2A-Version": "1.0"}
    body = _rpc("ListTasks", {"status": "unread"})
    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    assert not direct()
    try:
        for _ in range(2):
            assert _call(application, "/a2a/", body, headers)[0] == 200
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert heard == ["started", "finished"] * 2
    assert direct()
    assert _call(application, "/a2a/", body, headers)[0] == 200
    assert heard == ["started", "finished"] * 2


# The agent list (GET /api/v1/agents) -----------------------------------------------------


def _get(app, path: str, query: str, headers: dict) -> tuple[int, dict, bytes]:
    environ = _environ(path, b"", headers)
    environ.update(REQUEST_METHOD="GET", QUERY_STRING=query, CONTENT_LENGTH="")
    del environ["CONTENT_TYPE"]
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = response_headers

    out = b"".join(app(environ, start_response))
    merged: dict[str, list[str]] = {}
    for name, value in captured["headers"]:
        merged.setdefault(name.lower(), []).append(value)
    return captured["status"], merged, out


def test_the_agent_list_answers_exactly_what_djangos_full_stack_answers(pair, tenant):
    """Each call goes to the production WSGI application and to the handler that served the
    list before, Django's full middleware stack and the DRF view: status, body and every header
    but the request id must be the same."""
    from django.core.signals import request_started
    from django.core.wsgi import get_wsgi_application

    from hikyaku.wsgi import application

    alice, bob = pair
    factories.agent(tenant, name="carol_%")
    factories.agent(tenant, name="zoë")
    token = {"Authorization": f"Bearer {alice.token}"}
    key = {"Authorization": f"Bearer {factories.api_key(tenant)}", "X-Agent-Id": bob.id}
    site = get_wsgi_application()
    for headers in (token, key):  # each identity's last_seen_at is written by its first call
        assert _get(application, "/api/v1/agents", "", headers)[0] == 200
    first_page = json.loads(_get(site, "/api/v1/agents", "limit=1", token)[2])
    assert first_page["next_cursor"]
    cases = [
        ("", token),
        ("limit=1", token),
        (f"limit=1&cursor={first_page['next_cursor']}", token),
        ("q=CAROL_%25", token),
        ("q=%20bo%20&limit=2&unknown=1", token),
        ("q=" + "oë".encode().decode("latin-1"), token),  # as a WSGI server passes raw UTF-8
        ("", key),
        ("limit=abc", token),
        ("limit=0&limit=501", token),
        ("cursor=garbage", token),
        ("", {"Authorization": "Bearer hka_wrong"}),
        ("", {}),
        ("", {**token, "Host": "elsewhere.example"}),
    ]
    senders = []

    def heard(sender, **kwargs):
        senders.append(sender)

    for query, headers in cases:
        request_started.connect(heard)
        try:
            lean = _get(application, "/api/v1/agents", query, headers)
        finally:
            request_started.disconnect(heard)
        django = _get(site, "/api/v1/agents", query, headers)
        assert (lean[0], lean[2]) == (django[0], django[2]), (query, headers)
        for answer in (lean, django):
            answer[1].pop("x-request-id")
        assert lean[1] == django[1], (query, headers)
    # Every call above but the one with a Host Django refuses was answered in front of Django.
    assert senders[-1] != "hikyaku.lean"
    assert senders[:-1] == ["hikyaku.lean"] * (len(cases) - 1)


def test_the_agent_list_is_logged_and_counted_as_djangos_answer_would_be(pair, caplog):
    from hikyaku import metrics
    from hikyaku.wsgi import application

    alice, _ = pair
    counter = metrics.REQUESTS.labels(route="api-agents", method="GET", status="200")
    before = counter._value.get()
    with caplog.at_level(logging.INFO, logger="hikyaku.request"):
        status, _, _ = _get(
            application,
            "/api/v1/agents",
            "limit=5",
            {"Authorization": f"Bearer {alice.token}", "X-Request-Id": "list-1"},
        )
    assert status == 200
    (line,) = [r for r in caplog.records if r.name == "hikyaku.request"]
    assert line.getMessage().startswith("GET /api/v1/agents 200")
    assert (line.request_id, line.route) == ("list-1", "api-agents")
    assert (str(line.tenant_id), str(line.agent_id)) == (str(alice.model.tenant_id), alice.id)
    assert counter._value.get() == before + 1


def test_the_embedded_server_answers_the_agent_list_as_django_does(broker, pair):
    """`make run`'s server (the ASGI dispatcher) answers the list on its hot-path threads: the
    same status, body and `Allow` as Django's full stack and the DRF view."""
    import httpx
    from django.test import Client

    alice, _ = pair
    headers = {"Authorization": f"Bearer {alice.token}"}
    assert httpx.get(f"{broker.url}/api/v1/agents", headers=headers, timeout=30).is_success
    for query in ("?limit=1", "?limit=abc"):
        live = httpx.get(f"{broker.url}/api/v1/agents{query}", headers=headers, timeout=30)
        django = Client().get(f"/api/v1/agents{query}", headers=headers, HTTP_HOST="localhost")
        assert (live.status_code, live.content) == (django.status_code, django.content)
        assert live.headers["allow"] == django.headers["Allow"] == "GET, POST, HEAD, OPTIONS"
