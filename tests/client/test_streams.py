"""Live streams on the client side: `hikyaku watch` and the MCP server's inbox buffer, through
real drops of the connection (a proxy that is cut and restored)."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
import time

import pytest
from mcp import Client

from testbed import free_port
from tests.client.conftest import HIKYAKU, LIVE_DB, Agent, stream_available
from tests.client.proxy import CuttableProxy
from tests.client.test_mcp import call, over_stdio
from tests.live import suite_database_url
from tests.ops.processes import base_env as ops_env
from tests.ops.processes import granian_wsgi, running

pytestmark = LIVE_DB


@pytest.fixture(autouse=True)
def _needs_the_stream(client_broker):
    if not stream_available(client_broker.url):
        pytest.skip("the broker does not serve /api/v1/subscribe yet")


@pytest.fixture
def proxy(client_broker):
    proxy = CuttableProxy(target_port=client_broker.port, port=free_port()).start()
    yield proxy
    proxy.cut()


class Watch:
    """`hikyaku watch` running in the background, its output read line by line."""

    def __init__(self, agent: Agent, *args: str, url: str | None = None) -> None:
        env = {**agent.env, **({"HIKYAKU_URL": url} if url else {})}
        self.proc = subprocess.Popen(
            [HIKYAKU, "watch", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: queue.Queue[str] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        self.stderr_lines: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink.put(line.rstrip("\n"))

    def line(self, timeout: float = 20) -> str:
        return self.out.get(timeout=timeout)

    def wait_stderr(self, text: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.err.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.stderr_lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not in stderr: {self.stderr_lines}")

    def finish(self, timeout: float = 20) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_watch_prints_each_event_as_it_happens(register):
    alice, bob = register("alice"), register("bob")
    watch = Watch(bob, "--count", "2")
    try:
        watch.wait_stderr("Live.")
        task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "Deploy at 5?")["task"][
            "id"
        ]
        line = watch.line()
        assert "message" in line and task_id in line and "Deploy at 5?" in line
        assert f"alice ({alice.agent_id[:8]})" in line and "unread" in line
        alice.run_json("comment", task_id, "--text", "or 6")
        line = watch.line()
        assert "task-update" in line and "or 6" in line
        assert watch.finish() == 0
    finally:
        watch.stop()


def test_watch_json_prints_one_object_per_line(register):
    alice, bob = register("alice"), register("bob")
    watch = Watch(bob, "--json", "--count", "2")
    try:
        watch.wait_stderr("Live.")
        task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "one")["task"]["id"]
        bob.run_json("accept", task_id)
        events = [json.loads(watch.line()) for _ in range(2)]
        assert [e["event"] for e in events] == ["message", "task-update"]
        assert all(e["task"]["id"] == task_id for e in events)
        assert int(events[0]["id"]) < int(events[1]["id"])
        assert events[1]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert watch.finish() == 0
    finally:
        watch.stop()


def test_watch_since_replays_from_an_event_id(register):
    alice, bob = register("alice"), register("bob")
    watch = Watch(bob, "--json", "--count", "1")
    try:
        watch.wait_stderr("Live.")
        alice.run_json("send", "--to", bob.agent_id, "--text", "first")
        first = json.loads(watch.line())
        assert watch.finish() == 0
    finally:
        watch.stop()
    second = alice.run_json("send", "--to", bob.agent_id, "--text", "second")["task"]["id"]
    replay = bob.run("--json", "watch", "--since", first["id"], "--count", "1", timeout=30)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["task"]["id"] == second


def test_watch_since_0_shows_each_event_as_the_task_was_then(register):
    """A replay shows every event with the state and message of its own moment, not the
    task's final state four times over (the question of the block is there)."""
    alice, bob = register("alice"), register("bob")
    task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "Fix the uploader")["task"][
        "id"
    ]
    bob.run_json("accept", task_id)
    bob.run_json("block", task_id, "--question", "Which branch?")
    alice.run_json("reply", task_id, "--text", "main")
    bob.run_json("complete", task_id, "--text", "Fixed in abc123")

    replay = bob.run("watch", "--since", "0", "--count", "5", timeout=30)
    assert replay.returncode == 0, replay.stderr
    lines = replay.stdout.splitlines()
    assert len(lines) == 5, lines
    assert "message" in lines[0] and "unread" in lines[0] and "Fix the uploader" in lines[0]
    assert "working" in lines[1] and "accept" in lines[1]
    assert "blocked" in lines[2] and "block: Which branch?" in lines[2]
    assert "working" in lines[3] and "reply: main" in lines[3]
    assert "completed" in lines[4] and "Fixed in abc123" in lines[4]
    assert sum("Fixed in abc123" in line for line in lines) == 1

    events = [
        json.loads(line)
        for line in bob.run("--json", "watch", "--since", "0", "--count", "5").stdout.splitlines()
    ]
    states = [(e["task"]["status"]["state"], e["task"]["metadata"].get("awaiting")) for e in events]
    assert states == [
        ("TASK_STATE_INPUT_REQUIRED", "recipient"),
        ("TASK_STATE_WORKING", None),
        ("TASK_STATE_INPUT_REQUIRED", "sender"),
        ("TASK_STATE_WORKING", None),
        ("TASK_STATE_COMPLETED", None),
    ]
    question = events[2]["task"]["status"]["message"]
    assert question["parts"] == [{"text": "Which branch?"}]
    assert [len(e["task"]["history"]) for e in events] == [1, 2, 3, 4, 5]


