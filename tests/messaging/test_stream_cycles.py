"""A stream's objects are freed by their reference counts, never left in reference cycles.

A stream process holding many streams freezes what survives each full collection
(hikyaku/heap.py, FreezeSurvivors; docs/MEASUREMENTS.md, Garbage collection): an object frozen
while alive and later dropped inside a cycle is never freed, so a stream that left a cycle
behind would leak its objects for the life of the process. Here the stream process runs with
`gc.DEBUG_SAVEALL`, which keeps every unreachable object the collector finds in `gc.garbage`
instead of freeing it, and every kind of stream it serves is opened, fed, ended by the server
or dropped by the client, and gone: the garbage must not grow (but for the one cycle of
Django's query compiler named below, which lives only while a query compiles).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

import testbed
from tenants import services as tenant_services
from tests import factories
from tests.live import ARTIFACTS, SSEClient, suite_database_url
from tests.messaging import rpc
from tests.messaging.test_stream_web import session_cookie
from tests.messaging.test_streams import act, send, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

# uvicorn serving hikyaku.asgi, as the stream tier and `make run` do, with the collector keeping
# its garbage. A thread answers each probe the test writes: it collects, then reports how much
# garbage there is, the kinds of what came after the index the probe asked from, and how many
# streams the hub holds. One cycle is left out: Django's query compiler defines a recursive
# closure for each query with select_related (`get_select_from_parent`, a function and its
# cell), garbage as soon as the query is compiled; freezing keeps one only when a collection
# runs during that compile, not for each stream (docs/MEASUREMENTS.md, Garbage collection).
SAVING_SERVER = """
import gc, json, os, sys, threading, time
from collections import Counter
from pathlib import Path

gc.set_debug(gc.DEBUG_SAVEALL)
probe, answer = Path(sys.argv[1]), Path(sys.argv[2])
COMPILING = "SQLCompiler.get_select.<locals>.get_select_from_parent"

def kind(o):
    if type(o).__name__ == "function":
        return f"function {o.__module__}.{o.__qualname__}"
    if type(o).__name__ == "frame":
        return f"frame {o.f_code.co_filename.split('/')[-1]}:{o.f_code.co_name}:{o.f_lineno}"
    if isinstance(o, BaseException):
        return f"exc {o!r}"
    return f"{type(o).__module__}.{type(o).__qualname__}"

def answering():
    while True:
        if probe.exists():
            since = int(probe.read_text())
            probe.unlink()
            gc.collect()
            new = gc.garbage[since:]
            compiling = set()
            for o in new:
                if getattr(o, "__qualname__", None) == COMPILING:
                    cells = o.__closure__ or ()
                    compiling |= {id(o), id(cells), *map(id, cells)}
            left = Counter(kind(o) for o in new if id(o) not in compiling)
            from messaging.stream.hub import hub
            report = {"count": len(gc.garbage), "left": left.most_common(40),
                      "streams": hub.stream_count}
            answer.with_suffix(".tmp").write_text(json.dumps(report))
            os.replace(answer.with_suffix(".tmp"), answer)
        time.sleep(0.02)

