"""Human-readable rendering of agents, tasks and stream events (rich tables, local time),
plus the one-line summaries the MCP tools return as text."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .wire import state_after_event, state_of

STATE_STYLES = {
    "unread": "bold yellow",
    "blocked": "bold magenta",
    "working": "cyan",
    "completed": "green",
    "rejected": "red",
    "failed": "red",
    "canceled": "dim",
}


def local_time(value: str | None) -> str:
    """An ISO 8601 timestamp as local time, `YYYY-MM-DD HH:MM:SS`; '' when absent."""
    if not value:
        return ""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def short_state(task: dict[str, Any]) -> str:
    """`unread`, `blocked`, `working`, `completed`, … (the one vocabulary: wire.state_of)."""
    return state_of(task)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def part_summary(part: dict[str, Any]) -> str:
    if "text" in part:
        return str(part["text"])
    if "raw" in part:
        try:
            size = len(base64.b64decode(part["raw"]))
        except (ValueError, TypeError):
            size = 0
        name = part.get("filename") or "file"
        return f"[file {name}, {_size(size)}]"
    if "url" in part:
        name = part.get("filename")
        return f"[url {part['url']}" + (f" ({name})]" if name else "]")
    if "data" in part:
        return "[data " + json.dumps(part["data"], separators=(",", ":"), ensure_ascii=False) + "]"
    return "[part]"


def parts_summary(parts: Iterable[dict[str, Any]] | None) -> str:
    return " ".join(part_summary(p) for p in parts or [] if isinstance(p, dict))


def message_text(task: dict[str, Any]) -> str:
    """The text of the message the task delivers (its first artifact, else the first message)."""
    for artifact in task.get("artifacts") or []:
        summary = parts_summary(artifact.get("parts"))
        if summary:
            return summary
    history = task.get("history") or []
    if history:
        return parts_summary(history[0].get("parts"))
    return ""


def message_body(message: dict[str, Any]) -> str:
    """A follow-up's content; '' when it only names its verb (`accept` with no text)."""
    text = parts_summary(message.get("parts"))
    action = (message.get("metadata") or {}).get("action")
    return "" if action and text == action else text


def latest_text(task: dict[str, Any]) -> str:
    """The last follow-up on the task (status message, else the last history entry)."""
    status_message = task.get("status", {}).get("message")
    if isinstance(status_message, dict) and status_message.get("parts"):
        return message_body(status_message)
    history = task.get("history") or []
    if len(history) > 1:
        return message_body(history[-1])
    return ""


def clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def short_id(value: str | None) -> str:
    return (value or "")[:8]


def agent_label(agent_id: str | None, name: str | None = None) -> str:
    if name:
        return f"{name} ({short_id(agent_id)})"
    return agent_id or "?"


def _row(table: Table, *cells: Any) -> None:
    """Add a row whose cells are plain text: user content is never read as rich markup."""
    table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in cells))


