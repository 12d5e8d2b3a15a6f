"""Who runs webhook attempts: Celery workers, or a pool of threads in the web process.

With a Celery broker, each attempt is a `messaging.deliver_webhook` task (messaging/tasks.py),
sent by name so that this package never imports the tasks module (which imports it). In the
embedded default (eager Celery, no broker) a small pool of background threads in the web
process stands in for the worker: a request never waits for a webhook.

The embedded pool keeps one queue of ready deliveries and one timer heap (retries after
their backoff, waiting deliveries' fallback times), read by HIKYAKU_WEBHOOK_THREADS threads
— no thread per timer. Fairness between tenants is not this module's business: an attempt
over a cap returns at once (messaging/push/fairness.py), so no thread waits on a slow
receiver beyond its cap.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from django.conf import settings

log = logging.getLogger(__name__)

TASK_NAME = "messaging.deliver_webhook"

# One attempt: returns the delay before the next one, or None when there is none to make.
Work = Callable[[int], "float | None"]


def send_to_workers(delivery_ids: Iterable[int], *, countdown: float | None = None) -> None:
    """Enqueue attempts for Celery workers. Never raises: a delivery that could not be
    enqueued stays pending and the sweeper picks it up."""
    from celery import current_app  # the broker's app (hikyaku/celery.py), set at import

    for delivery_id in delivery_ids:
        try:
            current_app.send_task(TASK_NAME, (delivery_id,), countdown=countdown, retry=False)
        except Exception as exc:  # the broker is down: the sweeper will retry
            log.warning("webhook delivery %s not enqueued (%s); will retry", delivery_id, exc)


class LocalPool:
    """Background threads that run `work(delivery_id)` and re-run it after the delay it
    returns. Threads start on first use and are daemons: deliveries pending when the
    process stops are not resumed here (docs/WEBHOOKS.md, Who delivers)."""

    def __init__(self, work: Work, *, threads: int) -> None:
        self._work = work
        self._threads = max(1, threads)
        self._ready: deque[int] = deque()
        self._timers: list[tuple[float, int, int]] = []  # (due, sequence, delivery id)
        self._sequence = itertools.count()
        self._condition = threading.Condition()
        self._started = False

    def submit(self, delivery_ids: Iterable[int], *, delay: float = 0.0) -> None:
        with self._condition:
            if not self._started:
                self._start()
            if delay > 0:
                due = time.monotonic() + delay
                for delivery_id in delivery_ids:
                    heapq.heappush(self._timers, (due, next(self._sequence), delivery_id))
            else:
                self._ready.extend(delivery_ids)
            self._condition.notify_all()

    def _start(self) -> None:
        for index in range(self._threads):
            thread = threading.Thread(target=self._loop, name=f"webhook-{index}", daemon=True)
            thread.start()
        self._started = True

    def _next(self) -> int:
        with self._condition:
            while True:
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    self._ready.append(heapq.heappop(self._timers)[2])
                if self._ready:
                    return self._ready.popleft()
                timeout = self._timers[0][0] - now if self._timers else None
                self._condition.wait(timeout)

    def _loop(self) -> None:
        while True:
            delivery_id = self._next()
            try:
                delay = self._work(delivery_id)
            except Exception:
                log.exception("webhook delivery %s failed unexpectedly", delivery_id)
                delay = None
            if delay is not None:
                self.submit([delivery_id], delay=delay)


_pool: LocalPool | None = None
_pool_lock = threading.Lock()


def local_pool(work: Work) -> LocalPool:
    """The process's embedded pool (created on first use)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = LocalPool(work, threads=settings.HIKYAKU_WEBHOOK_THREADS)
    return _pool
