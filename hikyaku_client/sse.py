"""The inbox stream (`GET /api/v1/subscribe`, docs/PROTOCOL.md §6) with resume and backoff.

`InboxStream.events()` yields every event of the agent's stream forever: `ready` each time a
connection is live, then `message` (a task delivered to us) and `task-update` (a change on a
task we sent or received), each with its event id and the Task as parsed JSON. When the
connection drops it reconnects with `Last-Event-ID` = the last id it yielded, after an
exponential backoff with jitter (reset once a connection is live again), so nothing is missed
and nothing is repeated across a drop. Authentication failures and a missing endpoint end the
iteration with an exception; everything else is retried.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

from .errors import (
    AuthenticationFailed,
    BrokerError,
    describe_transport_error,
    error_from_response,
)
from .http import HikyakuClient

SUBSCRIBE_PATH = "/api/v1/subscribe"


@dataclass(frozen=True)
class StreamEvent:
    id: str | None
    event: str
    data: Any

    @property
    def task(self) -> dict[str, Any] | None:
        """The Task carried by a `message` / `task-update` event."""
        if isinstance(self.data, dict):
            task = self.data.get("task") if "task" in self.data and "id" not in self.data else None
            return task if isinstance(task, dict) else self.data
        return None


# on_status(state, detail): state is "connecting", "connected" or "reconnecting".
StatusCallback = Callable[[str, str], None]


class InboxStream:
    def __init__(
        self,
        client: HikyakuClient,
        *,
        last_event_id: str | None = None,
        initial_delay: float = 0.5,
        max_delay: float = 30.0,
        read_timeout: float = 75.0,
        on_status: StatusCallback | None = None,
    ) -> None:
        self.client = client
        self.last_event_id = last_event_id
        self.initial_delay = initial_delay
        self.max_delay = max_delay
        # The broker sends a keepalive comment at least every 30 s; silence for longer than
        # this means the connection is dead even if TCP has not noticed.
        self.read_timeout = read_timeout
        self.on_status = on_status
        self.state = "connecting"
        self.connections = 0

    def _set_state(self, state: str, detail: str = "") -> None:
        self.state = state
        if self.on_status is not None:
            self.on_status(state, detail)

    async def events(self) -> AsyncIterator[StreamEvent]:
        delay = self.initial_delay
        url = self.client.url_for(SUBSCRIBE_PATH)
        self._set_state("connecting", url)
        while True:
            reason = "stream closed by the broker"
            headers = {**self.client.credentials.agent_headers(), "Accept": "text/event-stream"}
            headers["Cache-Control"] = "no-store"
            if self.last_event_id:
                headers["Last-Event-ID"] = self.last_event_id
            try:
                async with self.client.http.stream(
                    "GET",
                    SUBSCRIBE_PATH,
                    headers=headers,
                    timeout=httpx.Timeout(10.0, read=self.read_timeout),
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        error = error_from_response(response)
                        # 421: a broker web process, which serves no streams (HIKYAKU_URL
                        # names it instead of the proxy): retrying there cannot help.
                        if isinstance(error, AuthenticationFailed) or response.status_code in (
                            403,
                            404,
                            405,
                            421,
                        ):
                            raise error
                        raise _Retry(str(error))
                    async for sse in EventSource(response).aiter_sse():
                        if sse.retry:
                            delay = max(delay, sse.retry / 1000)
                        if not sse.data and sse.event not in ("ready", "closed"):
                            continue  # e.g. a bare `retry:` block, which httpx-sse yields too
                        if sse.event == "ready":
                            # Its id is the stream's position: resuming from it after an early
                            # drop replays whatever happened in between.
                            if sse.id:
                                self.last_event_id = sse.id
                            self.connections += 1
                            delay = self.initial_delay
                            self._set_state("connected", url)
                            yield StreamEvent(
                                id=sse.id or None, event="ready", data=_parse(sse.data)
                            )
                            continue
                        if sse.event == "closed":
                            # The broker ends the stream on purpose: for good when the
                            # credentials no longer hold, otherwise (restart, slow reader)
                            # to be resumed.
                            closed = _parse(sse.data)
                            closed = closed if isinstance(closed, dict) else {}
                            if closed.get("code") == "UNAUTHORIZED":
                                raise AuthenticationFailed(
                                    str(closed.get("message") or "Stream closed: unauthorized."),
                                    code="UNAUTHORIZED",
                                    status=401,
                                )
                            reason = str(closed.get("message") or "stream closed by the broker")
                            break
                        if sse.id:
                            self.last_event_id = sse.id
                        yield StreamEvent(id=sse.id or None, event=sse.event, data=_parse(sse.data))
            except (AuthenticationFailed, BrokerError):
                raise
            except _Retry as exc:
                reason = str(exc)
            except httpx.ReadTimeout:
                reason = f"no data for {self.read_timeout:.0f} s"
            except httpx.TransportError as exc:
                reason = describe_transport_error(exc)
            except SSEError as exc:
                raise BrokerError(
                    f"{url} is not an event stream ({exc}). Is HIKYAKU_URL right?"
                ) from None
            wait = delay * random.uniform(0.8, 1.2)
            self._set_state("reconnecting", f"{reason}; retrying in {wait:.1f} s")
            await asyncio.sleep(wait)
            delay = min(delay * 2, self.max_delay)


class _Retry(Exception):
    pass


def _parse(data: str) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data
