"""No request can freeze a web process: long-held calls in the production topology.

`make cluster` (scripts/cluster.py) runs the topology: nginx with deploy/nginx.conf in front of
two granian WSGI web processes of 4 threads each and one uvicorn stream process, plus a
Celery worker and beat, on the test database and a private Redis. Long-held calls — streams,
and blocking sends on an agent's endpoint — must never occupy a web thread: nginx sends them
to the stream tier, or the web tier answers 421 and nginx hands the same request over
(messaging/stream/handoff.py); the stream process holds them without a thread each.

- the repros of the adversarial probe, on the tier where they were found: each must leave
  both web processes answering at once;
- the reliability scenarios: while 50 streaming and blocking requests (or 20 anonymous
  blocking sends to a published agent) are held open, other tenants' REST and JSON-RPC calls
  keep p99 <= 200 ms and /readyz answers; then every held request is released by its agent's
  answer and ends as it should, and every message was delivered exactly once. Each records
  its figures, with a baseline taken just before with nothing held.
"""

from __future__ import annotations

import http.client
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.db import connection

from agents import services as agent_services
from messaging.models import Task
from tests import factories, live
from tests.live import SSEClient
from tests.ops.processes import REPO, base_env, free_ports
from tests.reliability.harness import PrivateRedis, record

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(NGINX is None, reason="needs nginx (apt-get install nginx)"),
    pytest.mark.skipif(not PrivateRedis.available(), reason="needs redis-server"),
]

P99_LIMIT = 0.2  # seconds, for other tenants' calls while requests are held
FAST = 1.0  # seconds: "answered at once" (the repros timed out after 8 s)
V1 = {"A2A-Version": "1.0"}


@dataclass
class Cluster:
    proxy: str
    webs: list[str]
    stream: str


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Cluster]:
    redis = PrivateRedis().start()
    proxy, web1, web2, stream = free_ports(4)
    env = base_env(
        CLUSTER_DIR=str(tmp_path_factory.mktemp("cluster")),
        CLUSTER_PROXY_PORT=str(proxy),
        CLUSTER_NGINX=NGINX,
        CLUSTER_WEB_PORTS=f"{web1},{web2}",
        CLUSTER_STREAM_PORT=str(stream),
        DATABASE_URL=live.suite_database_url(),
        REDIS_URL=redis.url,
        CELERY_BROKER_URL=redis.url,
        # Longer than any scenario, so a held send is held until its agent answers.
        HIKYAKU_BLOCKING_TIMEOUT_SECONDS="120",
        HIKYAKU_LOG_FORMAT="text",
    )

    def cluster_command(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "scripts/cluster.py", command],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip

    try:
        started = cluster_command("start")
        assert started.returncode == 0, started.stdout + started.stderr
        yield Cluster(
            proxy=f"http://127.0.0.1:{proxy}",
            webs=[f"http://127.0.0.1:{web1}", f"http://127.0.0.1:{web2}"],
            stream=f"http://127.0.0.1:{stream}",
        )
    finally:
        cluster_command("stop")
        redis.kill()


# Requests ---------------------------------------------------------------------------------


def envelope(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex[:8], "method": method, "params": params}


def say(text: str, **fields) -> dict:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **fields}


def bearer(agent: factories.TestAgent) -> dict[str, str]:
    return {"Authorization": f"Bearer {agent.token}", **V1}


def rpc(base: str, agent: factories.TestAgent, method: str, params: dict) -> dict:
    response = httpx.post(f"{base}/a2a/", json=envelope(method, params), headers=bearer(agent))
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return body["result"]


def send(base: str, sender: factories.TestAgent, to: factories.TestAgent, text: str) -> str:
    message = say(text, metadata={"destination": to.id})
    return rpc(base, sender, "SendMessage", {"message": message})["task"]["id"]


def act(base: str, agent: factories.TestAgent, task_id: str, action: str, text: str) -> None:
    message = say(text, taskId=task_id, metadata={"action": action})
    rpc(base, agent, "SendMessage", {"message": message})


