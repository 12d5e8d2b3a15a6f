"""The SSE inbox `GET /api/v1/subscribe` end to end, against a real server process."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

import testbed
from agents import services as agent_services
from messaging import services as messaging_services
from messaging.parties import Sender
from tests import factories
from tests.live import SSEClient

pytestmark = pytest.mark.django_db(transaction=True)


def subscribe(broker, agent, *, version: str | None = "1.0", **headers: str) -> SSEClient:
    all_headers = {"Authorization": f"Bearer {agent.token}", **headers}
    if version:
        all_headers["A2A-Version"] = version
    stream = SSEClient(f"{broker.url}/api/v1/subscribe", headers=all_headers)
    assert stream.status == 200, stream.body
    ready = stream.next()
    assert ready.event == "ready"
    return stream


def send(broker, sender, to, text="hello", *, parts=None, version="1.0") -> dict:
    """SendMessage through the server process, so its doorbell rings there."""
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": parts or [{"text": text}],
        "metadata": {"destination": str(to)},
    }
    headers = {"Authorization": f"Bearer {sender.token}"}
    if version:
        headers["A2A-Version"] = version
    response = httpx.post(
        f"{broker.url}/a2a/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
        headers=headers,
        timeout=10,
    )
    body = response.json()
    assert "result" in body, body
    return body["result"]["task"]


def act(broker, agent, task_id, action, text="ok") -> dict:
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": [{"text": text}],
        "metadata": {"action": action},
    }
    response = httpx.post(
        f"{broker.url}/a2a/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
        headers={"Authorization": f"Bearer {agent.token}", "A2A-Version": "1.0"},
        timeout=10,
    )
    body = response.json()
    assert "result" in body, body
    return body["result"]["task"]


def texts(events) -> list[str]:
    return [e.json()["artifacts"][0]["parts"][0]["text"] for e in events]


@pytest.fixture
def alice(tenant):
    return factories.agent(tenant, name="alice")


@pytest.fixture
def bob(tenant):
    return factories.agent(tenant, name="bob")


def test_stream_opens_with_sse_headers_and_a_ready_event(broker, bob):
    stream = SSEClient(
        f"{broker.url}/api/v1/subscribe", headers={"Authorization": f"Bearer {bob.token}"}
    )
    try:
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["cache-control"] == "no-cache"
        assert stream.headers["x-accel-buffering"] == "no"
        ready = stream.next()
        assert ready.event == "ready"
        assert ready.json()["agent_id"] == bob.id
    finally:
        stream.close()


def test_messages_arrive_live_in_order_with_increasing_event_ids(broker, alice, bob):
    stream = subscribe(broker, bob)
    try:
        started = time.monotonic()
        for n in range(20):
            send(broker, alice, bob.id, f"message {n}")
        events = stream.take(20)
        assert time.monotonic() - started < 5
        assert [e.event for e in events] == ["message"] * 20
        assert texts(events) == [f"message {n}" for n in range(20)]
        ids = [int(e.id) for e in events]
        assert ids == sorted(ids) and len(set(ids)) == 20
        assert stream.drain() == []
    finally:
        stream.close()


def test_reconnecting_with_last_event_id_replays_exactly_what_was_missed(broker, alice, bob):
    stream = subscribe(broker, bob)
    send(broker, alice, bob.id, "one")
    send(broker, alice, bob.id, "two")
    seen = stream.take(2)
    stream.close()
    for text in ("three", "four", "five"):
        send(broker, alice, bob.id, text)

    again = subscribe(broker, bob, **{"Last-Event-ID": seen[-1].id})
    try:
        replayed = again.take(3)
        assert texts(replayed) == ["three", "four", "five"]
        assert again.drain() == []
        send(broker, alice, bob.id, "six")
        assert texts([again.next()]) == ["six"]
    finally:
        again.close()

    from_query = SSEClient(
        f"{broker.url}/api/v1/subscribe?since={seen[0].id}",
        headers={"Authorization": f"Bearer {bob.token}"},
    )
    try:
        assert from_query.next().event == "ready"
        assert texts(from_query.take(5)) == ["two", "three", "four", "five", "six"]
    finally:
        from_query.close()


def test_ready_carries_the_cursor_so_a_reconnect_before_any_event_loses_nothing(broker, alice, bob):
    stream = SSEClient(
        f"{broker.url}/api/v1/subscribe", headers={"Authorization": f"Bearer {bob.token}"}
    )
    ready = stream.next()
    stream.close()
    send(broker, alice, bob.id, "while away")
    again = subscribe(broker, bob, **{"Last-Event-ID": ready.id})
    try:
        assert texts([again.next()]) == ["while away"]
    finally:
        again.close()


def test_lifecycle_changes_reach_both_parties_as_task_updates(broker, alice, bob):
    alice_stream, bob_stream = subscribe(broker, alice), subscribe(broker, bob)
    try:
        task = send(broker, alice, bob.id, "review please")
        delivered = bob_stream.next()
        assert delivered.event == "message" and delivered.json()["id"] == task["id"]
        act(broker, bob, task["id"], "accept")
        act(broker, bob, task["id"], "complete", "done")
        for stream in (alice_stream, bob_stream):
            updates = stream.take(2)
            assert [u.event for u in updates] == ["task-update", "task-update"]
            assert all(u.json()["id"] == task["id"] for u in updates)
            assert updates[-1].json()["status"]["state"] == "TASK_STATE_COMPLETED"
        # The sender is not told about its own new task.
        assert alice_stream.drain() == []
    finally:
        alice_stream.close()
        bob_stream.close()


def test_two_streams_of_one_agent_both_receive_every_event(broker, alice, bob):
    first, second = subscribe(broker, bob), subscribe(broker, bob)
    try:
        for n in range(5):
            send(broker, alice, bob.id, f"m{n}")
        a, b = first.take(5), second.take(5)
        assert texts(a) == texts(b) == [f"m{n}" for n in range(5)]
        assert [e.id for e in a] == [e.id for e in b]
        first.close()
        send(broker, alice, bob.id, "after one closed")
        assert texts([second.next()]) == ["after one closed"]
    finally:
        first.close()
        second.close()


def test_a_message_to_oneself_arrives_once(broker, alice):
    stream = subscribe(broker, alice)
    try:
        task = send(broker, alice, alice.id, "note to self")
        delivered = stream.next()
        assert delivered.event == "message" and delivered.json()["id"] == task["id"]
        act(broker, alice, task["id"], "ack")
        update = stream.next()
        assert update.event == "task-update"
        assert stream.drain() == []
    finally:
        stream.close()


def test_unicode_payloads_round_trip_exactly(broker, alice, bob):
    tricky = (
        "日本語 — émoji 🎉👩🏽‍💻, RTL עברית, combining e\u0301, line\nbreak, tab\t, "
        "quotes \"' \\ and separators \u2028\u2029 and NUL-ish \u0001"
    )
    data = {"ключ": ["値", {"🙂": "é"}], "n": 1, "pi": 3.5}
    parts = [{"text": tricky}, {"data": data}]
    stream = subscribe(broker, bob)
    try:
        send(broker, alice, bob.id, parts=parts)
        received = stream.next().json()
        assert received["artifacts"][0]["parts"] == parts
        assert received["history"][0]["parts"] == parts
    finally:
        stream.close()


def test_without_a2a_version_the_stream_speaks_the_0_3_dialect(broker, alice, bob):
    stream = subscribe(broker, bob, version=None)
    try:
        send(broker, alice, bob.id, "compat")
        task = stream.next().json()
        assert task["kind"] == "task"
        assert task["status"]["state"] == "input-required"
        assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "compat"}]
    finally:
        stream.close()


def test_events_written_by_another_process_arrive_through_the_catch_up_scan(
    broker, tenant, alice, bob
):
    """No doorbell reaches the server for a write made here (in-memory layer, other process):
    the periodic scan must find it."""
    stream = subscribe(broker, bob)
    try:
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "x"}]}
        started = time.monotonic()
        messaging_services.send_message(
            sender=Sender(tenant=tenant, agent=alice.model), message=message, to=bob.id
        )
        assert texts([stream.next(timeout=5)]) == ["x"]
        assert time.monotonic() - started < 3
    finally:
        stream.close()


def assert_closes(stream: SSEClient, timeout: float = 6) -> None:
    events = []
    deadline = time.monotonic() + timeout
    while not stream.closed.is_set() and time.monotonic() < deadline:
        events.extend(stream.drain(0.1))
    assert stream.closed.is_set(), "the stream stayed open"
    events.extend(stream.drain(0.05))
    assert events and events[-1].event == "closed"
    assert events[-1].json()["code"] == "UNAUTHORIZED"


def test_stream_closes_when_its_api_key_is_revoked(broker, tenant, alice):
    from tenants.models import ApiKey

    spare = factories.api_key(tenant)  # so revoking does not deregister the agents
    raw = factories.api_key(tenant, label="to revoke")
    stream = SSEClient(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {raw}", "X-Agent-Id": alice.id},
    )
    try:
        assert stream.next().event == "ready"
        key = ApiKey.objects.get(label="to revoke")
        agent_services.revoke_api_key(api_key=key)
        assert_closes(stream)
    finally:
        stream.close()
    refused = httpx.get(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {raw}", "X-Agent-Id": alice.id},
    )
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert spare


def test_stream_closes_when_the_agent_token_is_rotated(broker, alice):
    stream = subscribe(broker, alice)
    try:
        agent_services.rotate_agent_token(agent=alice.refresh())
        assert_closes(stream)
    finally:
        stream.close()


@pytest.mark.parametrize("change", ["deregister", "disable"])
def test_stream_closes_when_the_agent_is_deregistered_or_disabled(broker, alice, change):
    stream = subscribe(broker, alice)
    try:
        if change == "deregister":
            agent_services.deregister_agent(agent=alice.refresh())
        else:
            agent_services.set_agent_enabled(agent=alice.refresh(), enabled=False)
        assert_closes(stream)
    finally:
        stream.close()


def test_streams_never_carry_another_tenants_events(broker, alice, bob, stranger, other_tenant):
    outsider = subscribe(broker, stranger)
    mine = subscribe(broker, bob)
    try:
        send(broker, alice, bob.id, "internal")
        assert texts([mine.next()]) == ["internal"]
        assert outsider.drain(1.5) == []
    finally:
        outsider.close()
        mine.close()
    # Another tenant's credentials cannot open this tenant's agent's stream.
    other_key = factories.api_key(other_tenant)
    refused = httpx.get(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {other_key}", "X-Agent-Id": bob.id},
    )
    assert refused.status_code == 401


def test_bad_requests_are_refused_before_streaming(broker, bob):
    assert httpx.get(f"{broker.url}/api/v1/subscribe").status_code == 401
    bad = httpx.get(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {bob.token}", "Last-Event-ID": "yesterday"},
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "INVALID_REQUEST"
    version = httpx.get(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {bob.token}", "A2A-Version": "2.0"},
    )
    assert version.status_code == 400
    posted = httpx.post(
        f"{broker.url}/api/v1/subscribe", headers={"Authorization": f"Bearer {bob.token}"}
    )
    assert posted.status_code == 405


def test_keepalive_comments_and_no_thread_per_stream(broker_factory, tenant):
    server = broker_factory(env={"HIKYAKU_STREAM_KEEPALIVE_SECONDS": "0.5"})
    agents = [factories.agent(tenant, name=f"idle-{n}") for n in range(60)]
    streams = [subscribe(server, agent) for agent in agents]
    try:
        time.sleep(1.5)
        assert all(s.comments >= 1 for s in streams)
        with open(f"/proc/{server.proc.pid}/status") as status:
            threads = int(next(line for line in status if line.startswith("Threads:")).split()[1])
        assert threads < 30, f"{threads} threads for {len(streams)} streams"
    finally:
        for stream in streams:
            stream.close()


def test_streams_survive_their_database_connections_being_killed(broker, alice, bob):
    """What a Postgres restart does to the stream process's pooled connections."""
    from django.conf import settings
    from django.db import connection

    if not settings.IS_POSTGRES:
        pytest.skip("needs Postgres")
    stream = subscribe(broker, bob)
    try:
        send(broker, alice, bob.id, "before")
        assert texts([stream.next()]) == ["before"]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT array_agg(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            (pids,) = cursor.fetchone()
            assert pids
            # Once they have exited: a call racing the exit itself gets the 503 any outage
            # gets (docs/ARCHITECTURE.md, stream DB threads).
            testbed.terminate_backends(cursor, pids)
        send(broker, alice, bob.id, "after")
        assert texts([stream.next()]) == ["after"]
    finally:
        stream.close()
    again = subscribe(broker, bob)  # new streams authenticate through the same pool
    again.close()


@pytest.mark.django_db
def test_a_web_process_hands_the_inbox_stream_to_the_stream_processes(tenant):
    """No stream handler in front of a web (WSGI) process: its view answers at once, 421 in
    the REST envelope, without holding a thread (messaging/stream/handoff.py)."""
    from django.test import Client

    bob = factories.agent(tenant, name="bob")
    for headers in ({"HTTP_AUTHORIZATION": f"Bearer {bob.token}"}, {}):
        response = Client().get("/api/v1/subscribe", **headers)
        assert response.status_code == 421
        assert response["Content-Type"] == "application/json"
        error = response.json()["error"]
        assert error["code"] == "STREAM_TIER_ONLY"
        assert "stream process" in error["message"]
    assert Client().post("/api/v1/subscribe").status_code == 405


def test_events_of_tasks_policy_no_longer_lets_the_agent_read_are_skipped(
    broker, tenant, alice, bob
):
    from agents.models import Agent

    carol = factories.agent(tenant, name="carol")
    send(broker, alice, bob.id, "from alice")
    send(broker, carol, bob.id, "from carol")
    Agent.objects.filter(pk=bob.model.pk).update(receive_from=[carol.id])  # narrowed later
    stream = subscribe(broker, bob, **{"Last-Event-ID": "0"})
    try:
        assert texts(stream.drain(1)) == ["from carol"]
    finally:
        stream.close()


def _work_a_task(broker, alice, bob) -> str:
    """accept → block → reply → complete on a new task from alice to bob; its id."""
    task = send(broker, alice, bob.id, "Fix the uploader")
    act(broker, bob, task["id"], "accept", "on it")
    act(broker, bob, task["id"], "block", "Which branch?")
    act(broker, alice, task["id"], "reply", "main")
    act(broker, bob, task["id"], "complete", "Fixed in abc123")
    return task["id"]


def test_a_replay_shows_each_event_as_the_task_was_then(broker, alice, bob):
    live = subscribe(broker, bob)
    try:
        task_id = _work_a_task(broker, alice, bob)
        as_they_happened = live.take(5)
    finally:
        live.close()
    replay = subscribe(broker, bob, **{"Last-Event-ID": "0"})
    try:
        replayed = replay.take(5)
    finally:
        replay.close()
    tasks = [e.json() for e in replayed]
    assert {t["id"] for t in tasks} == {task_id}
    assert [(t["status"]["state"], t["metadata"].get("awaiting")) for t in tasks] == [
        ("TASK_STATE_INPUT_REQUIRED", "recipient"),
        ("TASK_STATE_WORKING", None),
        ("TASK_STATE_INPUT_REQUIRED", "sender"),
        ("TASK_STATE_WORKING", None),
        ("TASK_STATE_COMPLETED", None),
    ]
    assert tasks[2]["status"]["message"]["parts"] == [{"text": "Which branch?"}]
    assert all("message" not in t["status"] for i, t in enumerate(tasks) if i != 2)
    assert [len(t["history"]) for t in tasks] == [1, 2, 3, 4, 5]
    assert [t["history"][-1]["parts"][0]["text"] for t in tasks[1:]] == [
        "on it",
        "Which branch?",
        "main",
        "Fixed in abc123",
    ]
    assert [[a["name"] for a in t["artifacts"]] for t in tasks] == [["message"]] * 4 + [
        ["message", "result"]
    ]
    stamps = [t["status"]["timestamp"] for t in tasks]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5
    # What a stream shows for an event does not depend on when it was read.
    assert [e.data for e in replayed] == [e.data for e in as_they_happened]
    assert [e.event for e in replayed] == ["message"] + ["task-update"] * 4


def test_a_replay_shows_the_sender_each_update_as_it_was_then(broker, alice, bob):
    _work_a_task(broker, alice, bob)
    replay = subscribe(broker, alice, version=None, **{"Last-Event-ID": "0"})
    try:
        tasks = [e.json() for e in replay.take(4)]
        assert replay.drain(0.3) == []
    finally:
        replay.close()
    # The 0.3 dialect, through the same snapshots.
    assert [t["status"]["state"] for t in tasks] == [
        "working",
        "input-required",
        "working",
        "completed",
    ]
    assert tasks[1]["status"]["message"]["parts"][0]["text"] == "Which branch?"
    assert [len(t["history"]) for t in tasks] == [2, 3, 4, 5]
