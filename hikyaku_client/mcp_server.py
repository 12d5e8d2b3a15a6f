"""`hikyaku-mcp`: the MCP server over stdio, acting as the agent configured in the environment
(`HIKYAKU_URL`, `HIKYAKU_AGENT_TOKEN` or `HIKYAKU_API_KEY` + `HIKYAKU_AGENT_ID`), offering the
tools `HIKYAKU_MCP_TOOLS` selects (`core`, `all` or a comma list; `mcp_profiles`).

While it runs it holds the agent's inbox stream open and buffers what arrives, so `poll`
answers instantly. Startup order matters for not losing anything: the stream connects first,
and only once it is live (`ready`) is the inbox backfilled from ListTasks; a message arriving in
between is seen by both and collapses into one buffered item. After a drop the stream resumes
with `Last-Event-ID`, so messages sent while it was disconnected are replayed into the buffer;
while it is down, `poll` also asks the broker directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from .config import Credentials
from .errors import HikyakuError
from .http import HikyakuClient
from .inbox import InboxBuffer
from .mcp_profiles import ALL, TOOLS_VARIABLE, select_tools
from .mcp_tools import build_server, waiting_for_me
from .sse import InboxStream

log = logging.getLogger("hikyaku_mcp")

FIRST_POLL_WAIT_SECONDS = 10.0


class _OwnActionsClient(HikyakuClient):
    """The broker client of a stdio session: it tells the inbox buffer about each of the
    agent's own actions before sending it, so the action's echo on the stream is recognised
    even when it arrives before the answer (InboxBuffer.own_action)."""

    def __init__(self, credentials: Credentials, buffer: InboxBuffer) -> None:
        super().__init__(credentials)
        self.buffer = buffer

    async def act(self, *, task_id: str, **kwargs: Any) -> dict[str, Any]:
        with self.buffer.own_action(task_id):
            task = await super().act(task_id=task_id, **kwargs)
            self.buffer.note_own(task)
        return task

    async def cancel(self, task_id: str) -> dict[str, Any]:
        with self.buffer.own_action(task_id):
            task = await super().cancel(task_id)
            self.buffer.note_own(task)
        return task


class LocalSession:
    """One agent identity, its stream and its inbox buffer, for the life of the process."""

    def __init__(self, credentials: Credentials) -> None:
        self.buffer = InboxBuffer()
        self.client: HikyakuClient = _OwnActionsClient(credentials, self.buffer)
        self._stream: InboxStream | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._status = "not started"
        self._backfilled = asyncio.Event()

    # Lifecycle.

    def start(self) -> None:
        credentials = self.client.credentials
        if not credentials.has_agent_identity:
            self._status = "off (no agent identity: set HIKYAKU_AGENT_TOKEN or register)"
            self._backfilled.set()
            return
        self._backfilled = asyncio.Event()
        self._stream_task = asyncio.create_task(self._run_stream(), name="hikyaku-inbox-stream")

    async def stop(self) -> None:
        task, self._stream_task = self._stream_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._stream = None

    async def aclose(self) -> None:
        await self.stop()
        await self.client.aclose()

    async def _switch(self, credentials: Credentials) -> None:
        await self.stop()
        await self.client.aclose()
        self.client = _OwnActionsClient(credentials, self.buffer)
        self.start()

    def _on_status(self, state: str, detail: str) -> None:
        self._status = state if state != "reconnecting" else f"reconnecting ({detail})"
        log.info("inbox stream %s %s", state, detail)

    async def _run_stream(self) -> None:
        stream = InboxStream(self.client, on_status=self._on_status)
        self._stream = stream
        try:
            async for event in stream.events():
                if event.event == "ready":
                    self._learn_agent_id(event.data)
                    if not self._backfilled.is_set():
                        await self._refill()
                        self._backfilled.set()
                    continue
                task = event.task
                if task and event.event in ("message", "task-update"):
                    self.buffer.offer(task, event=event.event, event_id=event.id)
        except HikyakuError as exc:
            self._status = f"unavailable ({exc})"
            log.warning("inbox stream stopped: %s", exc)
            if not self._backfilled.is_set():
                await self._refill()
                self._backfilled.set()

    def _learn_agent_id(self, ready: Any) -> None:
        """With only an agent token configured, the stream tells us who we are."""
        credentials = self.client.credentials
        if credentials.agent_id or not isinstance(ready, dict) or not ready.get("agent_id"):
            return
        self.client.credentials = credentials.with_agent(
            agent_id=str(ready["agent_id"]), agent_token=credentials.agent_token
        )

    async def _refill(self) -> None:
        """Buffer what waits for us according to the broker (backfill, and the fallback while
        the stream is down). Already returned versions are not offered again."""
        if not self.client.credentials.agent_id:
            return
        try:
            for item in await waiting_for_me(self.client):
                self.buffer.offer(item["task"], event=item["event"])
        except HikyakuError as exc:
            log.warning("inbox backfill failed: %s", exc)

    # ToolSession.

    def stream_status(self) -> str:
        return self._status

    def note_own(self, task: dict[str, Any]) -> None:
        self.buffer.note_own(task)

    async def poll(
        self, *, since: str | None, status: str | None, page_size: int | None, wait: float
    ) -> dict[str, Any]:
        if not self.client.credentials.has_agent_identity:
            self.client.credentials.agent_headers()  # raises the explanatory error
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._backfilled.wait(), FIRST_POLL_WAIT_SECONDS)
        if self._stream is None or self._stream.state != "connected":
            await self._refill()
        since_moment = datetime.fromisoformat(since) if since else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            items = self.buffer.take(since=since_moment, status=status, page_size=page_size)
            remaining = deadline - loop.time()
            if items or remaining <= 0:
                break
            await self.buffer.wait_for_change(remaining)
        return {
            "items": [
                {"event": item.event, "task": item.task, "eventId": item.event_id} for item in items
            ],
            "remaining": len(self.buffer),
            "stream": self.stream_status(),
        }

    async def adopt(self, registration: dict[str, Any]) -> bool:
        if self.client.credentials.has_agent_identity:
            return False
        await self._switch(
            self.client.credentials.with_agent(
                agent_id=str(registration["agent_id"]),
                agent_token=registration.get("agent_token"),
            )
        )
        return True

    async def forget(self) -> None:
        await self._switch(self.client.credentials.with_agent(agent_id=None, agent_token=None))


def create_server(
    credentials: Credentials, *, tools: Iterable[str] = ALL
) -> tuple[MCPServer, LocalSession]:
    session = LocalSession(credentials)

    @contextlib.asynccontextmanager
    async def resolve(ctx: Context) -> AsyncIterator[LocalSession]:
        yield session

    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[None]:
        session.start()
        try:
            yield
        finally:
            await session.aclose()

    return build_server(resolve, lifespan=lifespan, tools=tools), session


def main() -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="hikyaku-mcp: %(levelname)s %(message)s"
    )
    try:
        tools = select_tools(os.environ.get(TOOLS_VARIABLE))
        credentials = Credentials.from_env()
    except HikyakuError as exc:
        # Before the MCP session starts, stderr is the only place a client shows.
        sys.stderr.write(f"hikyaku-mcp: {exc}\n")
        return 2
    if not credentials.api_key and not credentials.agent_token:
        log.warning(
            "no credentials: set HIKYAKU_AGENT_TOKEN (or HIKYAKU_API_KEY + HIKYAKU_AGENT_ID)"
        )
    server, _session = create_server(credentials, tools=tools)
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
