"""/metrics: what it counts, who may read it, and multiprocess aggregation."""

import json
import os
import subprocess
import sys
import textwrap

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from hikyaku import metrics
from tests.ops.processes import REPO, free_port

pytestmark = pytest.mark.django_db


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def exposition(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_requests_are_counted_by_route_name_method_and_status(client, agent_client, agent):
    labels = {"route": "api-agent", "method": "GET", "status": "200"}
    before = sample("hikyaku_http_requests_total", **labels)
    histogram_before = sample("hikyaku_http_request_duration_seconds_count", route="api-agent")
    assert agent_client.get(f"/api/v1/agents/{agent.id}").status_code == 200
    assert agent_client.get(f"/api/v1/agents/{agent.id}").status_code == 200
    assert sample("hikyaku_http_requests_total", **labels) == before + 2
    assert (
        sample("hikyaku_http_request_duration_seconds_count", route="api-agent")
        == histogram_before + 2
    )


def test_unknown_urls_share_one_series_instead_of_one_per_path(client):
    before = sample("hikyaku_http_requests_total", route="unmatched", method="GET", status="404")
    client.get("/no/such/path/1")
    client.get("/no/such/path/2")
    after = sample("hikyaku_http_requests_total", route="unmatched", method="GET", status="404")
    assert after == before + 2
    assert "/no/such" not in metrics.render().decode()


def test_a_middleware_answer_is_labelled_with_the_route_it_was_for(client, settings):
    settings.HIKYAKU_MAX_BODY_BYTES = 10
    before = sample("hikyaku_http_requests_total", route="api-agents", method="POST", status="413")
    response = client.post("/api/v1/agents", "x" * 100, content_type="application/json")
    assert response.status_code == 413
    after = sample("hikyaku_http_requests_total", route="api-agents", method="POST", status="413")
    assert after == before + 1


def test_unusual_methods_are_folded_into_other(client):
    before = sample("hikyaku_http_requests_total", route="healthz", method="OTHER", status="200")
    client.generic("PROPFIND", "/healthz")
    assert (
        sample("hikyaku_http_requests_total", route="healthz", method="OTHER", status="200")
        == before + 1
    )


def test_metrics_lists_every_domain_metric_for_other_modules(client):
    metrics.SEND_MESSAGES.labels(type="unicast").inc()
    metrics.DELIVERIES.inc(3)
    metrics.EVENTS_WRITTEN.inc()
    metrics.TASK_TRANSITIONS.labels(kind="complete").inc()
    metrics.DOORBELLS.labels(outcome="rung").inc()
    metrics.WEBHOOK_ATTEMPTS.labels(outcome="delivered").inc()
    with metrics.STREAM_CONNECTIONS.labels(surface="subscribe").track_inprogress():
        text = client.get("/metrics").content.decode()
    families = {family.name for family in text_string_to_metric_families(text)}
    assert {
        "hikyaku_http_requests",
        "hikyaku_http_request_duration_seconds",
        "hikyaku_send_messages",
        "hikyaku_deliveries",
        "hikyaku_events_written",
        "hikyaku_task_transitions",
        "hikyaku_stream_connections",
        "hikyaku_doorbells",
        "hikyaku_webhook_attempts",
    } <= families
    assert exposition(text)[("hikyaku_stream_connections", (("surface", "subscribe"),))] >= 1


def test_messaging_counts_sends_deliveries_events_and_transitions(
    agent, peer, tenant, django_capture_on_commit_callbacks
):
    from tests import factories
    from tests.messaging.rpc import act, send

    factories.agent(tenant, name="carol")
    before = {
        "unicast": sample("hikyaku_send_messages_total", type="unicast"),
        "broadcast": sample("hikyaku_send_messages_total", type="broadcast"),
        "deliveries": sample("hikyaku_deliveries_total"),
        "events": sample("hikyaku_events_written_total"),
        "accept": sample("hikyaku_task_transitions_total", kind="accept"),
        "complete": sample("hikyaku_task_transitions_total", kind="complete"),
    }
    with django_capture_on_commit_callbacks(execute=True):
        task = send(agent, peer.id, "build it")
        act(peer, task["id"], "accept")
        act(peer, task["id"], "complete", "done")
        send(agent, "*", "standup")  # to peer and carol
    assert sample("hikyaku_send_messages_total", type="unicast") == before["unicast"] + 1
    assert sample("hikyaku_send_messages_total", type="broadcast") == before["broadcast"] + 1
    assert sample("hikyaku_deliveries_total") == before["deliveries"] + 3
    # created + accept + complete, then two deliveries and the broadcast summary.
    assert sample("hikyaku_events_written_total") == before["events"] + 6
    assert sample("hikyaku_task_transitions_total", kind="accept") == before["accept"] + 1
    assert sample("hikyaku_task_transitions_total", kind="complete") == before["complete"] + 1


def test_events_count_only_when_their_transaction_commits():
    before = sample("hikyaku_events_written_total")
    from django.db import transaction

    with pytest.raises(RuntimeError):
        with transaction.atomic():
            metrics.events_written(5)
            raise RuntimeError("rolled back")
    assert sample("hikyaku_events_written_total") == before


def test_the_other_hooks(client):
    before = {
        "rung": sample("hikyaku_doorbells_total", outcome="rung"),
        "gave_up": sample("hikyaku_webhook_attempts_total", outcome="gave_up"),
    }
    metrics.doorbell("rung")
    metrics.webhook_attempt("gave_up")
    assert sample("hikyaku_doorbells_total", outcome="rung") == before["rung"] + 1
    assert sample("hikyaku_webhook_attempts_total", outcome="gave_up") == before["gave_up"] + 1
    open_before = sample("hikyaku_stream_connections", surface="mcp")
    with metrics.stream_open("mcp"):
        assert sample("hikyaku_stream_connections", surface="mcp") == open_before + 1
    assert sample("hikyaku_stream_connections", surface="mcp") == open_before


# --- Access ----------------------------------------------------------------------------------


def test_metrics_are_open_to_loopback(client):
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"hikyaku_http_requests_total" in response.content
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:127.0.0.1").status_code == 200


def test_metrics_look_like_any_unknown_url_to_everyone_else(client):
    denied = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    unknown = client.get("/no-such-thing", REMOTE_ADDR="203.0.113.9")
    assert denied.status_code == unknown.status_code == 404
    assert denied.json() == unknown.json()


def test_loopback_through_a_proxy_is_not_trusted(client):
    for header in ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP"):
        response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **{header: "203.0.113.9"})
        assert response.status_code == 404, header


