"""The inbox read on the stream process's event loop (messaging/stream/reads.py,
`read_inboxes_on_loop`) against the same read on a DB thread (`read_inboxes`): on Postgres the
first runs on a connection of its own, opened outside Django, so everything Django's connections
do to values (JSON as text for JSONField, timestamps in UTC) must hold there too."""

from __future__ import annotations

import asyncio
import copy
import gc
import time

import pytest
from django.conf import settings

import testbed
from agents.auth import authenticate_agent
from messaging.a2a.wire import dialect_for
from messaging.stream import db
from messaging.stream.feeds import InboxFeed
from messaging.stream.reads import read_inboxes, read_inboxes_on_loop
from tests.messaging.rpc import act, send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _stream_db_threads_end():
    """The stream DB threads this process started keep their connections; ending the threads
    closes them, so the test database can be dropped."""
    yield
    if db._executor is not None:
        db._executor.shutdown(wait=True)
        db._executor = None
        gc.collect()


def _feeds(*agents):
    feeds = []
    for agent in agents:
        identity = authenticate_agent(authorization=f"Bearer {agent.token}", agent_id=None)
        for version in ("1.0", "0.3"):
            feeds.append(InboxFeed(identity, dialect_for(version), since=0))
    return feeds


async def _on_loop(feeds):
    try:
        return await read_inboxes_on_loop(feeds)
    finally:
        await db.close_loop_connection()


def test_the_loop_read_gives_the_frames_a_db_thread_read_gives(agent, peer):
    first = send(agent, peer.id, "needs\u2028care: ünïcode")["id"]
    act(peer, first, "accept", "on it")
    act(peer, first, "complete", "done")
    send(agent, peer.id, "second", nested={"list": [1, 2.5, None]})

    on_thread = _feeds(agent, peer)
    on_loop = [copy.copy(feed) for feed in on_thread]

    thread_batches = read_inboxes(on_thread)
    loop_batches = asyncio.run(_on_loop(on_loop))

    # The sender sees the accept and the complete, the recipient both tasks and those two;
    # replayed events show their task as of that event (read from its timeline), the latest
    # the row itself: every kind of frame is compared.
    assert [len(b.frames) for b in thread_batches] == [2, 2, 4, 4]
    assert [b.frames for b in loop_batches] == [b.frames for b in thread_batches]
    assert [f.cursor for f in on_loop] == [f.cursor for f in on_thread]
    assert all(b.closed is None for b in loop_batches)


def test_the_loop_read_closes_a_stream_whose_token_was_rotated(agent, peer):
    send(agent, peer.id, "hello")
    feeds = _feeds(peer)
    peer_row = type(feeds[0].identity.agent).objects.get(pk=peer.id)
    peer_row.token_hash = "0" * 64
    peer_row.save(update_fields=["token_hash"])

    batches = asyncio.run(_on_loop(feeds))

    assert [b.closed for b in batches] == ["credentials", "credentials"]
    assert all(b.frames == [] for b in batches)


@pytest.mark.skipif(not settings.IS_POSTGRES, reason="the loop has its own connection on Postgres")
def test_the_loop_connection_is_let_go_and_opened_again_after_the_database_dropped_it(agent, peer):
    from django.db import connection

    send(agent, peer.id, "one")
    feeds = _feeds(peer)

    def terminate(pid: int) -> None:
        with connection.cursor() as cursor:
            testbed.terminate_backends(cursor, [pid])
        connection.close()

    def send_and_close(text: str) -> None:
        try:
            send(agent, peer.id, text)
        finally:
            connection.close()

    async def scenario():
        try:
            first = await read_inboxes_on_loop([feeds[0]])
            pid = (await db.loop_fetch("SELECT pg_backend_pid()", []))[0][0]
            # Django's connections are for threads outside the loop.
            await asyncio.to_thread(terminate, pid)
            # The server's goodbye made the idle socket readable; the loop must not keep
            # waking for it.
            cpu = time.process_time()
            await asyncio.sleep(0.5)
            idle_cpu = time.process_time() - cpu
            await asyncio.to_thread(send_and_close, "two")
            second = await read_inboxes_on_loop([feeds[0]])
            pid_after = (await db.loop_fetch("SELECT pg_backend_pid()", []))[0][0]
            return first, second, pid, pid_after, idle_cpu
        finally:
            await db.close_loop_connection()

    first, second, pid, pid_after, idle_cpu = asyncio.run(scenario())
    assert idle_cpu < 0.2
    assert len(first[0].frames) == 1
    assert len(second[0].frames) == 1 and b"two" in second[0].frames[0]
    assert pid_after != pid
