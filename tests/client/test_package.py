"""The client package on its own: no Django, and the pieces with rules of their own (the MCP
inbox buffer, schemas, option parsing)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

import hikyaku_client
from hikyaku_client.cli import parse_since
from hikyaku_client.errors import ConfigurationError
from hikyaku_client.inbox import InboxBuffer
from hikyaku_client.mcp_tools import compact_schema
from hikyaku_client.wire import normalize_state


def test_it_never_imports_django():
    modules = [m.name for m in pkgutil.walk_packages(hikyaku_client.__path__, "hikyaku_client.")]
    assert {"hikyaku_client.cli", "hikyaku_client.mcp_server", "hikyaku_client.sse"} <= set(modules)
    code = (
        "import importlib, sys\n"
        f"for name in {['hikyaku_client', *modules]!r}:\n"
        "    importlib.import_module(name)\n"
        "leaked = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not leaked, leaked\n"
        "print('clean')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},  # no DJANGO_SETTINGS_MODULE either
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


def task(task_id: str, state: str = "TASK_STATE_INPUT_REQUIRED", at: int = 0, history: int = 1):
    moment = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=at)
    return {
        "id": task_id,
        "status": {"state": state, "timestamp": moment.isoformat().replace("+00:00", "Z")},
        "history": [{"parts": [{"text": str(i)}]} for i in range(history)],
        "metadata": {},
    }


def test_inbox_filters_return_matches_and_keep_everything_else():
    inbox = InboxBuffer()
    for i, state in enumerate(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"] * 3):
        inbox.offer(task(f"t{i}", state, at=i), event="message")
    assert [i.task["id"] for i in inbox.take(status="TASK_STATE_WORKING", page_size=2)] == [
        "t1",
        "t3",
    ]
    assert [i.task["id"] for i in inbox.take(since=datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC))] == [
        "t4",
        "t5",
    ]
    assert inbox.take(status="TASK_STATE_COMPLETED") == []
    assert [i.task["id"] for i in inbox.take()] == ["t0", "t2"]
    assert len(inbox) == 0 and inbox.take() == []


def test_inbox_collapses_a_task_into_its_latest_version():
    inbox = InboxBuffer()
    inbox.offer(task("t", at=1), event="message")
    inbox.offer(task("t", "TASK_STATE_WORKING", at=2, history=2), event="task-update")
    inbox.offer(task("t", at=1), event="task-update")  # an older version arriving late
    (item,) = inbox.take()
    assert item.event == "message"  # still news to us
    assert item.task["status"]["state"] == "TASK_STATE_WORKING"


def test_inbox_does_not_repeat_what_it_returned_or_echo_our_own_actions():
    inbox = InboxBuffer()
    inbox.offer(task("t", at=1), event="message")
    assert len(inbox.take()) == 1
    assert inbox.offer(task("t", at=1), event="message") is False  # a replay
    assert inbox.offer(task("t", "TASK_STATE_WORKING", at=2, history=2), event="task-update")
    inbox.take()
    done = task("t", "TASK_STATE_COMPLETED", at=3, history=3)
    inbox.note_own(done)  # we completed it ourselves
    assert inbox.offer(done, event="task-update") is False
    assert inbox.take() == []


def test_own_action_updates_a_buffered_task_instead_of_dropping_it():
    inbox = InboxBuffer()
    inbox.offer(task("t", at=1), event="message")
    inbox.note_own(task("t", "TASK_STATE_COMPLETED", at=2, history=2))
    (item,) = inbox.take()
    assert item.task["status"]["state"] == "TASK_STATE_COMPLETED"


def test_compact_schema_drops_titles_and_null_unions():
    schema = {
        "title": "sendArguments",
        "type": "object",
        "properties": {
            "to": {"title": "To", "type": "string"},
            "reply_to": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "title": "Reply To",
                "description": "task id",
            },
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
        },
        "required": ["to"],
    }
    assert compact_schema(schema) == {
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "reply_to": {"type": "string", "description": "task id"},
            "n": {"type": "integer", "default": 3},
        },
        "required": ["to"],
    }


def test_since_accepts_iso_and_relative_ages():
    assert parse_since("2026-01-31T12:00:00Z") == "2026-01-31T12:00:00Z"
    assert parse_since("2026-01-31T13:00:00+01:00") == "2026-01-31T12:00:00Z"
    fifteen = datetime.fromisoformat(parse_since("15m").replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - fifteen) - timedelta(minutes=15)) < timedelta(seconds=5)
    assert parse_since("2d").endswith("Z")


@pytest.mark.parametrize(
    "value",
    ["input-required", "INPUT_REQUIRED", "TASK_STATE_INPUT_REQUIRED", "input_required"],
)
def test_states_in_any_spelling(value):
    assert normalize_state(value) == "TASK_STATE_INPUT_REQUIRED"


def test_unknown_state_lists_the_choices():
    with pytest.raises(ConfigurationError, match="unread, working, blocked"):
        normalize_state("sleeping")
