"""The embedded default is safe to expose: debug off, a generated secret kept beside the SQLite
file, and every error in its surface's own shape (never Django's technical pages)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import httpx
import pytest
from django.test import RequestFactory

from hikyaku import error_pages
from tests.live import ROOT

SHOW_SETTINGS = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'hikyaku.settings'; django.setup();"
    "from django.conf import settings; print(settings.DEBUG, settings.SECRET_KEY)"
)


def settings_with(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HIKYAKU_"))}
    clean.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-c", SHOW_SETTINGS],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_debug_is_off_and_a_secret_is_generated_beside_the_sqlite_file(tmp_path):
    database = tmp_path / "broker.sqlite3"
    first = settings_with({"DATABASE_URL": f"sqlite:///{database}"})
    assert first.returncode == 0, first.stderr
    debug, key = first.stdout.split()
    assert debug == "False" and len(key) >= 50
    key_file = tmp_path / "hikyaku.secret_key"
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = settings_with({"DATABASE_URL": f"sqlite:///{database}"})
    assert again.stdout.split()[1] == key  # kept: sessions survive a restart
    assert list(tmp_path.iterdir()) == [key_file]  # no scratch file left behind


def test_debug_is_only_on_when_asked_and_the_old_dev_key_is_refused(tmp_path):
    database = f"sqlite:///{tmp_path / 'x.sqlite3'}"
    assert settings_with({"DATABASE_URL": database, "DJANGO_DEBUG": "true"}).stdout.startswith(
        "True "
    )
    old = settings_with(
        {"DATABASE_URL": database, "DJANGO_SECRET_KEY": "dev-insecure-hikyaku-secret-key-change-me"}
    )
    assert old.returncode != 0 and "DJANGO_SECRET_KEY" in old.stderr


@pytest.fixture(scope="module")
def safe_broker(django_db_setup, django_db_blocker):
    """A broker as `make run` serves it: no DJANGO_DEBUG in its environment."""
    from tests.live import BrokerProcess

    env = {"DJANGO_DEBUG": "", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    server = BrokerProcess(env=env).start()
    yield server
    server.stop()


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/api/v1/agents/"),  # a trailing slash the routes do not have
        ("GET", "/api/v1/nope"),
        ("DELETE", "/api/schema/"),
        ("GET", "/nope"),
        ("GET", "/metrics"),  # strangers get exactly an unknown URL's answer
    ],
)
def test_rest_surfaces_answer_errors_with_the_envelope(safe_broker, method, path):
    headers = {"X-Forwarded-For": "203.0.113.9"} if path == "/metrics" else {}
    response = httpx.request(method, safe_broker.url + path, headers=headers, timeout=30)
    assert response.status_code in (404, 405)
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] in ("NOT_FOUND", "METHOD_NOT_ALLOWED") and error["message"]
    assert "Traceback" not in response.text and "urlpatterns" not in response.text


@pytest.mark.parametrize("method, path", [("GET", "/a2a/nope"), ("PUT", "/a2a/"), ("GET", "/a2a/")])
def test_a2a_answers_errors_with_a_json_rpc_error_object(safe_broker, method, path):
    response = httpx.request(method, safe_broker.url + path, timeout=30)
    assert response.status_code in (404, 405)
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32600 and body["error"]["message"]


@pytest.mark.parametrize("path", ["/ui/nope/", "/accounts/nope/", "/nope"])
def test_people_get_the_projects_own_404_page(safe_broker, path):
    response = httpx.get(safe_broker.url + path, headers={"Accept": "text/html"}, timeout=30)
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in response.text and "hikyaku.css" in response.text
    assert "Django" not in response.text and "DEBUG" not in response.text


@pytest.mark.parametrize(
    "path, expect",
    [
        ("/ui/t/acme/", "<h1>Something went wrong</h1>"),
        ("/api/v1/agents", '"code": "INTERNAL"'),
        ("/a2a/", '"code": -32603'),
    ],
)
def test_a_server_error_is_the_surfaces_own_500(path, expect):
    response = error_pages.server_error(RequestFactory().get(path))
    assert response.status_code == 500
    assert expect in response.content.decode()
