"""A task as it was right after one of its events: what a stream shows for that event.

A stream reads the task's current row, but a replayed event must show the task of its own
moment — after accept → block → reply → complete, the `block` event shows the question and
the task waiting for its sender, not the final answer. The event rows hold enough to derive
that moment from the current row: every event after `created` except `cancel` appended
exactly one follow-up to `history` (services.act_on_task), a `complete` with parts appended
one `result` artifact, the lifecycle table (messaging/lifecycle.py) says whose turn each
action leaves it and whether its message became the status message, and a state change's
event carries its time. A task's events commit in id order (each takes the parties' row
locks), so the events up to an event that a reader sees never change afterwards.

When an event is its task's latest (read in the same statement as the task row), the row
itself is that moment and nothing is derived: the live case costs nothing extra.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from .. import lifecycle
from ..models import Task, TaskEvent


class Step(NamedTuple):
    """What a snapshot needs of one event."""

    id: int
    kind: str
    to_state: str
    at: datetime
    result: bool  # a `complete` whose parts became a result artifact


def timelines(task_ids: Iterable[Any], upto: int | None = None) -> dict[Any, list[Step]]:
    """The events of these tasks (with id <= `upto`, if given), in order, per task id. One
    query."""
    events = TaskEvent.objects.filter(task_id__in=set(task_ids))
    if upto is not None:
        events = events.filter(id__lte=upto)
    out: dict[Any, list[Step]] = {}
    for task_id, event_id, kind, to_state, at, payload in events.order_by("id").values_list(
        "task_id", "id", "kind", "to_state", "created_at", "payload"
    ):
        parts = (payload or {}).get("parts")
        out.setdefault(task_id, []).append(Step(event_id, kind, to_state, at, bool(parts)))
    return out


def up_to(timeline: list[Step], event_id: int) -> list[Step] | None:
    """The steps of `timeline` up to and including `event_id`; None if it is not there."""
    steps = [s for s in timeline if s.id <= event_id]
    return steps if steps and steps[-1].id == event_id else None


def as_of(task: Task, steps: list[Step]) -> Task:
    """`task` (its current row) as it was right after the last of `steps`, its events from
    `created` on. The result is a copy; `task` is unchanged."""
    last = steps[-1]
    then = copy.copy(task)
    awaiting = lifecycle.CREATED_PHASE.awaiting
    status_at = steps[0].at
    follow_ups = results = 0
    for event in steps:
        transition = lifecycle.TRANSITIONS.get(event.kind)
        if transition is None:  # the creation
            continue
        if transition.carries_message:
            follow_ups += 1
        if transition.parts_become == "artifact" and event.result:
            results += 1
        if transition.target is not None:
            awaiting = transition.target.awaiting
            status_at = event.at
    then.history = task.history[: 1 + follow_ups]
    kept = 0
    artifacts: list[dict[str, Any]] = []
    for artifact in task.artifacts:
        if artifact.get("name") == "result":
            kept += 1
            if kept > results:
                continue
        artifacts.append(artifact)
    then.artifacts = artifacts
    metadata = {k: v for k, v in task.metadata.items() if k != "statusMessage"}
    transition = lifecycle.TRANSITIONS.get(last.kind)
    if transition is not None and transition.parts_become == "status" and follow_ups:
        metadata["statusMessage"] = then.history[-1]
    then.metadata = metadata
    then.state = last.to_state or task.state
    then.awaiting = awaiting
    then.status_at = status_at
    return then