class BlockingSend:
    """A blocking SendMessage to an agent's endpoint, held in a thread until it answers."""

    def __init__(self, url: str, text: str, caller: factories.TestAgent | None) -> None:
        self.text = text
        self.body = envelope("SendMessage", {"message": say(text)})
        self.headers = bearer(caller) if caller else V1
        self.url = url
        self.response: httpx.Response | None = None
        self.error: Exception | None = None
        self.answered_at: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.response = httpx.post(self.url, json=self.body, headers=self.headers, timeout=150)
        except Exception as exc:  # reported by result()
            self.error = exc
        self.answered_at = time.monotonic()

    def answer(self) -> str:
        """What the send was answered, for a failure's message."""
        if self.error is not None:
            return f"{self.text}: {self.error!r}"
        return f"{self.text}: {self.response.status_code} {self.response.text[:300]}"

    def result(self, timeout: float) -> dict:
        self.thread.join(timeout)
        assert self.answered_at is not None, f"{self.text}: no answer in {timeout}s"
        assert self.error is None, self.error
        assert self.response.status_code == 200, self.response.text
        return self.response.json()["result"]


def stored(sends: list[BlockingSend], timeout: float = 30) -> dict[str, Task]:
    """The task each held send was delivered as, once all are stored; exactly one each. A send
    that is answered instead (an error, say) fails the test at once with what it answered."""
    texts = [s.text for s in sends]
    deadline = time.monotonic() + timeout
    while True:
        tasks = list(Task.objects.filter(message__parts__0__text__in=texts))
        answered = [s for s in sends if s.answered_at is not None]
        if len(tasks) >= len(texts) or answered or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    found = [t.message["parts"][0]["text"] for t in tasks]
    assert sorted(found) == sorted(texts) and not answered, (
        f"stored {len(found)} of {len(texts)} in {timeout}s; "
        f"missing {sorted(set(texts) - set(found))}; "
        f"answered before their agent did: {[s.answer() for s in answered]}"
    )
    return {t.message["parts"][0]["text"]: t for t in tasks}


def opened(client: SSEClient, first_event: str = "message") -> SSEClient:
    assert client.status == 200 and "text/event-stream" in client.headers["content-type"], (
        client.status,
        client.body,
    )
    assert client.next(timeout=10).event == first_event
    return client


def subscribe_to_task(base: str, agent: factories.TestAgent, task_id: str) -> SSEClient:
    """SubscribeToTask as the probe sent it: agent token, no Accept header."""
    return SSEClient(
        f"{base}/a2a/",
        method="POST",
        headers=bearer(agent),
        json_body=envelope("SubscribeToTask", {"id": task_id}),
    )


def answered_at_once(base: str, path: str, **kwargs) -> httpx.Response:
    started = time.monotonic()
    response = httpx.get(f"{base}{path}", timeout=8, **kwargs)
    assert time.monotonic() - started < FAST, f"{base}{path} took {time.monotonic() - started}s"
    return response


def web_tier_answers(cluster: Cluster, other: factories.TestAgent) -> None:
    """Both web processes, and the proxy in front of them, serve other requests at once."""
    for base in (cluster.proxy, *cluster.webs, cluster.proxy):
        assert answered_at_once(base, "/healthz").status_code == 200
        agents = answered_at_once(base, "/api/v1/agents", headers=bearer(other))
        assert agents.status_code == 200 and agents.json()["agents"][0]["name"] == other.model.name


# The probe's repros ----------------------------------------------------------------------


