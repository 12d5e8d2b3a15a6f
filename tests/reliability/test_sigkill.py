"""SIGKILL the web server in the middle of a 2,000-message send load (docs/PROTOCOL.md §5).

Eight client threads (one sender agent each) send 2,000 unique messages to four recipients
through a real server process on the test database. The server's whole process group is
SIGKILLed twice mid-load and restarted on the same port; clients that lose a request (reset,
refused) retry it with the same `messageId`. Afterwards:

- every messageId has exactly one task (none lost, none duplicated) with one `created` event;
- every success response for a messageId named that same task;
- no attempt ever got a 5xx (a killed server resets connections, it never answers 500);
- sends whose outcome the client never learned but which had committed before the kill are
  counted (they are why clients must retry with the same messageId).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.db import connection

from messaging.models import Task, TaskEvent
from tests import factories, live
from tests.backends import postgres_suite_only
from tests.reliability.harness import AckLoad, SendLoad, Server, record

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TOTAL = 2000
CLIENTS = 8
KILL_AT = (600, 1300)  # acknowledged sends at which the server is killed


def committed_message_ids(tenant) -> set[str]:
    return set(Task.objects.filter(tenant=tenant).values_list("message_id", flat=True))


def committed_acks(tenant) -> set[str]:
    events = TaskEvent.objects.filter(tenant=tenant, kind="ack")
    return {f"ack-{task_id}" for task_id in events.values_list("task_id", flat=True)}


def run_with_kills(server: Server, load: SendLoad, kill_at: tuple[int, ...], committed) -> list:
    """Run `load`, SIGKILLing the server when `kill_at` sends are acknowledged; returns what
    had committed without the client knowing, per kill."""
    kills = []
    load.start()
    for threshold in kill_at:
        load.wait_for(threshold)
        killed_at = time.monotonic()
        server.kill()
        time.sleep(0.3)  # clients run into the dead port meanwhile
        stored = committed()
        # Read after the kill: no success can arrive from a dead server, so this is exactly
        # what the clients had been told before it died.
        acknowledged_before = {e.message_id for e in load.entries if e.acknowledged}
        server.start()
        kills.append(
            {
                "committed_unacknowledged": sorted(stored - acknowledged_before),
                "down_seconds": round(time.monotonic() - killed_at, 2),
            }
        )
    load.join()
    return kills


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            "granian-wsgi",
            marks=postgres_suite_only(
                "granian is the production web tier, on Postgres; the embedded default is one "
                "uvicorn process (the other case)"
            ),
        ),
        "uvicorn-asgi",
    ],
)
def test_sigkill_mid_load_loses_and_duplicates_nothing(tenant, kind):
    senders = [factories.agent(tenant, name=f"sender-{i}") for i in range(CLIENTS)]
    recipients = [factories.agent(tenant, name=f"recipient-{i}") for i in range(4)]
    server = Server(kind=kind, database_url=live.suite_database_url()).start()
    load = SendLoad(
        url=lambda: server.url,
        senders=[(a.id, a.token) for a in senders],
        recipients=[r.id for r in recipients],
        total=TOTAL,
    )
    try:
        kills = run_with_kills(server, load, KILL_AT, lambda: committed_message_ids(tenant))
        # Phase 2: every recipient acknowledges its inbox while the server dies again.
        tokens = {r.id: r.token for r in recipients}
        inboxes: dict[str, list[str]] = {token: [] for token in tokens.values()}
        for task_id, recipient_id in Task.objects.filter(tenant=tenant).values_list(
            "pk", "recipient_id"
        ):
            inboxes[tokens[str(recipient_id)]].append(str(task_id))
        acks = AckLoad(url=lambda: server.url, tasks=inboxes)
        ack_kills = run_with_kills(server, acks, (TOTAL // 2,), lambda: committed_acks(tenant))
    finally:
        server.stop()

    # Nothing lost: every send was eventually acknowledged and is stored exactly once.
    assert all(e.acknowledged for e in load.entries), [
        (e.message_id, e.attempts[-1].outcome) for e in load.entries if not e.acknowledged
    ][:5]
    tasks = Task.objects.filter(tenant=tenant).exclude(message_id=None)
    per_key = Counter(tasks.values_list("sender_id", "message_id"))
    assert sum(per_key.values()) == TOTAL
    assert max(per_key.values()) == 1, "a messageId was delivered twice"
    by_message = {m: str(pk) for pk, m in tasks.values_list("pk", "message_id")}
    assert set(by_message) == {e.message_id for e in load.entries}
    for entry in load.entries:
        assert entry.task_ids == {by_message[entry.message_id]}, entry.message_id
    created = Counter(
        TaskEvent.objects.filter(tenant=tenant, kind="created").values_list("task_id", flat=True)
    )
    assert len(created) == TOTAL and set(created.values()) == {1}
    per_recipient = Counter(str(r) for r in tasks.values_list("recipient_id", flat=True))
    assert per_recipient == Counter(e.recipient_id for e in load.entries)

    # A killed server resets connections; it never answers with a 5xx.
    outcomes = load.outcomes()
    assert not [o for o in outcomes if o.startswith("http-5")], outcomes
    assert outcomes["ok"] >= TOTAL

    # Every ack was answered with the task (a retried ack that had committed is not an
    # error), and every task was completed exactly once.
    assert all(e.acknowledged for e in acks.entries)
    ack_outcomes = acks.outcomes()
    assert not [o for o in ack_outcomes if o.startswith("http-")], ack_outcomes
    assert set(tasks.values_list("state", flat=True)) == {"completed"}
    acked = Counter(
        TaskEvent.objects.filter(tenant=tenant, kind="ack").values_list("task_id", flat=True)
    )
    assert len(acked) == TOTAL and set(acked.values()) == {1}

    unknown = [m for k in kills for m in k["committed_unacknowledged"]]
    unknown_acks = [m for k in ack_kills for m in k["committed_unacknowledged"]]
    record(
        f"sigkill-{kind}-{connection.vendor}",
        {
            "scenario": f"SIGKILL the {kind} server process group: twice during sends, once "
            "during acks",
            "database": connection.vendor,
            "load": f"{TOTAL} sends ({CLIENTS} client threads) then {TOTAL} acks (4 threads)",
            "faults": len(kills) + len(ack_kills),
            "down_seconds": [k["down_seconds"] for k in kills + ack_kills],
            "elapsed_seconds": round(load.elapsed, 1),
            "attempts": sum(outcomes.values()),
            "outcomes": dict(outcomes),
            "retried_sends": len(load.retried()),
            "committed_but_unacknowledged_at_kill": len(unknown),
            "ack_outcomes": dict(ack_outcomes),
            "acks_committed_but_unacknowledged_at_kill": len(unknown_acks),
            "messages_checked": TOTAL,
            "acks_checked": TOTAL,
            "lost": 0,
            "duplicated": 0,
        },
    )