def test_loopback_access_can_be_switched_off(client, settings):
    settings.HIKYAKU_METRICS_LOOPBACK = False
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404


def test_the_metrics_token_opens_metrics_from_anywhere(client, settings):
    settings.HIKYAKU_METRICS_TOKEN = "s3cret-scrape-token"
    remote = {"REMOTE_ADDR": "203.0.113.9", "HTTP_X_FORWARDED_FOR": "198.51.100.1"}
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token", **remote)
    assert ok.status_code == 200
    for wrong in ("Bearer s3cret-scrape-tokeN", "Bearer ", "Basic s3cret-scrape-token", ""):
        assert client.get("/metrics", HTTP_AUTHORIZATION=wrong, **remote).status_code == 404


def test_no_token_configured_means_no_bearer_access(client, settings):
    settings.HIKYAKU_METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 404


def test_allowed_ips_and_networks(client, settings):
    settings.HIKYAKU_METRICS_ALLOWED_IPS = ["10.1.2.3", "192.168.50.0/24", "2001:db8::/32"]
    for address in ("10.1.2.3", "192.168.50.77", "2001:db8::5"):
        assert client.get("/metrics", REMOTE_ADDR=address).status_code == 200, address
    for address in ("10.1.2.4", "192.168.51.1", "2001:db9::5", "not-an-ip"):
        assert client.get("/metrics", REMOTE_ADDR=address).status_code == 404, address


# --- Several processes -------------------------------------------------------------------------

MULTIPROCESS_CHILD = textwrap.dedent(
    """
    import sys, time
    from hikyaku import metrics
    metrics.SEND_MESSAGES.labels(type="broadcast").inc(int(sys.argv[1]))
    metrics.observe_request("api-agents", "GET", 200, 0.003)
    metrics.STREAM_CONNECTIONS.labels(surface="subscribe").inc()
    print("counted", flush=True)
    if sys.argv[2] == "linger":
        time.sleep(60)
    """
)


def test_multiprocess_mode_sums_every_process_and_forgets_dead_streams(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)

    def child(count: int, mode: str):
        return subprocess.Popen(
            [sys.executable, "-c", MULTIPROCESS_CHILD, str(count), mode],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )

    exited = child(2, "exit")
    assert exited.wait(60) == 0
    lingering = child(3, "linger")
    try:
        assert lingering.stdout.readline().strip() == "counted"
        reader = subprocess.run(
            [
                sys.executable,
                "-c",
                "from hikyaku import metrics; print(metrics.render().decode())",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        lingering.kill()
        lingering.wait()
    assert reader.returncode == 0, reader.stderr
    values = exposition(reader.stdout)
    assert values[("hikyaku_send_messages_total", (("type", "broadcast"),))] == 5
    key = (
        "hikyaku_http_requests_total",
        (("method", "GET"), ("route", "api-agents"), ("status", "200")),
    )
    assert values[key] == 2
    # The exited child's stream no longer counts as open; the lingering one's did.
    assert values[("hikyaku_stream_connections", (("surface", "subscribe"),))] == 1


def test_the_worker_exporter_serves_the_same_metrics_under_the_same_rule(settings):
    settings.HIKYAKU_METRICS_TOKEN = "worker-token"
    port = free_port()
    metrics.WEBHOOK_ATTEMPTS.labels(outcome="timeout").inc()
    server = metrics.start_worker_exporter(host="127.0.0.1", port=port)
    try:
        check_worker_exporter(port)
    finally:
        server.shutdown()
        server.server_close()


def check_worker_exporter(port: int) -> None:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    assert 'hikyaku_webhook_attempts_total{outcome="timeout"}' in response.text
    proxied = httpx.get(
        f"http://127.0.0.1:{port}/metrics", headers={"X-Forwarded-For": "203.0.113.9"}, timeout=5
    )
    assert proxied.status_code == 404
    assert json.loads(proxied.text)["error"]["code"] == "NOT_FOUND"
    with_token = httpx.get(
        f"http://127.0.0.1:{port}/metrics",
        headers={"X-Forwarded-For": "203.0.113.9", "Authorization": "Bearer worker-token"},
        timeout=5,
    )
    assert with_token.status_code == 200