def test_subscribe_to_task_without_accept_is_streamed_by_the_stream_tier(cluster, tenant):
    """Repro: 4x POST /a2a/ SubscribeToTask (agent token, no Accept header) took a web
    process's 4 threads; /healthz and another tenant's calls then timed out after 8 s."""
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    other = factories.agent(factories.tenant("globex"), name="mallory")
    task_id = send(cluster.proxy, alice, bob, "a live task")
    streams = [opened(subscribe_to_task(cluster.proxy, alice, task_id)) for _ in range(10)]
    try:
        web_tier_answers(cluster, other)
        for web in cluster.webs:  # a web process itself answers at once, and holds nothing
            refused = httpx.post(
                f"{web}/a2a/", json=envelope("SubscribeToTask", {"id": task_id}), timeout=FAST
            )
            assert refused.status_code == 421 and refused.json()["error"]["code"] == -32004
        act(cluster.proxy, bob, task_id, "complete", "done")
        for stream in streams:
            assert stream.closed.wait(10)
            states = [e.json()["result"] for e in stream.drain(0.2)]
            assert states[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        for stream in streams:
            stream.close()


def test_blocking_sends_to_an_agent_hold_no_web_thread(cluster, tenant):
    """Repro: 4 concurrent blocking sends to /a2a/agents/<id>/ held a web process for 25 s."""
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    other = factories.agent(factories.tenant("globex"), name="mallory")
    url = f"{cluster.proxy}/a2a/agents/{bob.id}/"
    sends = [BlockingSend(url, f"blocking {n}", alice) for n in range(10)]
    tasks = stored(sends)
    web_tier_answers(cluster, other)
    assert all(s.answered_at is None for s in sends)
    for web in cluster.webs:  # straight to a web process: refused before anything is written
        body = envelope("SendMessage", {"message": say("direct")})
        refused = httpx.post(f"{web}/a2a/agents/{bob.id}/", json=body, headers=bearer(alice))
        assert refused.status_code == 421 and refused.elapsed.total_seconds() < FAST
    released = time.monotonic()
    for text, task in tasks.items():
        act(cluster.proxy, bob, str(task.id), "complete", f"re: {text}")
    for send_ in sends:
        result = send_.result(timeout=10)["task"]
        assert result["status"]["state"] == "TASK_STATE_COMPLETED"
        assert result["artifacts"][0]["parts"] == [{"text": f"re: {send_.text}"}]
        assert send_.answered_at - released < 5
    assert not Task.objects.filter(message__parts__0__text="direct").exists()


def test_anonymous_blocking_sends_to_a_published_agent_leave_both_web_ports_up(cluster, tenant):
    """Repro: once an agent is published, 8 anonymous blocking sends took both web ports
    down (and ~19 a minute, under the anonymous limit, kept them down)."""
    bob = factories.agent(tenant, name="bob")
    agent_services.set_agent_public(agent=bob.model, public=True)
    other = factories.agent(factories.tenant("globex"), name="mallory")
    url = f"{cluster.proxy}/a2a/agents/{bob.id}/"
    sends = [BlockingSend(url, f"anonymous {n}", None) for n in range(10)]
    tasks = stored(sends)
    web_tier_answers(cluster, other)
    assert all(s.answered_at is None for s in sends)
    for task in tasks.values():
        act(cluster.proxy, bob, str(task.id), "reject", "not today")
    for send_ in sends:
        assert send_.result(timeout=10)["task"]["status"]["state"] == "TASK_STATE_REJECTED"


def test_subscribe_sent_to_a_web_port_is_refused_at_once(cluster, tenant):
    """Repro: GET /api/v1/subscribe sent to a web port held one of its threads."""
    alice = factories.agent(tenant, name="alice")
    other = factories.agent(factories.tenant("globex"), name="mallory")
    for web in cluster.webs:
        for _ in range(10):
            refused = answered_at_once(web, "/api/v1/subscribe", headers=bearer(alice))
            assert refused.status_code == 421
            assert refused.json()["error"]["code"] == "STREAM_TIER_ONLY"
    web_tier_answers(cluster, other)
    # Through the proxy it is the stream it always was.
    inbox = opened(SSEClient(f"{cluster.proxy}/api/v1/subscribe", headers=bearer(alice)), "ready")
    inbox.close()


# The reliability scenarios ----------------------------------------------------------------


@dataclass
class Probe:
    """Other tenants' calls through the proxy while requests are held: REST, JSON-RPC and
    /readyz in turn, a few dozen a second, each one timed."""

    base: str
    pairs: list[tuple[factories.TestAgent, factories.TestAgent]]
    seconds: float
    timings: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def run(self) -> Probe:
        threads = [threading.Thread(target=self._client, args=pair) for pair in self.pairs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.seconds + 60)
        return self

    def _client(self, me: factories.TestAgent, peer: factories.TestAgent) -> None:
        # http.client on one keep-alive connection: an httpx request costs the client ~5 ms
        # of CPU here, which would be measured as the server's latency on a busy machine.
        calls = [
            ("rest", "GET", "/api/v1/agents", None),
            ("send", "POST", "/a2a/", lambda: envelope(
                "SendMessage", {"message": say("probe", metadata={"destination": peer.id})}
            )),
            ("list", "POST", "/a2a/", lambda: envelope(
                "ListTasks", {"contextId": me.id, "pageSize": 5}
            )),
            ("readyz", "GET", "/readyz", None),
        ]  # fmt: skip
        parts = urlsplit(self.base)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        headers = {**bearer(me), "Content-Type": "application/json"}
        deadline = time.monotonic() + self.seconds
        try:
            while time.monotonic() < deadline:
                for kind, method, path, body in calls:
                    payload = json.dumps(body()).encode() if body else None
                    started = time.perf_counter()
                    try:
                        conn.request(method, path, body=payload, headers=headers)
                        response = conn.getresponse()
                        data = response.read()
                        elapsed = time.perf_counter() - started
                        ok = response.status == 200 and b'"error"' not in data
                        outcome = f"{response.status} {data[:200]!r}"
                    except (OSError, http.client.HTTPException) as exc:
                        elapsed, ok, outcome = time.perf_counter() - started, False, repr(exc)
                        conn.close()  # the next request reconnects
                    self.timings.setdefault(kind, []).append(elapsed)
                    if not ok:
                        self.failures.append(f"{kind} {path}: {outcome}")
                    time.sleep(0.05)
        finally:
            conn.close()

    def calls(self) -> list[float]:
        """REST and JSON-RPC (a durable send, a list) calls' times, sorted."""
        return sorted(self.timings["rest"] + self.timings["send"] + self.timings["list"])

    def figures(self) -> dict:
        calls, readyz = self.calls(), sorted(self.timings["readyz"])
        return {
            "calls": len(calls),
            "p50_ms": round(statistics.median(calls) * 1000, 1),
            "p99_ms": round(percentile(calls, 0.99) * 1000, 1),
            "max_ms": round(calls[-1] * 1000, 1),
            "readyz": len(readyz),
            "readyz_p99_ms": round(percentile(readyz, 0.99) * 1000, 1),
        }


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(len(values) * fraction))]


