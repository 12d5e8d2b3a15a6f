"""`python -m bench.wire`: microseconds per call of the wire format functions, a2a-sdk's path
against the plain-Python path, side by side in one process (messaging/a2a/wire.py).

The inputs are what the hot path sees: a send and an ack in each dialect, a delivered task
after its ack (history, the message artifact, the broker's metadata), one of its stream
updates, and a ListTasks page of 50 such tasks for the JSON encoding. Best of `--repeat`
rounds, so a busy machine inflates the figures less; compare the two columns, not runs
taken at different times.
"""

from __future__ import annotations

import argparse
import json
import os
import timeit
import uuid
from datetime import UTC, datetime
from typing import Any


def _inputs() -> dict[str, Any]:
    from messaging.a2a import wire
    from messaging.models import Task, TaskEvent, TaskState

    sender, recipient, task_id = str(uuid.uuid4()), str(uuid.uuid4()), uuid.uuid4()
    text = "Please review PR #42 — the migration renames two columns."
    send_v1 = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        "metadata": {"destination": recipient},
    }
    send_v03 = {
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "kind": "message",
        "parts": [{"kind": "text", "text": text}],
        "metadata": {"destination": recipient},
    }
    ack_v03 = {
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "taskId": str(task_id),
        "parts": [{"kind": "text", "text": "ack"}],
    }
    message = {**send_v1, "parts": [{"text": text}]}
    ack = {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT", "parts": [{"text": "ack"}]}
    ack.update(taskId=str(task_id), contextId=recipient)
    now = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    task = Task(
        id=task_id,
        context_id=recipient,
        state=TaskState.COMPLETED,
        awaiting="",
        status_at=now,
        message=message,
        history=[message, ack],
        artifacts=[
            {"artifactId": "message-0a1b2c3d4e5f", "name": "message", "parts": [{"text": text}]}
        ],
        metadata={
            "type": "unicast",
            "fromAgentId": sender,
            "fromAgentName": "reviewer",
            "toAgentId": recipient,
        },
    )
    body = wire.task_v1(task)
    event = TaskEvent(
        id=1234, kind=TaskEvent.Kind.ACK, to_state=TaskState.COMPLETED, created_at=now
    )
    event.payload = {"messageId": ack["messageId"]}
    (update,) = wire.update_results(event, task)
    page = {"tasks": [wire.task_v03(body) for _ in range(50)], "nextPageToken": "", "pageSize": 50}
    return {
        "send_v1": send_v1,
        "send_v03": send_v03,
        "ack_v03": ack_v03,
        "body": body,
        "update": update,
        "page": {"jsonrpc": "2.0", "id": 7, "result": page},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
    import django

    django.setup()
    from hikyaku import parsers
    from messaging.a2a import wire

    V1, V03 = wire.Dialect.V1_0, wire.Dialect.V0_3
    inputs = _inputs()
    send_v1, send_v03, ack_v03 = inputs["send_v1"], inputs["send_v03"], inputs["ack_v03"]
    body, update, page = inputs["body"], inputs["update"], inputs["page"]
    cases = [
        (
            "parse_message, 1.0 send",
            lambda: wire.parse_message_sdk(send_v1, V1, ignore_unknown_fields=False),
            lambda: wire.parse_message(send_v1, V1),
        ),
        (
            "parse_message, 0.3 send",
            lambda: wire.parse_message_sdk(send_v03, V03, ignore_unknown_fields=False),
            lambda: wire.parse_message(send_v03, V03),
        ),
        (
            "parse_message, 0.3 ack",
            lambda: wire.parse_message_sdk(ack_v03, V03, ignore_unknown_fields=False),
            lambda: wire.parse_message(ack_v03, V03),
        ),
        ("task_v03, acked task", lambda: wire._task_v03_sdk(body), lambda: wire.task_v03(body)),
        (
            "stream_response_v03, ack update",
            lambda: wire._stream_response_v03_sdk(update, 7),
            lambda: wire.stream_response_v03(update, 7),
        ),
        (
            "JSON of a 50-task 0.3 page",
            lambda: json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode(),
            lambda: parsers.dumps(page),
        ),
    ]
    print(f"{'':34} {'sdk / json µs':>14} {'fast µs':>9} {'ratio':>6}")
    for name, before, after in cases:
        times = []
        for function in (before, after):
            best = min(timeit.repeat(function, number=args.number, repeat=args.repeat))
            times.append(best / args.number * 1e6)
        print(f"{name:34} {times[0]:14.1f} {times[1]:9.1f} {times[0] / times[1]:5.1f}×")


if __name__ == "__main__":
    main()
