"""Blocking SendMessage on an agent's own A2A endpoint (docs/PROTOCOL.md §8, docs/PEERS.md):
wait, bounded, until the agent has answered the task — without a thread.

Only the stream processes wait (messaging/stream/answers.py; a web process hands such a send
to them, messaging/stream/handoff.py). A wait is a coroutine registered with the process's
stream hub under the recipient's id, like a stream of that agent: the hub wakes it on the
doorbell of any event of the recipient's, whichever process wrote it, and on its catch-up
scan, so a lost doorbell makes the answer up to ~1 s late, never missed. Woken, the wait
re-reads the task (one primary-key query on a stream DB thread) and returns once the
recipient no longer owes an answer, when the timeout runs out, when the client leaves, or
when the process shuts down. Meanwhile it holds no thread and no database connection. At most
HIKYAKU_MAX_BLOCKING_WAITS wait per process; further blocking sends are answered at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from django.conf import settings
from django.db import DatabaseError

from . import lifecycle
from .models import Task
from .stream.db import run_db
from .stream.feeds import Feed
from .stream.hub import hub

log = logging.getLogger(__name__)

_active = 0  # waits open in this process (touched on the event loop only)


def owes_answer(task: Task) -> bool:
    """Whether the recipient still has to act: unread, or working on it."""
    return lifecycle.owes_answer(task.state, task.awaiting)


class _Watch(Feed):
    """What the hub sees of a wait: the key it is woken for. Never read by the hub."""

    exact = False

    def __init__(self, recipient_id: uuid.UUID) -> None:
        self.keys = (str(recipient_id),)


def _current(task_id: uuid.UUID) -> Task | None:
    return Task.objects.select_related("sender", "recipient").filter(pk=task_id).first()


async def _closed_on_disconnect(receive, sub) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    sub.close("disconnected")


async def await_answer(task: Task, *, receive=None, timeout: float | None = None) -> Task:
    """The task once its recipient no longer owes an answer (answered, blocked on a question
    to the sender, or finished), or as it stands when `timeout` (default
    HIKYAKU_BLOCKING_TIMEOUT_SECONDS) runs out, the client leaves (an ASGI `receive` that
    reports `http.disconnect`), the process stops, or no wait slot is free. Call after the
    send committed; a database error while waiting is not the send's: the task as last read
    is returned."""
    global _active
    if timeout is None:
        timeout = settings.HIKYAKU_BLOCKING_TIMEOUT_SECONDS
    if not owes_answer(task) or timeout <= 0 or task.recipient_id is None:
        return task
    if _active >= settings.HIKYAKU_MAX_BLOCKING_WAITS:
        return task
    _active += 1
    try:
        await hub.ensure_started()
        # Registered before the first read, so an answer committed meanwhile still wakes it.
        sub = hub.subscribe(_Watch(task.recipient_id))
        watcher = asyncio.ensure_future(_closed_on_disconnect(receive, sub)) if receive else None
        try:
            return await _wait(task, sub, asyncio.get_running_loop().time() + timeout)
        finally:
            hub.unsubscribe(sub)
            if watcher is not None:
                watcher.cancel()
    finally:
        _active -= 1


async def _wait(task: Task, sub, deadline: float) -> Task:
    loop = asyncio.get_running_loop()
    while True:
        sub.wake.clear()
        try:
            current = await run_db(_current, task.pk)
        except DatabaseError as exc:
            log.warning("blocking send: re-read failed (%s)", exc.__class__.__name__)
            current = task
        if current is None:  # purged meanwhile: show what was delivered
            return task
        task = current
        remaining = deadline - loop.time()
        if not owes_answer(task) or remaining <= 0 or sub.closed is not None:
            return task
        try:
            async with asyncio.timeout(remaining):
                await sub.wake.wait()
        except TimeoutError:
            pass  # one last read, then the deadline has passed
