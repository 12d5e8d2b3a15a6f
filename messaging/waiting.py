"""Blocking SendMessage on an agent's own A2A endpoint (docs/PROTOCOL.md §8): wait, bounded, until
the agent has answered the task.

The waiting request re-reads the task from the database. It sleeps between reads on an event
that the doorbell of the task's recipient sets (`events.add_local_listener`: doorbells rung in
this process, which is every write when one process serves the broker), and otherwise backs
off from 50 ms to 1 s, so an answer written through another process is seen within a second.
Each wait holds the request's thread (a WSGI worker) and a database connection; at most
HIKYAKU_MAX_BLOCKING_WAITS run per process, and further requests are answered at once.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings

from . import events
from .models import Task, TaskState

_lock = threading.Lock()
_waiters: dict[str, set[threading.Event]] = {}
_active = 0
_listening = False


def owes_answer(task: Task) -> bool:
    """Whether the recipient still has to act: unread, or working on it."""
    return task.state == TaskState.WORKING or (
        task.state == TaskState.INPUT_REQUIRED and task.awaiting == Task.Awaiting.RECIPIENT
    )


def _on_doorbell(doorbell: events.Doorbell) -> None:
    with _lock:
        woken = [e for agent in doorbell.get("agents", ()) for e in _waiters.get(agent, ())]
    for event in woken:
        event.set()


def _enter(agent_id: str, event: threading.Event) -> bool:
    global _active, _listening
    with _lock:
        if _active >= settings.HIKYAKU_MAX_BLOCKING_WAITS:
            return False
        if not _listening:
            events.add_local_listener(_on_doorbell)
            _listening = True
        _active += 1
        _waiters.setdefault(agent_id, set()).add(event)
    return True


def _leave(agent_id: str, event: threading.Event) -> None:
    global _active
    with _lock:
        _active -= 1
        waiting = _waiters.get(agent_id)
        if waiting is not None:
            waiting.discard(event)
            if not waiting:
                del _waiters[agent_id]


def await_answer(task: Task, *, timeout: float | None = None) -> Task:
    """The task once its recipient no longer owes an answer (answered, blocked on a question
    to the sender, or finished), or as it stands when `timeout` (default
    HIKYAKU_BLOCKING_TIMEOUT_SECONDS) runs out or no wait slot is free. Call outside a
    transaction: every read must see other requests' commits."""
    if timeout is None:
        timeout = settings.HIKYAKU_BLOCKING_TIMEOUT_SECONDS
    if not owes_answer(task) or timeout <= 0 or task.recipient_id is None:
        return task
    agent_id = str(task.recipient_id)
    wake = threading.Event()
    if not _enter(agent_id, wake):
        return task
    try:
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            current = Task.objects.select_related("sender", "recipient").filter(pk=task.pk).first()
            if current is None:
                return task
            task = current
            remaining = deadline - time.monotonic()
            if not owes_answer(task) or remaining <= 0:
                return task
            wake.wait(min(delay, remaining))
            wake.clear()
            delay = min(delay * 2, 1.0)
    finally:
        _leave(agent_id, wake)
