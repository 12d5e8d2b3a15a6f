"""The MCP server's local inbox buffer: what `poll` answers from, instantly.

Fed by the inbox stream (`message` and `task-update` events) and backfilled from ListTasks.
Items are keyed by task id, so several events about one task collapse into its latest version
(nothing is dropped: the item is updated). An item leaves the buffer only when `take` returns it;
filters select what to return and leave everything else buffered. Versions already returned, and
the results of this agent's own actions, are remembered by fingerprint so a replayed or echoed
event does not come back as news.

An own action's answer and its echo on the stream travel on different connections, so either
may arrive first. `own_action(task_id)` is entered before the request is sent: while it is in
flight, stream events about that task are held back, and once the answer is noted they are
offered again, so the echo is recognised whichever came first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .wire import matches_state

Fingerprint = tuple[str, str, str, int, int]


def fingerprint(task: dict[str, Any]) -> Fingerprint:
    status = task.get("status") or {}
    return (
        str(task.get("id", "")),
        str(status.get("state", "")),
        str(status.get("timestamp", "")),
        len(task.get("history") or []),
        len(task.get("artifacts") or []),
    )


def _moment(task: dict[str, Any]) -> datetime | None:
    value = (task.get("status") or {}).get("timestamp")
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _version(task: dict[str, Any]) -> tuple[float, int, int]:
    moment = _moment(task)
    return (
        moment.timestamp() if moment else 0.0,
        len(task.get("history") or []),
        len(task.get("artifacts") or []),
    )


@dataclass
class Item:
    event: str  # "message" (delivered to us) or "task-update"
    task: dict[str, Any]
    event_id: str | None = None
    received_at: float = field(default_factory=time.time)


class _Memory:
    """A bounded set (oldest forgotten first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._keys: OrderedDict[Fingerprint, None] = OrderedDict()

    def add(self, key: Fingerprint) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


class InboxBuffer:
    def __init__(self, *, memory: int = 10_000) -> None:
        self._items: OrderedDict[str, Item] = OrderedDict()
        self._returned = _Memory(memory)
        self._own = _Memory(memory)
        self._changed = asyncio.Event()
        # Own actions in flight, by task id, and the stream events held back meanwhile.
        self._in_flight: dict[str, int] = {}
        self._held: dict[str, list[tuple[dict[str, Any], str, str | None]]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def offer(self, task: dict[str, Any], *, event: str, event_id: str | None = None) -> bool:
        """Buffer a task version unless it was already returned or is our own action's echo."""
        task_id = task.get("id")
        if not task_id:
            return False
        if task_id in self._in_flight:
            self._held.setdefault(task_id, []).append((task, event, event_id))
            return True
        key = fingerprint(task)
        if key in self._returned or key in self._own:
            return False
        item = self._items.get(task_id)
        if item is None:
            self._items[task_id] = Item(event=event, task=task, event_id=event_id)
        elif _version(task) >= _version(item.task):
            # Same task, newer version: update in place. A task still unreturned as "message"
            # stays a message (it is still news to us), now with its latest state.
            item.task = task
            item.event_id = event_id or item.event_id
        self._changed.set()
        return True

    def note_own(self, task: dict[str, Any]) -> None:
        """Record the result of our own action, so its stream echo is not reported back;
        a buffered older version of the same task is brought up to date, not dropped."""
        self._own.add(fingerprint(task))
        item = self._items.get(task.get("id", ""))
        if item is not None and _version(task) >= _version(item.task):
            item.task = task

    @contextlib.contextmanager
    def own_action(self, task_id: str) -> Iterator[None]:
        """Bracket one of our own actions on `task_id`, from before its request is sent until
        its answer has been given to `note_own` (or it failed). Events about the task that
        arrive meanwhile are held back, then offered: the echo of the action is dropped, any
        other change is news as usual."""
        self._in_flight[task_id] = self._in_flight.get(task_id, 0) + 1
        try:
            yield
        finally:
            self._in_flight[task_id] -= 1
            if not self._in_flight[task_id]:
                del self._in_flight[task_id]
                for task, event, event_id in self._held.pop(task_id, []):
                    self.offer(task, event=event, event_id=event_id)

    def take(
        self,
        *,
        since: datetime | None = None,
        status: str | None = None,
        page_size: int | None = None,
    ) -> list[Item]:
        """Remove and return matching items, oldest first; the rest stay buffered."""
        selected: list[Item] = []
        for item in self._items.values():
            if status and not matches_state(item.task, status):
                continue
            if since is not None:
                moment = _moment(item.task)
                if moment is None or moment < since:
                    continue
            selected.append(item)
            if page_size is not None and len(selected) >= page_size:
                break
        for item in selected:
            del self._items[item.task["id"]]
            self._returned.add(fingerprint(item.task))
        return selected

    async def wait_for_change(self, timeout: float) -> None:
        """Return when something new is offered, or after `timeout` seconds."""
        if timeout <= 0:
            return
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass
