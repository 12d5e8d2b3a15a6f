"""`hikyaku`: the command line for agents (DESIGN.md §10).

The old broker's commands and options work unchanged (`register`, `send`, `broadcast`, `poll`,
`ack`, `cancel`, `get-task`, `agents`, `deregister`, the global `--json`, `--agent-id` on every
command or globally, `HIKYAKU_*` variables); `--json` keeps the old top-level shapes (a list of
tasks for `poll`, `{"task": …}` for task commands) with A2A 1.0 tasks inside. Ours: the
lifecycle verbs (`accept`, `complete`, `reject`, `fail`, `block`, `reply`, `comment`), `outbox`,
`thread`, `watch`, `whoami`, and files/data on every message.

Exit status: 0 success, 1 any failure (one line on stderr), 2 usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from rich.text import Text

from . import __version__, render
from .http import (
    ConfigurationError,
    Credentials,
    HikyakuClient,
    HikyakuError,
    build_parts,
    normalize_state,
)
from .sse import InboxStream

PROG = "hikyaku"


class UsageError(Exception):
    """Bad options or arguments: exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other error we print."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"Error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def _json_arg(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from None


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


_RELATIVE = re.compile(r"^(\d+)\s*([smhd])$")


def parse_since(value: str) -> str:
    """An ISO 8601 timestamp, or a relative age like `15m`, `2h`, `1d` (ago), as ISO UTC."""
    value = value.strip()
    match = _RELATIVE.match(value)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        moment = datetime.now(UTC) - timedelta(seconds=seconds)
        return moment.isoformat().replace("+00:00", "Z")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a timestamp: {value!r} (use ISO 8601 like 2026-01-31T12:00:00Z, or 15m/2h/1d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is the user's local time
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _state_arg(value: str) -> str:
    try:
        return normalize_state(value)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> Parser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS keeps a subcommand from overwriting the global option with its default.
    common.add_argument(
        "--agent-id",
        default=argparse.SUPPRESS,
        help="acting agent id (default: $HIKYAKU_AGENT_ID)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON for scripts",
    )
    common.add_argument("--url", default=argparse.SUPPRESS, help="broker URL ($HIKYAKU_URL)")
    common.add_argument(
        "--api-key", default=argparse.SUPPRESS, help="tenant API key ($HIKYAKU_API_KEY)"
    )

    parser = Parser(
        prog=PROG,
        description="Talk to a Hikyaku broker as an agent: register, message, work tasks, watch.",
        epilog="Environment: HIKYAKU_URL (default http://localhost:8000), HIKYAKU_API_KEY, "
        "HIKYAKU_AGENT_ID, HIKYAKU_AGENT_TOKEN. `hikyaku register` prints the exports to use.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument("--agent-id", default=None, help="acting agent id ($HIKYAKU_AGENT_ID)")
    parser.add_argument("--url", default=None, help="broker URL ($HIKYAKU_URL)")
    parser.add_argument(
        "--api-key", default=None, help="tenant API key ($HIKYAKU_API_KEY; prefer the variable)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    def command(name: str, help_text: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_text, description=help_text, parents=[common], **kwargs
        )

    def message_options(p: argparse.ArgumentParser, *, text_help: str = "message text") -> None:
        p.add_argument("--text", help=text_help)
        p.add_argument(
            "--file",
            action="append",
            default=[],
            metavar="PATH",
            help="attach a file (repeatable)",
        )
        p.add_argument("--data", type=_json_arg, metavar="JSON", help="attach a JSON data part")

    def task_argument(p: argparse.ArgumentParser) -> None:
        p.add_argument("task", nargs="?", metavar="TASK_ID", help="task id")
        p.add_argument("--task-id", dest="task_option", metavar="TASK_ID", help="task id")

    p = command("register", "Register a new agent with the tenant API key ($HIKYAKU_API_KEY).")
    p.add_argument("--name", required=True, help="agent name")
    p.add_argument("--description", required=True, help="what the agent does (may be empty)")
    p.add_argument("--skills", type=_json_arg, metavar="JSON", help="A2A skills as a JSON list")
    p.add_argument("--webhook-url", help="URL the broker POSTs events to")

    command("whoami", "Show the acting agent.")

    p = command("agents", "List the tenant's active agents, or show one.")
    p.add_argument("--id", dest="detail_id", help="show this agent in detail")
    p.add_argument("--search", "-s", dest="q", help="filter by name")

    p = command("send", "Send a message to one agent; it lands in their inbox as a task.")
    p.add_argument("--to", required=True, help="recipient agent id")
    message_options(p)
    p.add_argument("--reply-to", metavar="TASK_ID", help="the task this message answers (thread)")
    p.add_argument("--message-id", help="idempotency key (default: random)")

    p = command("broadcast", "Send a message to every other active agent of the tenant.")
    message_options(p)
    p.add_argument("--message-id", help="idempotency key (default: random)")

    p = command("poll", "List the inbox: tasks sent to this agent, newest change first.")
    p.add_argument("--since", type=parse_since, help="changed at/after (ISO 8601, or 15m/2h/1d)")
    p.add_argument("--page-size", type=_positive_int, help="tasks per page (1-100, default 50)")
    p.add_argument("--status", type=_state_arg, help="only this state (e.g. input-required)")
    p.add_argument("--page-token", help="next page (printed after a full page)")

    p = command("outbox", "List tasks this agent sent, newest change first.")
    p.add_argument("--to", help="only tasks sent to this agent id")
    p.add_argument("--since", type=parse_since, help="changed at/after (ISO 8601, or 15m/2h/1d)")
    p.add_argument("--page-size", type=_positive_int, help="tasks per page (1-100, default 50)")
    p.add_argument("--status", type=_state_arg, help="only this state (e.g. working)")
    p.add_argument("--page-token", help="next page (printed after a full page)")

    p = command("ack", "Acknowledge a received message (unread → completed).")
    task_argument(p)
    p = command("accept", "Accept a received task and start working on it (→ working).")
    task_argument(p)
    p = command("complete", "Complete a task with a result (→ completed).")
    task_argument(p)
    message_options(p, text_help="result text")
    p = command("reject", "Decline a received task, with a reason (→ rejected).")
    task_argument(p)
    p.add_argument("--text", "--reason", dest="text", help="reason")
    p = command("fail", "Report that a task you accepted failed (→ failed).")
    task_argument(p)
    p.add_argument("--text", "--reason", dest="text", help="what went wrong")
    p = command("block", "Ask the sender a question; the task waits for their reply.")
    task_argument(p)
    p.add_argument("--question", "--text", dest="text", required=True, help="the question")
    p = command("reply", "Answer the recipient's question on a task you sent (→ working).")
    task_argument(p)
    message_options(p, text_help="the answer")
    p = command("comment", "Add a note to a task without changing its state.")
    task_argument(p)
    message_options(p, text_help="the note")
    p = command("cancel", "Retract a message you sent that is still unread (→ canceled).")
    task_argument(p)

    p = command("get-task", "Show a task with its messages.")
    task_argument(p)
    p.add_argument("--history-length", type=int, help="only the last N messages")

    p = command("thread", "Show a task's timeline: every message and state change, in order.")
    task_argument(p)

    p = command("watch", "Stream the inbox live; resumes after a drop without missing events.")
    p.add_argument(
        "--since",
        dest="since_event",
        metavar="EVENT_ID",
        help="replay events after this event id first",
    )
    p.add_argument("--count", type=_positive_int, help="exit after N events")
    p.add_argument("--timeout", type=float, help="exit after S seconds")

    command("deregister", "Deregister the acting agent (its token stops working).")
    return parser


class Output:
    """Where results and progress go: results to stdout, progress and errors to stderr."""

    def __init__(self, *, as_json: bool, quiet: bool) -> None:
        self.as_json = as_json
        self.quiet = quiet
        self.out = render.make_console()
        self.err = render.make_console(stderr=True)

    def json(self, value: Any, *, compact: bool = False) -> None:
        text = json.dumps(value, separators=(",", ":")) if compact else json.dumps(value, indent=2)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def print(self, *renderables: Any) -> None:
        # Plain strings are printed as text, never as rich markup (they carry user content).
        self.out.print(*(Text(r) if isinstance(r, str) else r for r in renderables))

    def progress(self, message: str | Text) -> None:
        if not self.quiet:
            self.err.print(Text(message, style="dim") if isinstance(message, str) else message)


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
    result = await client.register(
        name=args.name,
        description=args.description,
        skills=args.skills,
        webhook_url=args.webhook_url,
    )
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
    out.print(render.agent_detail(agent))
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
    if out.as_json:
        out.json({"task": task})
        return
    await _show_task(client, out, task)


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
}


async def run(args: argparse.Namespace, out: Output) -> None:
    if args.command == "watch":
        # A supervisor's SIGTERM ends `watch` as cleanly as Ctrl-C does.
        main_task = asyncio.current_task()
        if main_task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    credentials = Credentials.from_env(url=args.url, api_key=args.api_key, agent_id=args.agent_id)
    async with HikyakuClient(credentials) as client:
        await COMMANDS[args.command](args, client, out)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Output(as_json=bool(args.json), quiet=args.quiet)
    try:
        asyncio.run(run(args, out))
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 2
    except HikyakuError as exc:
        sys.stderr.write(f"Error: {_one_line(str(exc))}\n")
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Ctrl-C (or SIGTERM) is how `watch` is meant to end.
        return 0 if args.command == "watch" else 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug or an unforeseen failure: still one line, still exit 1
        sys.stderr.write(f"Error: unexpected {type(exc).__name__}: {_one_line(str(exc))}\n")
        return 1
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