def other_tenants(count: int) -> list[tuple[factories.TestAgent, factories.TestAgent]]:
    pairs = []
    for n in range(count):
        other = factories.tenant(f"other-{n}")
        pairs.append((factories.agent(other, name="x"), factories.agent(other, name="y")))
    return pairs


def baseline(cluster: Cluster, pairs) -> dict:
    """The same calls with nothing held: what this machine gives right now (recorded with the
    figures; on a shared machine its load moves every latency)."""
    probe = Probe(cluster.proxy, pairs, seconds=6).run()
    assert not probe.failures, probe.failures[:5]
    figures = probe.figures()
    return {
        "baseline_p99_ms": figures["p99_ms"],
        "baseline_readyz_p99_ms": figures["readyz_p99_ms"],
    }


def measure_while_held(cluster: Cluster, pairs, still_held, before: dict) -> dict:
    """Other tenants' calls in windows of 10 s; every call must succeed, and nothing held may
    end meanwhile. The p99 must be within the limit in a window: the held requests stay
    the same in every window, so a slowdown they caused would show in each, while a burst
    of other work on this shared machine spoils one (at most three windows are taken)."""
    windows = []
    for _ in range(3):
        probe = Probe(cluster.proxy, pairs, seconds=10).run()
        assert not probe.failures, probe.failures[:5]
        windows.append(probe.figures())
        if windows[-1]["p99_ms"] <= P99_LIMIT * 1000:
            break
    assert still_held(), "a held request ended while the others were measured"
    figures = {**windows[-1], "windows_p99_ms": [w["p99_ms"] for w in windows], **before}
    assert figures["p99_ms"] <= P99_LIMIT * 1000, figures
    for base in (*cluster.webs, cluster.stream):
        assert answered_at_once(base, "/readyz").status_code == 200
    return figures


