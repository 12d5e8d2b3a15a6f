"""/api/docs/ works offline: Swagger UI from the installed package, every request that does not
go to the server blocked, and the A2A JSON-RPC methods (the core API) documented there."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from messaging.a2a.methods import METHODS
from messaging.a2a.openapi import METHOD_DOCS

pytestmark = pytest.mark.browser


def test_api_docs_render_with_the_network_beyond_the_server_blocked(browser_session):
    ui, page = browser_session, browser_session.page
    server = urlsplit(ui.base_url).netloc
    blocked: list[str] = []

    def only_the_server(route):
        if urlsplit(route.request.url).netloc == server:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_the_server)
    page.goto("/api/docs/")
    # Swagger UI booted (from our own static files) and rendered the operations.
    expect(page.locator(".opblock").first).to_be_visible(timeout=20_000)
    assert page.locator(".opblock").count() >= 20
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/agents").first).to_be_visible()
    # The JSON-RPC methods, each its own operation under the A2A JSON-RPC tag.
    for name in ("SendMessage", "ListTasks", "GetTask", "CancelTask", "SubscribeToTask"):
        expect(page.locator(".opblock-summary", has_text=f"{name}:").first).to_be_visible()
    page.locator(".opblock-summary", has_text="SendMessage:").first.click()
    expect(page.get_by_text("metadata.destination", exact=False).first).to_be_visible()
    ui.shot("11-api-docs")
    assert blocked == []  # nothing even tried to leave the server
    ui.assert_no_console_errors()  # no CSP violation, no missing script


@pytest.mark.django_db
def test_every_json_rpc_method_is_in_the_openapi_document(client):
    paths = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    documented = {path.removeprefix("/a2a/#") for path in paths if path.startswith("/a2a/#")}
    one_point_oh = {name for name in METHODS if "/" not in name}
    assert one_point_oh <= documented and set(METHOD_DOCS) == documented
    send = paths["/a2a/#SendMessage"]["post"]
    assert send["requestBody"]["content"]["application/json"]["schema"]["properties"]["method"] == {
        "type": "string",
        "enum": ["SendMessage"],
    }
    assert {"200", "401"} <= set(send["responses"])


@pytest.mark.django_db
def test_the_docs_page_loads_nothing_from_elsewhere(client):
    page = client.get("/api/docs/")
    html = page.content.decode()
    assert (
        page.status_code == 200
        and "cdn" not in html.lower()
        and "http" not in html.replace("http-equiv", "")
    )
    policy = page["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "cdn" not in policy
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()