threading.Thread(target=answering, daemon=True).start()
sys.argv = ["uvicorn", *sys.argv[3:]]
from uvicorn.main import main
main()
"""


class SavingServer(testbed.Process):
    def __init__(self, folder: Path) -> None:
        self.port = testbed.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.probe, self.answer = folder / "probe", folder / "answer.json"
        uvicorn = testbed.uvicorn_argv(self.port)[3:]  # after `python -m uvicorn`
        env = {
            **os.environ,
            "DATABASE_URL": suite_database_url(),
            "HIKYAKU_LOG_FORMAT": "text",
            # Every periodic path within a round: keepalives, the streams' and the hub's
            # checks (the Redis probe among them), the catch-up scan.
            "HIKYAKU_STREAM_KEEPALIVE_SECONDS": "0.2",
            "HIKYAKU_STREAM_CHECK_SECONDS": "0.2",
            "HIKYAKU_STREAM_SCAN_SECONDS": "0.1",
        }
        super().__init__(
            [sys.executable, "-c", SAVING_SERVER, self.probe, self.answer, *uvicorn],
            env=env,
            log=ARTIFACTS / f"saving-server-{self.port}.log",
            name="saving-server",
        )

    def garbage(self, since: int = 0) -> dict:
        """Collect in the server: how much garbage it holds, the kinds of what came after
        `since` (but the compiler's closures), and how many streams are open."""
        self.answer.unlink(missing_ok=True)
        self.probe.with_suffix(".tmp").write_text(str(since))
        os.replace(self.probe.with_suffix(".tmp"), self.probe)  # never read half-written
        testbed.wait_until(self.answer.exists, timeout=30, what="the server's collection")
        return json.loads(self.answer.read_text())

    def open_streams(self) -> int:
        return self.garbage()["streams"]


def a2a_stream(server, agent, method: str, params: dict) -> SSEClient:
    return SSEClient(
        f"{server.url}/a2a/",
        method="POST",
        headers={"Authorization": f"Bearer {agent.token}", "A2A-Version": "1.0"},
        json_body={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
    )


def every_kind_of_stream(server, tenant, alice, bob, cookie: str) -> None:
    """Each stream the stream tier serves, opened, fed and ended both ways."""
    web = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"}
    inboxes = [subscribe(server, bob), subscribe(server, alice, version=None)]
    tenant_feed = SSEClient(f"{server.url}/ui/t/{tenant.slug}/events/", headers=web)
    agent_feed = SSEClient(f"{server.url}/ui/t/{tenant.slug}/agents/{bob.id}/events/", headers=web)
    # A task followed from its send to its end, which ends the stream at the server.
    followed = a2a_stream(
        server, alice, "SendStreamingMessage", {"message": rpc.message(to=bob.id)}
    )
    task_id = followed.next().json()["result"]["task"]["id"]
    watched = a2a_stream(server, bob, "SubscribeToTask", {"id": task_id})
    assert "task" in watched.next().json()["result"]
    tasks = [send(server, alice, bob.id, f"note {i}")["id"] for i in range(3)]
    act(server, bob, task_id, "accept")
    act(server, bob, task_id, "complete", "done")
    for task in tasks:
        act(server, bob, task, "accept")
    assert followed.closed.wait(10) and watched.closed.wait(10)
    assert len(inboxes[0].take(4 + 5)) == 9  # four new tasks, five of their updates
    assert tenant_feed.take(9) and agent_feed.take(9)
    # A replay, dropped by its client before it is read.
    since = subscribe(server, bob, **{"Last-Event-ID": "0"})
    idle = (*inboxes, tenant_feed, agent_feed)  # through keepalives and checks
    testbed.wait_until(lambda: all(s.comments >= 2 for s in idle), timeout=10, what="keepalives")
    for stream in (*inboxes, tenant_feed, agent_feed, since, followed, watched):
        stream.close()
    testbed.wait_until(lambda: server.open_streams() == 0, timeout=10, what="the streams to end")


def test_streams_leave_no_reference_cycles(tenant, tmp_path):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    member = factories.user(f"member-{uuid.uuid4().hex[:6]}@example.com")
    tenant_services.add_member(tenant=tenant, user=member)
    cookie = session_cookie(member)
    server = SavingServer(tmp_path)
    with server.start(testbed.http_ok(f"{server.url}/healthz")):
        # Once first, for what a process builds on first use and keeps (modules imported
        # late, caches, prepared statements, the hub's Redis probe connecting), which may
        # leave garbage once.
        every_kind_of_stream(server, tenant, alice, bob, cookie)
        before = server.garbage()
        for _ in range(3):
            every_kind_of_stream(server, tenant, alice, bob, cookie)
        after = server.garbage(since=before["count"])
    assert after["left"] == [], json.dumps(after["left"])