def make_console(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        # Piped output: wide enough that tables are not wrapped into unreadable columns.
        console = Console(stderr=stderr, highlight=False, width=200, soft_wrap=False)
    return console


def _styled_state(task: dict[str, Any]) -> Text:
    state = short_state(task)
    return Text(state, style=STATE_STYLES.get(state, ""))


def tasks_table(tasks: list[dict[str, Any]], *, box: str = "inbox", names: dict | None = None):
    """Inbox: who sent it; outbox: who it went to."""
    names = names or {}
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("TASK", no_wrap=True)
    table.add_column("FROM" if box == "inbox" else "TO", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("UPDATED", no_wrap=True)
    table.add_column("MESSAGE", overflow="ellipsis", no_wrap=True)
    for task in tasks:
        meta = task.get("metadata", {})
        if box == "inbox":
            peer_id = meta.get("fromAgentId")
            peer = agent_label(peer_id, meta.get("fromAgentName") or names.get(peer_id))
        else:
            peer_id = meta.get("toAgentId") or task.get("contextId")
            peer = agent_label(peer_id, meta.get("toAgentName") or names.get(peer_id))
        text = message_text(task)
        latest = latest_text(task)
        if latest:
            text = f"{clip(text, 40)} ⟶ {latest}"
        _row(
            table,
            task.get("id", "?"),
            peer,
            _styled_state(task),
            local_time(task.get("status", {}).get("timestamp")),
            clip(text, 100),
        )
    return table


def agents_table(agents: list[dict[str, Any]], *, me: str | None = None):
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("AGENT ID", no_wrap=True)
    table.add_column("NAME", no_wrap=True)
    table.add_column("REGISTERED", no_wrap=True)
    table.add_column("LAST SEEN", no_wrap=True)
    table.add_column("DESCRIPTION", overflow="ellipsis", no_wrap=True)
    for agent in agents:
        name = agent.get("name", "")
        if me and agent.get("agent_id") == me:
            name = f"{name} (you)"
        _row(
            table,
            agent.get("agent_id", "?"),
            name,
            local_time(agent.get("registered_at")),
            local_time(agent.get("last_seen_at")),
            clip(agent.get("description", ""), 60),
        )
    return table


def agent_detail(agent: dict[str, Any]):
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    _row(table, "agent_id", agent.get("agent_id", "?"))
    _row(table, "name", agent.get("name", ""))
    _row(table, "description", agent.get("description", ""))
    _row(table, "status", agent.get("status", "active"))
    _row(table, "registered", local_time(agent.get("registered_at")))
    if agent.get("last_seen_at"):
        _row(table, "last seen", local_time(agent.get("last_seen_at")))
    skills = agent.get("skills") or []
    if skills:
        _row(
            table,
            "skills",
            ", ".join(f"{s.get('name') or s.get('id')}" for s in skills if isinstance(s, dict)),
        )
    if agent.get("webhook_url"):
        _row(table, "webhook", agent["webhook_url"])
    return table


def recipient_label(task: dict[str, Any], names: dict[str, str] | None = None) -> str:
    meta = task.get("metadata", {})
    recipient = meta.get("toAgentId") or task.get("contextId")
    return agent_label(recipient, meta.get("toAgentName") or (names or {}).get(recipient))


def sender_label(task: dict[str, Any], names: dict[str, str] | None = None) -> str:
    meta = task.get("metadata", {})
    sender = meta.get("fromAgentId")
    return agent_label(sender, meta.get("fromAgentName") or (names or {}).get(sender))


def _role(message: dict[str, Any], task: dict[str, Any], names: dict[str, str] | None) -> str:
    # The sender's messages are ROLE_USER, the recipient's ROLE_AGENT (A2A's client/agent).
    if message.get("role") == "ROLE_AGENT":
        return recipient_label(task, names)
    return sender_label(task, names)


def task_detail(task: dict[str, Any], names: dict[str, str] | None = None):
    meta = task.get("metadata", {})
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    _row(table, "task", task.get("id", "?"))
    _row(table, "state", Text(short_state(task), style=STATE_STYLES.get(short_state(task), "")))
    _row(table, "updated", local_time(task.get("status", {}).get("timestamp")))
    _row(table, "from", sender_label(task, names))
    if meta.get("type") == "broadcast_summary":
        count = meta.get("recipientCount", "?")
        _row(table, "to", f"broadcast to {count} agent{'' if count == 1 else 's'}")
    else:
        _row(table, "to", recipient_label(task, names))
    _row(table, "type", str(meta.get("type", "")))
    for key in ("parentTaskId", "threadId", "broadcastId"):
        if meta.get(key):
            _row(table, key, str(meta[key]))
    history = task.get("history") or []
    if history:
        for message in history:
            action = (message.get("metadata") or {}).get("action")
            label = _role(message, task, names) + (f" [{action}]" if action else "")
            body = message_body(message)
            _row(table, "message", f"{label}: {body}" if body else label)
    else:
        _row(table, "message", message_text(task))
    for artifact in (task.get("artifacts") or [])[1:] if history else []:
        _row(table, "result", parts_summary(artifact.get("parts")))
    status_message = task.get("status", {}).get("message")
    if isinstance(status_message, dict) and status_message.get("parts") and not history:
        _row(table, "status", parts_summary(status_message["parts"]))
    return table


def event_line(
    event: str,
    task: dict[str, Any],
    *,
    event_id: str | None = None,
    names: dict[str, str] | None = None,
) -> Text:
    """One line per stream event for `hikyaku watch`."""
    when = local_time(task.get("status", {}).get("timestamp")) or datetime.now().strftime(
        "%Y-%m-%d %H:%M:%S"
    )
    line = Text()
    line.append(when + " ", style="dim")
    if event == "message":
        line.append("message     ", style="bold yellow")
    else:
        line.append(f"{event:<12}", style="bold cyan")
    line.append(f"{task.get('id', '?')} ")
    line.append(f"{sender_label(task, names)} → {recipient_label(task, names)} ")
    line.append(short_state(task), style=STATE_STYLES.get(short_state(task), ""))
    history = task.get("history") or []
    if event == "message" or len(history) < 2:
        text = message_text(task)
        if text:
            line.append(": " + clip(text, 80))
        return line
    if short_state(task) == "canceled":  # CancelTask appends no message
        line.append(f"  {sender_label(task, names)} cancel", style="bold")
        return line
    # An update: who did what, from the follow-up it appended.
    last = history[-1]
    action = (last.get("metadata") or {}).get("action") or "update"
    line.append(f"  {_role(last, task, names)} {action}", style="bold")
    body = message_body(last)
    if body:
        line.append(": " + clip(body, 80))
    return line


def task_summary(task: dict[str, Any], *, box: str = "inbox") -> str:
    """One plain line about a task (MCP text results)."""
    meta = task.get("metadata", {})
    if box == "inbox":
        peer = "from " + agent_label(meta.get("fromAgentId"), meta.get("fromAgentName"))
    else:
        peer = "to " + agent_label(
            meta.get("toAgentId") or task.get("contextId"), meta.get("toAgentName")
        )
    text = message_text(task)
    latest = latest_text(task)
    line = f"task {task.get('id', '?')} {peer} [{short_state(task)}]: {clip(text, 200)}"
    if latest:
        line += f" | latest: {clip(latest, 200)}"
    return line


def events_table(events: list[dict[str, Any]], task: dict[str, Any]):
    """A task's timeline (`GET /api/v1/tasks/{id}/events`), oldest first."""
    meta = task.get("metadata", {})
    names = {
        meta.get("fromAgentId"): meta.get("fromAgentName"),
        meta.get("toAgentId"): meta.get("toAgentName"),
    }
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("TIME", no_wrap=True)
    table.add_column("EVENT", no_wrap=True)
    table.add_column("BY", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("MESSAGE", overflow="fold")
    state: str | None = None
    for event in events:
        actor = event.get("actor") or event.get("actor_agent_id") or ""
        if isinstance(actor, dict):
            person = actor.get("person")  # someone who acted for the agent from the web UI
            label = agent_label(actor.get("agent_id") or actor.get("id"), actor.get("name"))
            actor = f"{person} for {label}" if person else label
        elif actor in names:
            actor = agent_label(actor, names[actor])
        before = state
        state = state_after_event(str(event.get("kind") or ""), event.get("to_state"), before)
        change = f"{before} → {state}" if before and before != state else state
        text = str(event.get("note") or "")
        if text == event.get("kind"):  # a verb sent without text carries its own name
            text = ""
        _row(
            table,
            local_time(event.get("created_at") or event.get("timestamp")),
            str(event.get("kind") or event.get("type") or ""),
            str(actor),
            change,
            text,
        )
    return table


def relation_text(relation: dict[str, Any] | None) -> str:
    """An allow-list from GET /api/v1/agents/me: "anyone", "nobody" or the agents' labels."""
    if not relation or relation.get("anyone"):
        return "anyone"
    agents = relation.get("agents") or []
    if not agents:
        return "nobody"
    return ", ".join(
        agent_label(a.get("agent_id"), a.get("name"))
        + ("" if a.get("status") in (None, "active") else f" [{a['status']}]")
        for a in agents
    )


def whoami_detail(me: dict[str, Any]):
    """agent_detail plus what the broker says of the caller's tenant, credential and policy."""
    table = agent_detail(me)
    tenant = me.get("tenant")
    if tenant:
        _row(table, "tenant", f"{tenant.get('name')} ({tenant.get('slug')})")
    credential = me.get("credential")
    if credential:
        expiry = credential.get("expires_at")
        until = f", expires {local_time(expiry)}" if expiry else ""
        _row(table, "credential", f"{credential.get('kind')} {credential.get('prefix')}…{until}")
    if "send_to" in me:
        _row(table, "send to", relation_text(me.get("send_to")))
        _row(table, "receive from", relation_text(me.get("receive_from")))
    if me.get("disclosure_ceiling"):
        _row(table, "ceiling", me["disclosure_ceiling"])
    if me.get("policy_revision") is not None:
        _row(table, "policy rev", str(me["policy_revision"]))
    return table