def test_fifty_held_streams_and_blocking_sends_leave_other_tenants_fast(cluster, tenant):
    bob = factories.agent(tenant, name="bob")
    senders = [factories.agent(tenant, name=f"s{n}") for n in range(35)]
    others = other_tenants(4)
    before = baseline(cluster, others)
    # 15 tasks followed two ways: their senders' inbox streams, and SubscribeToTask without
    # an Accept header (handed from web to stream); 10 SendStreamingMessage with the header
    # (routed to stream by nginx); 10 blocking sends to bob's own endpoint (handed over).
    followed = {
        s.id: send(cluster.proxy, s, bob, f"followed by {s.model.name}") for s in senders[:15]
    }
    inboxes = [
        opened(SSEClient(f"{cluster.proxy}/api/v1/subscribe", headers=bearer(s)), "ready")
        for s in senders[:15]
    ]
    subscribed = [opened(subscribe_to_task(cluster.proxy, s, followed[s.id])) for s in senders[:15]]
    streaming = [
        opened(
            SSEClient(
                f"{cluster.proxy}/a2a/",
                method="POST",
                headers={**bearer(s), "Accept": "text/event-stream"},
                json_body=envelope(
                    "SendStreamingMessage",
                    {
                        "message": say(
                            f"streamed by {s.model.name}", metadata={"destination": bob.id}
                        )
                    },
                ),
            )
        )
        for s in senders[15:25]
    ]
    url = f"{cluster.proxy}/a2a/agents/{bob.id}/"
    blocking = [BlockingSend(url, f"blocking from {s.model.name}", s) for s in senders[25:35]]
    stored(blocking)
    streams = inboxes + subscribed + streaming
    assert len(streams) + len(blocking) == 50
    try:
        figures = measure_while_held(
            cluster,
            others,
            lambda: (
                not any(s.closed.is_set() for s in streams)
                and all(b.answered_at is None for b in blocking)
            ),
            before,
        )
        # Release: bob completes every task; each held request ends as it should.
        tasks = list(Task.objects.filter(recipient=bob.model))
        assert len(tasks) == 35
        for task in tasks:
            act(cluster.proxy, bob, str(task.id), "complete", "done")
        for stream in subscribed + streaming:
            assert stream.closed.wait(10)
            last = stream.drain(0.2)[-1].json()["result"]
            assert last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        for inbox in inboxes:
            updates = [e.json() for e in inbox.drain(0.5) if e.event == "task-update"]
            assert [u["status"]["state"] for u in updates] == ["TASK_STATE_COMPLETED"]
        for held in blocking:
            assert held.result(timeout=10)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        for stream in streams:
            stream.close()
    duplicated = Task.objects.filter(recipient=bob.model).count() - 35
    record(
        f"long-held-50-{connection.vendor}",
        {
            "scenario": "50 long-held requests through nginx (15 inbox streams, 15 "
            "SubscribeToTask without Accept, 10 SendStreamingMessage, 10 blocking sends to "
            "an agent) while 4 other tenants call REST, JSON-RPC and /readyz; make cluster "
            "topology",
            "database": connection.vendor,
            "load": "50 held; 4 client threads, 10 s windows",
            "faults": 0,
            "messages_checked": 35,
            "lost": 0,
            "duplicated": duplicated,
            **figures,
        },
    )
    assert duplicated == 0


def test_twenty_anonymous_blocking_sends_leave_other_tenants_fast(cluster, tenant):
    bob = factories.agent(tenant, name="bob")
    agent_services.set_agent_public(agent=bob.model, public=True)
    url = f"{cluster.proxy}/a2a/agents/{bob.id}/"
    others = other_tenants(4)
    before = baseline(cluster, others)
    blocking = [BlockingSend(url, f"anonymous {n}", None) for n in range(20)]
    tasks = stored(blocking)
    figures = measure_while_held(
        cluster, others, lambda: all(b.answered_at is None for b in blocking), before
    )
    for text, task in tasks.items():
        act(cluster.proxy, bob, str(task.id), "complete", f"re: {text}")
    for held in blocking:
        result = held.result(timeout=10)["task"]
        assert result["status"]["state"] == "TASK_STATE_COMPLETED"
        assert result["artifacts"][0]["parts"] == [{"text": f"re: {held.text}"}]
    duplicated = Task.objects.filter(recipient=bob.model).count() - 20
    record(
        f"long-held-anonymous-{connection.vendor}",
        {
            "scenario": "20 anonymous blocking sends to a published agent through nginx while 4 "
            "other tenants call REST, JSON-RPC and /readyz; make cluster topology",
            "database": connection.vendor,
            "load": "20 held; 4 client threads, 10 s windows",
            "faults": 0,
            "messages_checked": 20,
            "lost": 0,
            "duplicated": duplicated,
            **figures,
        },
    )
    assert duplicated == 0
