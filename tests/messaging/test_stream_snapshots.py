"""What a stream shows for an event: the task as it was right after that event
(messaging/stream/snapshot.py), derived from the task's current row and its events. For every
path through the lifecycle table, the moment derived for each event from the final row equals
the row as it was read right after that event."""

from __future__ import annotations

import pytest

from messaging.a2a.wire import task_v1
from messaging.models import Task, TaskEvent
from messaging.stream import snapshot
from tests.messaging.rpc import act, result, send

pytestmark = pytest.mark.django_db

# (who acts: "r" the recipient, "s" the sender; action; text or None) per step after the send.
PATHS = {
    "ack": [("r", "ack", None)],
    "accept-complete": [("r", "accept", None), ("r", "complete", "all green")],
    "complete straight from unread": [("r", "complete", "done")],
    "block-reply-complete": [
        ("r", "accept", "on it"),
        ("r", "block", "Which branch?"),
        ("s", "reply", "main"),
        ("r", "complete", "Fixed in abc123"),
    ],
    "comments in every state": [
        ("s", "comment", "any news?"),
        ("r", "accept", None),
        ("r", "comment", "half way"),
        ("r", "block", "Which branch?"),
        ("s", "comment", "thinking"),
        ("s", "reply", "main"),
        ("r", "fail", "disk full"),
    ],
    "reject unread": [("r", "reject", "not my area")],
    "cancel unread": [("s", "cancel", None)],
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_events_moment_is_the_row_as_it_was_then(agent, peer, path):
    task_id = send(agent, peer.id)["id"]
    rows = [task_v1(Task.objects.get(pk=task_id))]
    for who, action, text in PATHS[path]:
        actor = peer if who == "r" else agent
        if action == "cancel":
            result(actor, "CancelTask", {"id": task_id})
        else:
            act(actor, task_id, action, text or action)
        rows.append(task_v1(Task.objects.get(pk=task_id)))

    final = Task.objects.get(pk=task_id)
    timeline = snapshot.timelines([final.pk])[final.pk]
    assert len(timeline) == len(rows)
    for step, row in zip(timeline, rows, strict=True):
        moment = snapshot.as_of(final, snapshot.up_to(timeline, step.id))
        assert task_v1(moment) == row, (path, step.kind)
    assert task_v1(final) == rows[-1]  # and the row itself is untouched


def test_a_moment_is_a_copy(agent, peer):
    task_id = send(agent, peer.id)["id"]
    act(peer, task_id, "accept", "on it")
    task = Task.objects.get(pk=task_id)
    timeline = snapshot.timelines([task.pk])[task.pk]
    first = snapshot.as_of(task, timeline[:1])
    assert first.state == "input_required" and len(first.history) == 1
    assert task.state == "working" and len(task.history) == 2
    assert TaskEvent.objects.filter(task_id=task_id).count() == 2
