"""One coroutine per command: `(args, client, out)`; they raise, `main` reports."""

from __future__ import annotations

import argparse
import asyncio
import base64
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .. import render
from ..errors import BrokerError, ConfigurationError, HikyakuError
from ..http import HikyakuClient
from ..sse import InboxStream
from ..wire import build_parts
from .options import PROG
from .output import Output, UsageError
from .setup import cmd_setup


def _task_id(args: argparse.Namespace) -> str:
    task_id = args.task_option or args.task
    if not task_id:
        raise UsageError(f"{args.command}: a task id is required (TASK_ID or --task-id)")
    if args.task_option and args.task and args.task_option != args.task:
        raise UsageError(f"{args.command}: two different task ids given")
    return task_id.strip()


def _parts(args: argparse.Namespace, *, required: bool, default_text: str | None = None):
    data = getattr(args, "data", None)
    parts = build_parts(
        text=getattr(args, "text", None) or default_text,
        files=getattr(args, "file", []) or [],
        data=data,
        has_data=data is not None,
    )
    if required and not parts:
        raise UsageError(f"{args.command}: give --text, --file or --data")
    return parts


async def _names(client: HikyakuClient) -> dict[str, str]:
    """Agent id → name, for labelling tables; empty if the listing fails."""
    try:
        return {a["agent_id"]: a.get("name", "") for a in await client.list_all_agents()}
    except HikyakuError:
        return {}


async def _show_task(client: HikyakuClient, out: Output, task: dict[str, Any]) -> None:
    out.print(render.task_detail(task, names=await _names(client)))


# Commands. Each takes (args, client, output).


async def cmd_register(args, client: HikyakuClient, out: Output) -> None:
    if args.skills is not None and not isinstance(args.skills, list):
        raise UsageError("register: --skills must be a JSON list of skill objects")
    try:
        result = await client.register(
            name=args.name,
            description=args.description,
            skills=args.skills,
            webhook_url=args.webhook_url,
        )
    except BrokerError as exc:
        if exc.code != "AGENT_NAME_TAKEN":
            raise
        raise BrokerError(
            f"An agent named {args.name!r} is already registered in this tenant "
            f"[HTTP 409 AGENT_NAME_TAKEN]. Register under another --name, or free the name: "
            f"`{PROG} agents --search {shlex.quote(args.name)}` shows the agent holding it, "
            f"and `{PROG} deregister` run as that agent (or an owner in the web UI) removes it.",
            code=exc.code,
            status=exc.status,
        ) from None
    if out.as_json:
        out.json(result)
        return
    # Only `export` lines and comments, so `eval "$(hikyaku register …)"` works.
    lines = [
        f"# Registered agent {result.get('name', '')!r} ({result['agent_id']}).",
        "# The agent token is shown only once. Set these for subsequent commands:",
        f"export HIKYAKU_URL={shlex.quote(client.credentials.url)}",
        f"export HIKYAKU_AGENT_ID={shlex.quote(str(result['agent_id']))}",
        f"export HIKYAKU_AGENT_TOKEN={shlex.quote(str(result.get('agent_token', '')))}",
    ]
    sys.stdout.write("\n".join(lines) + "\n")


async def cmd_whoami(args, client: HikyakuClient, out: Output) -> None:
    agent = await client.whoami()
    if out.as_json:
        out.json(agent)
        return
    out.print(render.whoami_detail(agent))
    via = "agent token" if client.credentials.agent_token else "API key + X-Agent-Id"
    out.progress(f"Authenticated with {via} at {client.credentials.url}")


async def cmd_agents(args, client: HikyakuClient, out: Output) -> None:
    if args.detail_id:
        agent = await client.get_agent(args.detail_id)
        if out.as_json:
            out.json(agent)
        else:
            out.print(render.agent_detail(agent))
        return
    agents = await client.list_all_agents(q=args.q)
    if out.as_json:
        out.json(agents)
        return
    if not agents:
        out.print("No agents found.")
        return
    out.print(render.agents_table(agents, me=client.credentials.agent_id))


