"""`GET /api/v1/subscribe`: an agent's inbox as Server-Sent Events (docs/PROTOCOL.md §6)."""

from __future__ import annotations

import logging
from functools import partial

from django.db import DatabaseError

from agents.auth import authenticate_agent
from hikyaku.errors import HikyakuError, MethodNotAllowed, ServiceUnavailable

from ..a2a.wire import dialect_for
from . import sse
from .db import run_db
from .feeds import InboxFeed, parse_event_id
from .serve import serve

log = logging.getLogger(__name__)


async def subscribe(scope: sse.Scope, receive: sse.Receive, send: sse.Send) -> None:
    if scope["method"] != "GET":
        await sse.send_error(send, MethodNotAllowed("Use GET."), [("Allow", "GET")])
        return
    try:
        dialect = dialect_for(sse.header(scope, b"a2a-version"))
        since = parse_event_id(sse.header(scope, b"last-event-id"), "Last-Event-ID")
        if since is None:
            since = parse_event_id(sse.query(scope).get("since"), "since")
        identity = await run_db(
            partial(
                authenticate_agent,
                authorization=sse.header(scope, b"authorization"),
                agent_id=sse.header(scope, b"x-agent-id"),
            )
        )
    except HikyakuError as exc:
        await sse.send_error(send, exc)
        return
    except DatabaseError as exc:
        log.warning("subscribe: database unavailable (%s)", exc.__class__.__name__)
        await sse.send_error(send, ServiceUnavailable())
        return
    await serve(InboxFeed(identity, dialect, since), receive, send, kind="subscribe")