def test_watch_resumes_after_a_drop_without_missing_events(register, proxy):
    alice, bob = register("alice"), register("bob")
    watch = Watch(bob, "--json", "--count", "2", url=proxy.url)
    try:
        watch.wait_stderr("Live.")
        alice.run_json("send", "--to", bob.agent_id, "--text", "before the drop")
        before = json.loads(watch.line())
        proxy.cut()
        watch.wait_stderr("Stream dropped")
        during = alice.run_json("send", "--to", bob.agent_id, "--text", "during the drop")
        time.sleep(1)
        proxy.restore()
        watch.wait_stderr("Reconnected; resuming.")
        after = json.loads(watch.line(timeout=30))
        assert after["task"]["id"] == during["task"]["id"]
        assert int(after["id"]) > int(before["id"])
        assert watch.finish() == 0
    finally:
        watch.stop()


def test_watch_ends_cleanly_on_sigterm_with_the_resume_point(register):
    bob = register("bob")
    watch = Watch(bob)
    try:
        watch.wait_stderr("Live.")
        watch.proc.terminate()
        assert watch.finish() == 0
        watch.wait_stderr("(resume with --since)")
    finally:
        watch.stop()


def test_watch_stops_with_one_error_line_when_the_agent_is_deregistered(register):
    bob = register("bob")
    watch = Watch(bob)
    try:
        watch.wait_stderr("Live.")
        assert bob.run("deregister").returncode == 0
        assert watch.finish(timeout=40) == 1
        time.sleep(0.2)  # let the reader thread drain stderr
        while not watch.err.empty():
            watch.stderr_lines.append(watch.err.get())
        errors = [line for line in watch.stderr_lines if line.startswith("Error")]
        assert len(errors) == 1, watch.stderr_lines
        assert "no longer active" in errors[0] or "401" in errors[0]
    finally:
        watch.stop()


def test_watch_against_a_web_process_stops_with_one_error_saying_where_streams_are(
    register, tmp_path
):
    """A web (WSGI) process serves no streams: `watch` pointed at one gets its 421 and stops
    with the broker's explanation instead of retrying for ever."""
    bob = register("bob")
    port = free_port()
    web = granian_wsgi(port)
    env = ops_env(DATABASE_URL=suite_database_url())
    with running(
        web, env=env, log=tmp_path / "web.log", ready_url=f"http://127.0.0.1:{port}/healthz"
    ):
        watch = Watch(bob, url=f"http://127.0.0.1:{port}")
        try:
            assert watch.finish(timeout=30) == 1
            time.sleep(0.2)  # let the reader thread drain stderr
            while not watch.err.empty():
                watch.stderr_lines.append(watch.err.get())
            errors = [line for line in watch.stderr_lines if line.startswith("Error")]
            assert len(errors) == 1, watch.stderr_lines
            assert "not served here" in errors[0] and "proxy" in errors[0]
        finally:
            watch.stop()


def test_mcp_poll_returns_a_message_that_arrived_while_the_stream_was_down(register, proxy):
    me, peer = register("mcp-me"), register("peer")
    env = {**me.env, "HIKYAKU_URL": proxy.url}

    async def stream_state(client: Client) -> str:
        return (await call(client, "whoami")).structured_content["stream"]

    async def until(client: Client, predicate, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = await stream_state(client)
            if predicate(state):
                return state
            await asyncio.sleep(0.2)
        raise AssertionError(f"stream state stayed {state!r}")

    async def body(client: Client) -> None:
        await until(client, lambda s: s == "connected")
        assert (await call(client, "poll")).structured_content["items"] == []
        proxy.cut()
        await asyncio.sleep(0.5)
        sent = peer.run_json("send", "--to", me.agent_id, "--text", "while you were away")
        await asyncio.sleep(1)
        proxy.restore()
        await until(client, lambda s: s == "connected")
        polled = await call(client, "poll", wait=10)
        (item,) = polled.structured_content["items"]
        assert item["task"]["id"] == sent["task"]["id"]
        assert item["event"] == "message"
        # It came through the resumed stream (a replayed event), not a fallback listing.
        assert item["eventId"] is not None

    async def main() -> None:
        async with over_stdio(env) as client:
            await body(client)

    asyncio.run(asyncio.wait_for(main(), 120))


def test_mcp_stream_delivers_updates_on_tasks_i_sent(register):
    me, peer = register("mcp-me"), register("peer")

    async def main() -> None:
        async with over_stdio({**me.env, "HIKYAKU_API_KEY": me.api_key}) as client:
            sent = await call(client, "send", to=peer.agent_id, text="please")
            task_id = sent.structured_content["task"]["id"]
            peer.run_json("accept", task_id)
            peer.run_json("block", task_id, "--question", "when?")
            seen = []
            for _ in range(10):
                polled = await call(client, "poll", wait=2)
                seen += polled.structured_content["items"]
                if any(i["task"]["metadata"].get("awaiting") == "sender" for i in seen):
                    break
            assert seen and all(i["event"] == "task-update" for i in seen)
            # Updates on one task collapse into its latest version; my own send is not echoed.
            assert [i["task"]["id"] for i in seen].count(task_id) <= 2
            assert seen[-1]["task"]["status"]["message"]["parts"] == [{"text": "when?"}]

    asyncio.run(asyncio.wait_for(main(), 120))