async def cmd_send(args, client: HikyakuClient, out: Output) -> None:
    task = await client.send(
        to=args.to,
        parts=_parts(args, required=True),
        reference_task_ids=[args.reply_to] if args.reply_to else None,
        message_id=args.message_id,
    )
    if out.as_json:
        out.json({"task": task})
        return
    names = await _names(client)
    out.print(f"Message sent to {render.recipient_label(task, names)}.")
    out.print(render.task_detail(task, names=names))


async def cmd_broadcast(args, client: HikyakuClient, out: Output) -> None:
    summary = await client.broadcast(parts=_parts(args, required=True), message_id=args.message_id)
    if out.as_json:
        out.json([{"task": summary}])
        return
    count = summary.get("metadata", {}).get("recipientCount", "?")
    out.print(f"Broadcast sent to {count} agent(s).")
    await _show_task(client, out, summary)


async def _list(args, client: HikyakuClient, out: Output, *, box: str) -> None:
    result = await client.list_tasks(
        box=box,
        status=args.status,
        since=args.since,
        page_size=args.page_size,
        page_token=args.page_token,
        peer=getattr(args, "to", None),
    )
    tasks = result.get("tasks", [])
    next_token = result.get("nextPageToken")
    if out.as_json:
        out.json(tasks)
    elif not tasks:
        out.print("No messages found." if box == "inbox" else "No sent tasks found.")
    else:
        names = await _names(client) if box == "outbox" else {}
        out.print(render.tasks_table(tasks, box=box, names=names))
    if next_token:
        out.progress(f"More: {PROG} {args.command} --page-token {next_token}")


async def cmd_poll(args, client: HikyakuClient, out: Output) -> None:
    await _list(args, client, out, box="inbox")


async def cmd_outbox(args, client: HikyakuClient, out: Output) -> None:
    await _list(args, client, out, box="outbox")


_DONE = {
    "ack": "Message acknowledged.",
    "accept": "Task accepted; you are working on it.",
    "complete": "Task completed.",
    "reject": "Task rejected.",
    "fail": "Task marked as failed.",
    "block": "Question sent; the task waits for the sender's reply.",
    "reply": "Reply sent; the recipient continues working.",
    "comment": "Comment added.",
}


def _action_command(action: str, *, parts_required: bool, default_text: str | None = None):
    async def run(args, client: HikyakuClient, out: Output) -> None:
        task_id = _task_id(args)
        parts = _parts(args, required=parts_required, default_text=default_text)
        task = await client.act(task_id=task_id, action=action, parts=parts or None)
        if out.as_json:
            out.json({"task": task})
            return
        out.print(_DONE[action])
        await _show_task(client, out, task)

    return run


async def cmd_cancel(args, client: HikyakuClient, out: Output) -> None:
    task = await client.cancel(_task_id(args))
    if out.as_json:
        out.json({"task": task})
        return
    out.print("Task canceled.")
    await _show_task(client, out, task)


async def cmd_get_task(args, client: HikyakuClient, out: Output) -> None:
    task = await client.get_task(_task_id(args), history_length=args.history_length)
    saved = save_files(task, args.save_files) if args.save_files else []
    if out.as_json:
        out.json({"task": task, **({"saved": saved} if args.save_files else {})})
        return
    await _show_task(client, out, task)
    for path in saved:
        out.progress(f"Saved {path}")
    if args.save_files and not saved:
        out.progress("The task has no files.")


def save_files(task: dict[str, Any], directory: str) -> list[str]:
    """Write every file (raw part) of the task into `directory`, each once, under its own
    name reduced to a plain file name (never a path); a name taken in the directory gets a
    numbered suffix. Returns the paths written."""
    target = Path(directory)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"Cannot create {directory!r}: {exc.strerror or exc}.") from None
    holders = [*(task.get("history") or []), *(task.get("artifacts") or [])]
    seen: set[tuple[str, str]] = set()
    written: list[str] = []
    for holder in holders:
        for part in holder.get("parts") or [] if isinstance(holder, dict) else []:
            if not isinstance(part, dict) or not isinstance(part.get("raw"), str):
                continue
            name = Path(str(part.get("filename") or "file").replace("\\", "/")).name
            name = name if name not in ("", ".", "..") else "file"
            if (name, part["raw"]) in seen:
                continue  # the message is in the history and in the first artifact
            seen.add((name, part["raw"]))
            try:
                content = base64.b64decode(part["raw"], validate=True)
            except ValueError:
                raise BrokerError(f"The file {name!r} is not valid base64.") from None
            path, n = target / name, 1
            while path.exists():
                path, n = target / f"{Path(name).stem}-{n}{Path(name).suffix}", n + 1
            path.write_bytes(content)
            written.append(str(path))
    return written


