"""The MCP tools, shared by the stdio server (`hikyaku-mcp`) and the broker's `/mcp` mount.

`build_server(resolve)` returns an `MCPServer` whose tools get their broker session from
`resolve(ctx)`, an async context manager yielding a `ToolSession`:

* stdio (`mcp_server.LocalSession`): one identity from the environment; `poll` answers from a
  local buffer fed by the inbox stream.
* Streamable HTTP (`messaging/mcp_http.py`): a `StatelessSession` per request, on a
  `HikyakuClient` that calls the broker in-process with the caller's credentials; `poll`
  answers "what is waiting for me" from the broker.

Every tool returns structured content (the A2A 1.0 objects) plus a short text summary, and
turns broker errors into tool errors with one readable line. Which tools a server offers, the
texts that differ between stdio and `/mcp`, and the refusal of unknown arguments are in
`mcp_profiles`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Annotated, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from . import __version__, render
from .errors import HikyakuError
from .http import HikyakuClient
from .mcp_profiles import ALL, STDIO, StrictTool, Surface, compact_schema
from .wire import build_parts, normalize_state

__all__ = ["StatelessSession", "ToolSession", "build_server", "compact_schema", "waiting_for_me"]

TaskId = Annotated[str, Field(description="task id")]
Text = Annotated[str, Field(description="text")]
OptionalText = Annotated[str | None, Field(description="text")]
Data = Annotated[Any, Field(description="optional JSON data part")]


class ToolSession(Protocol):
    client: HikyakuClient

    async def poll(
        self, *, since: str | None, status: str | None, page_size: int | None, wait: float
    ) -> dict[str, Any]: ...

    def stream_status(self) -> str: ...

    def note_own(self, task: dict[str, Any]) -> None: ...

    async def adopt(self, registration: dict[str, Any]) -> bool: ...

    async def forget(self) -> None: ...


SessionResolver = Callable[[Context], AbstractAsyncContextManager[ToolSession]]


async def waiting_for_me(
    client: HikyakuClient, *, since: str | None = None, limit: int = 1000
) -> list[dict[str, Any]]:
    """Items `{event, task}` that wait for this agent: unread tasks in the inbox ("message")
    and tasks it sent whose recipient asked it a question ("task-update"), oldest first."""
    items: list[dict[str, Any]] = []
    for box, event, awaiting in (
        ("inbox", "message", "recipient"),
        ("outbox", "task-update", "sender"),
    ):
        token: str | None = None
        found: list[dict[str, Any]] = []
        while len(found) < limit:
            page = await client.list_tasks(
                box=box,
                status="TASK_STATE_INPUT_REQUIRED",
                since=since,
                page_size=100,
                page_token=token,
            )
            for task in page.get("tasks", []):
                if (task.get("metadata") or {}).get("awaiting", awaiting) == awaiting:
                    found.append(task)
            token = page.get("nextPageToken")
            if not token:
                break
        # ListTasks is newest first; news reads best oldest first.
        items.extend({"event": event, "task": task} for task in reversed(found[:limit]))
    items.sort(key=lambda item: str((item["task"].get("status") or {}).get("timestamp", "")))
    return items


class StatelessSession:
    """A session with no local state: `poll` asks the broker what waits for the agent (the
    same items until acted on). Used by the `/mcp` mount, one per request."""

    def __init__(self, client: HikyakuClient) -> None:
        self.client = client

    async def poll(
        self, *, since: str | None, status: str | None, page_size: int | None, wait: float
    ) -> dict[str, Any]:
        if status:
            result = await self.client.list_tasks(status=status, since=since, page_size=page_size)
            items = [{"event": "message", "task": t} for t in result.get("tasks", [])]
            remaining = 1 if result.get("nextPageToken") else 0
        else:
            items = await waiting_for_me(self.client, since=since)
            remaining = max(0, len(items) - page_size) if page_size else 0
            items = items[:page_size] if page_size else items
        return {"items": items, "remaining": remaining, "stream": self.stream_status()}

    def stream_status(self) -> str:
        return "none (each poll lists what waits for you)"

    def note_own(self, task: dict[str, Any]) -> None:
        pass

    async def adopt(self, registration: dict[str, Any]) -> bool:
        return False

    async def forget(self) -> None:
        pass


def _result(text: str, data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _parts(text: str | None, data: Any) -> list[dict[str, Any]]:
    return build_parts(text=text or None, data=data, has_data=data is not None)


def _since(value: str | None) -> str | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(f"since must be an ISO 8601 timestamp, got {value!r}") from None
    if moment.tzinfo is None:
        raise ToolError("since needs a time zone, e.g. 2026-01-31T12:00:00Z")
    return moment.isoformat()


def _state(value: str | None) -> str | None:
    if not value:
        return None
    try:
        return normalize_state(value)
    except HikyakuError as exc:
        raise ToolError(str(exc)) from None


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

_DONE = {
    "ack": "Acknowledged",
    "accept": "Accepted (you are working on it)",
    "complete": "Completed",
    "reject": "Rejected",
    "fail": "Marked failed",
    "block": "Question sent; waiting for the sender's reply",
    "reply": "Reply sent; the recipient continues",
    "comment": "Comment added",
}


def build_server(
    resolve: SessionResolver,
    *,
    name: str = "hikyaku",
    lifespan: Callable[[MCPServer], AbstractAsyncContextManager[Any]] | None = None,
    surface: Surface = STDIO,
    tools: Iterable[str] = ALL,
) -> MCPServer:
    """The MCP server offering `tools` (names from `mcp_profiles.ALL`), worded for `surface`."""
    offered = set(tools)
    specs: list[StrictTool] = []

    def tool(description: str, annotations: ToolAnnotations = _WRITE):
        def register_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
            if fn.__name__ not in offered:
                return fn
            spec = StrictTool.from_function(fn, description=description, annotations=annotations)
            spec.parameters = {**compact_schema(spec.parameters), "additionalProperties": False}
            specs.append(spec)
            return fn

        return register_tool

    async def act(ctx: Context, task_id: str, action: str, parts: list[dict[str, Any]]):
        async with resolve(ctx) as session:
            try:
                task = await session.client.act(task_id=task_id, action=action, parts=parts or None)
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            session.note_own(task)
        return _result(f"{_DONE[action]}: {render.task_summary(task)}", {"task": task})

    @tool(surface.whoami, _READ)
    async def whoami(ctx: Context) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                agent = await session.client.whoami()
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            stream = session.stream_status()
        text = f"You are {agent.get('name')} ({agent.get('agent_id')})"
        if agent.get("tenant"):
            text += f" in tenant {agent['tenant'].get('slug')}"
        if "send_to" in agent:
            text += (
                f". You may send to {render.relation_text(agent.get('send_to'))} and receive "
                f"from {render.relation_text(agent.get('receive_from'))}; disclosure ceiling "
                f"{agent.get('disclosure_ceiling')}; policy revision {agent.get('policy_revision')}"
            )
        return _result(f"{text}. Stream: {stream}.", {"agent": agent, "stream": stream})

    @tool("List the tenant's active agents; with id, one agent's details.", _READ)
    async def agents(
        ctx: Context,
        id: Annotated[str | None, Field(description="agent id for details")] = None,
        q: Annotated[str | None, Field(description="filter by name")] = None,
    ) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                if id:
                    agent = await session.client.get_agent(id)
                    text = (
                        f"{agent.get('name')} ({agent.get('agent_id')}): {agent.get('description')}"
                    )
                    return _result(text, {"agent": agent})
                found = await session.client.list_all_agents(q=q)
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
        lines = [f"{len(found)} agent(s):"] + [
            f"- {a.get('name')} ({a.get('agent_id')}): {render.clip(a.get('description', ''), 100)}"
            for a in found
        ]
        return _result("\n".join(lines), {"agents": found})

    @tool("Send a message to an agent; it becomes a task in their inbox.")
    async def send(
        ctx: Context,
        to: Annotated[str, Field(description="recipient agent id")],
        text: OptionalText = None,
        data: Data = None,
        reply_to: Annotated[str | None, Field(description="task id this answers")] = None,
    ) -> CallToolResult:
        parts = _parts(text, data)
        if not parts:
            raise ToolError("Give text or data.")
        async with resolve(ctx) as session:
            try:
                task = await session.client.send(
                    to=to, parts=parts, reference_task_ids=[reply_to] if reply_to else None
                )
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            session.note_own(task)
        return _result(f"Sent: {render.task_summary(task, box='outbox')}", {"task": task})

    @tool("Send a message to every other agent of the tenant.")
    async def broadcast(ctx: Context, text: Text, data: Data = None) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                summary = await session.client.broadcast(parts=_parts(text, data))
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
        count = (summary.get("metadata") or {}).get("recipientCount", "?")
        return _result(
            f"Broadcast to {count} agent(s): task {summary.get('id')}", {"task": summary}
        )

    @tool(surface.poll, _READ)
    async def poll(
        ctx: Context,
        since: Annotated[str | None, Field(description="ISO 8601; changed at/after")] = None,
        page_size: Annotated[int | None, Field(ge=1, le=100, description="max items")] = None,
        status: Annotated[str | None, Field(description="state, e.g. unread, blocked")] = None,
        wait: Annotated[float, Field(ge=0, le=300, description="seconds to wait if none")] = 0,
    ) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                result = await session.poll(
                    since=_since(since), status=_state(status), page_size=page_size, wait=wait
                )
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
        items = result["items"]
        if not items:
            text = f"Nothing new. Stream: {result['stream']}."
        else:
            lines = [f"{len(items)} item(s); {result['remaining']} more waiting:"]
            for item in items:
                box = "inbox" if item["event"] == "message" else _box_of(item["task"], session)
                label = "NEW" if item["event"] == "message" else "UPDATE"
                lines.append(f"- {label} {render.task_summary(item['task'], box=box)}")
            text = "\n".join(lines)
        return _result(text, result)

    @tool("Acknowledge a received message (unread → completed).")
    async def ack(ctx: Context, task_id: TaskId) -> CallToolResult:
        return await act(ctx, task_id, "ack", [])

    @tool("Accept a received task and work on it; finish with complete, reject or fail.")
    async def accept(ctx: Context, task_id: TaskId) -> CallToolResult:
        return await act(ctx, task_id, "accept", [])

    @tool("Finish a task with its result (→ completed).")
    async def complete(
        ctx: Context, task_id: TaskId, text: OptionalText = None, data: Data = None
    ) -> CallToolResult:
        return await act(ctx, task_id, "complete", _parts(text, data))

    @tool("Decline a received task (→ rejected).")
    async def reject(ctx: Context, task_id: TaskId, reason: OptionalText = None) -> CallToolResult:
        return await act(ctx, task_id, "reject", _parts(reason, None))

    @tool("Report that a task you accepted failed (→ failed).")
    async def fail(ctx: Context, task_id: TaskId, reason: OptionalText = None) -> CallToolResult:
        return await act(ctx, task_id, "fail", _parts(reason, None))

    @tool("Ask the sender a question; the task waits for their reply.")
    async def block(ctx: Context, task_id: TaskId, question: Text) -> CallToolResult:
        return await act(ctx, task_id, "block", _parts(question, None))

    @tool("Answer the recipient's question on a task you sent (→ working).")
    async def reply(ctx: Context, task_id: TaskId, text: Text, data: Data = None) -> CallToolResult:
        return await act(ctx, task_id, "reply", _parts(text, data))

    @tool("Add a note to a task without changing its state.")
    async def comment(ctx: Context, task_id: TaskId, text: Text) -> CallToolResult:
        return await act(ctx, task_id, "comment", _parts(text, None))

    @tool("Retract a message you sent that is still unread (→ canceled).")
    async def cancel(ctx: Context, task_id: TaskId) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                task = await session.client.cancel(task_id)
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            session.note_own(task)
        return _result(f"Canceled: {render.task_summary(task, box='outbox')}", {"task": task})

    @tool("A task with its messages and result.", _READ)
    async def get_task(
        ctx: Context,
        task_id: TaskId,
        history_length: Annotated[int | None, Field(ge=0, description="last N messages")] = None,
    ) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                task = await session.client.get_task(task_id, history_length=history_length)
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            box = _box_of(task, session)
        lines = [render.task_summary(task, box=box)]
        for message in task.get("history") or []:
            action = (message.get("metadata") or {}).get("action") or "message"
            who = "recipient" if message.get("role") == "ROLE_AGENT" else "sender"
            lines.append(f"- {who} [{action}]: {render.parts_summary(message.get('parts'))}")
        return _result("\n".join(lines), {"task": task})

    @tool("Tasks you sent, newest change first.", _READ)
    async def outbox(
        ctx: Context,
        status: Annotated[str | None, Field(description="state, e.g. working, blocked")] = None,
        to: Annotated[str | None, Field(description="recipient agent id")] = None,
        page_size: Annotated[int | None, Field(ge=1, le=100, description="max tasks")] = None,
    ) -> CallToolResult:
        async with resolve(ctx) as session:
            try:
                result = await session.client.list_tasks(
                    box="outbox", status=_state(status), peer=to, page_size=page_size
                )
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
        tasks = result.get("tasks", [])
        lines = [f"{len(tasks)} sent task(s):"] + [
            f"- {render.task_summary(t, box='outbox')}" for t in tasks
        ]
        return _result(
            "\n".join(lines), {"tasks": tasks, "nextPageToken": result.get("nextPageToken", "")}
        )

    @tool(surface.register)
    async def register(
        ctx: Context,
        name: Annotated[str, Field(description="agent name")],
        description: Annotated[str, Field(description="what the agent does")],
        skills: Annotated[
            list[dict[str, Any]] | str | None, Field(description="A2A skills (list or JSON)")
        ] = None,
        api_key: Annotated[str | None, Field(description="tenant API key (hky_…)")] = None,
    ) -> CallToolResult:
        if isinstance(skills, str):
            try:
                skills = json.loads(skills)
            except ValueError as exc:
                raise ToolError(f"skills is not valid JSON: {exc}") from None
        async with resolve(ctx) as session:
            if not (api_key or session.client.credentials.api_key):
                raise ToolError(surface.missing_key)
            try:
                registration = await session.client.register(
                    name=name, description=description, skills=skills, api_key=api_key
                )
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            adopted = await session.adopt(registration)
        text = f"Registered {registration.get('name')} ({registration.get('agent_id')})."
        text += " This server now acts as it." if adopted else f" {surface.registered_not_adopted}"
        return _result(text, {**registration, "adopted": adopted})

    @tool("Deregister the calling agent; its credentials stop working.", _DESTRUCTIVE)
    async def deregister(ctx: Context) -> CallToolResult:
        async with resolve(ctx) as session:
            agent_id = session.client.credentials.agent_id
            try:
                await session.client.deregister()
            except HikyakuError as exc:
                raise ToolError(str(exc)) from None
            await session.forget()
        return _result(f"Agent {agent_id} deregistered.", {"status": "deregistered"})

    return MCPServer(
        name, version=__version__, instructions=surface.instructions, lifespan=lifespan, tools=specs
    )


def _box_of(task: dict[str, Any], session: ToolSession) -> str:
    me = session.client.credentials.agent_id
    from_id = (task.get("metadata") or {}).get("fromAgentId")
    return "outbox" if me and from_id == me else "inbox"
