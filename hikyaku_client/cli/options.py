"""The command line's grammar: commands, options, and the parsing of their values."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from .. import __version__
from ..errors import ConfigurationError
from ..wire import HUMAN_STATES, normalize_state
from .setup import add_parser as add_setup_parser

PROG = "hikyaku"
STATE_NAMES = ", ".join(HUMAN_STATES)


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
    p.add_argument("--status", type=_state_arg, help=f"only this state: {STATE_NAMES}")
    p.add_argument("--page-token", help="next page (printed after a full page)")

    p = command("outbox", "List tasks this agent sent, newest change first.")
    p.add_argument("--to", help="only tasks sent to this agent id")
    p.add_argument("--since", type=parse_since, help="changed at/after (ISO 8601, or 15m/2h/1d)")
    p.add_argument("--page-size", type=_positive_int, help="tasks per page (1-100, default 50)")
    p.add_argument("--status", type=_state_arg, help=f"only this state: {STATE_NAMES}")
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
    p.add_argument(
        "--save-files", metavar="DIR", help="save the task's files (attachments) into DIR"
    )

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

    add_setup_parser(command)
    return parser