async def cmd_thread(args, client: HikyakuClient, out: Output) -> None:
    task_id = _task_id(args)
    task = await client.get_task(task_id)
    events = await client.all_task_events(task_id)
    if out.as_json:
        out.json({"task": task, "events": events})
        return
    await _show_task(client, out, task)
    out.print()
    out.print(render.events_table(events, task))


async def cmd_watch(args, client: HikyakuClient, out: Output) -> None:
    me = client.credentials.agent_id or "this agent"

    def status(state: str, detail: str) -> None:
        if state == "connecting":
            out.progress(f"Watching the inbox of {me} at {detail} (Ctrl-C to stop)…")
        elif state == "connected":
            out.progress("Live." if stream.connections <= 1 else "Reconnected; resuming.")
        elif state == "reconnecting":
            out.progress(f"Stream dropped: {detail}")

    stream = InboxStream(client, last_event_id=args.since_event, on_status=status)
    names = {} if out.as_json else await _names(client)
    seen = 0

    async def label(task: dict[str, Any]) -> None:
        """Learn the names of agents registered since the watch began."""
        meta = task.get("metadata") or {}
        for agent_id in (meta.get("fromAgentId"), meta.get("toAgentId")):
            if agent_id and agent_id not in names:
                names.update(await _names(client))
                names.setdefault(agent_id, "")

    async def consume() -> None:
        nonlocal seen
        async for event in stream.events():
            if event.event == "ready":
                continue
            task = event.task or {}
            if out.as_json:
                out.json({"id": event.id, "event": event.event, "task": task}, compact=True)
            else:
                await label(task)
                out.print(render.event_line(event.event, task, event_id=event.id, names=names))
            seen += 1
            if args.count and seen >= args.count:
                return

    try:
        if args.timeout:
            try:
                await asyncio.wait_for(consume(), timeout=args.timeout)
            except TimeoutError:
                pass
        else:
            await consume()
    finally:
        if stream.last_event_id:
            out.progress(f"Last event id: {stream.last_event_id} (resume with --since)")


async def cmd_deregister(args, client: HikyakuClient, out: Output) -> None:
    await client.deregister()
    if out.as_json:
        out.json({"status": "deregistered"})
        return
    out.print(f"Agent {client.credentials.agent_id} deregistered.")
    out.progress("Unset HIKYAKU_AGENT_ID and HIKYAKU_AGENT_TOKEN; they no longer work.")


Handler = Callable[[argparse.Namespace, HikyakuClient, Output], Awaitable[None]]

COMMANDS: dict[str, Handler] = {
    "register": cmd_register,
    "whoami": cmd_whoami,
    "agents": cmd_agents,
    "send": cmd_send,
    "broadcast": cmd_broadcast,
    "poll": cmd_poll,
    "outbox": cmd_outbox,
    "ack": _action_command("ack", parts_required=False),
    "accept": _action_command("accept", parts_required=False),
    "complete": _action_command("complete", parts_required=False),
    "reject": _action_command("reject", parts_required=False),
    "fail": _action_command("fail", parts_required=False),
    "block": _action_command("block", parts_required=True),
    "reply": _action_command("reply", parts_required=True),
    "comment": _action_command("comment", parts_required=True),
    "cancel": cmd_cancel,
    "get-task": cmd_get_task,
    "thread": cmd_thread,
    "watch": cmd_watch,
    "deregister": cmd_deregister,
    "setup": cmd_setup,
}
