"""`GET /ui/t/<slug>/events/` (every event of the tenant; `?agent=<id>` narrows it) and
`GET /ui/t/<slug>/agents/<agent id>/events/` (the events of that agent's tasks): live events
for a signed-in member of a tenant, as Server-Sent Events.

Authenticated by the Django session cookie (loaded the way SessionMiddleware and
AuthenticationMiddleware would, on a stream DB thread) and authorized by membership: another
tenant's slug, an unknown slug and an agent outside the tenant are all 404. The session and
membership are re-checked every HIKYAKU_STREAM_CHECK_SECONDS; logging out (or being removed
from the tenant) closes the stream.
"""

from __future__ import annotations

import logging
import re
import uuid
from functools import partial
from http.cookies import SimpleCookie
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib.auth import get_user
from django.db import DatabaseError

from agents.models import Agent
from hikyaku.errors import HikyakuError, NotFound, ServiceUnavailable, Unauthenticated
from tenants.models import Tenant
from tenants.selectors import membership_for

from . import sse
from .db import run_db
from .feeds import TenantFeed, parse_event_id
from .serve import serve

log = logging.getLogger(__name__)

PATH = re.compile(
    r"^/ui/t/(?P<slug>[-a-zA-Z0-9_]+)/(?:events|agents/(?P<agent>[0-9a-fA-F-]{32,36})/events)/?$"
)


def _session_key(scope: sse.Scope) -> str | None:
    raw = sse.header(scope, b"cookie")
    if not raw:
        return None
    cookie = SimpleCookie()
    try:
        cookie.load(raw)
    except Exception:
        return None
    morsel = cookie.get(settings.SESSION_COOKIE_NAME)
    return morsel.value if morsel else None


def _user(session_key: str | None):
    if not session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(SimpleNamespace(session=store))
    return user if user.is_authenticated else None


def authorize(
    session_key: str | None, slug: str, agent: str | None
) -> tuple[Tenant, uuid.UUID | None]:
    """The tenant (and agent) a session may watch; raises Unauthenticated or NotFound."""
    user = _user(session_key)
    if user is None:
        raise Unauthenticated("Sign in to watch this tenant.")
    membership = membership_for(user=user, tenant_slug=slug)
    if membership is None:
        raise NotFound("No such tenant.")
    agent_id = None
    if agent:
        try:
            agent_id = uuid.UUID(agent)
        except ValueError:
            raise NotFound("No such agent.") from None
        if not Agent.objects.filter(pk=agent_id, tenant=membership.tenant).exists():
            raise NotFound("No such agent.")
    return membership.tenant, agent_id


def still_allowed(session_key: str | None, slug: str, agent: str | None) -> str | None:
    try:
        authorize(session_key, slug, agent)
    except HikyakuError:
        return "session"
    return None


async def tenant_stream(scope: sse.Scope, receive: sse.Receive, send: sse.Send) -> None:
    match = PATH.match(scope["path"])
    if scope["method"] != "GET" or match is None:
        await sse.send_error(send, NotFound())
        return
    slug = match["slug"]
    params = sse.query(scope)
    agent = match["agent"] or params.get("agent") or None
    session_key = _session_key(scope)
    try:
        since = parse_event_id(sse.header(scope, b"last-event-id"), "Last-Event-ID")
        if since is None:
            since = parse_event_id(params.get("since"), "since")
        tenant, agent_id = await run_db(authorize, session_key, slug, agent)
    except HikyakuError as exc:
        await sse.send_error(send, exc)
        return
    except DatabaseError as exc:
        log.warning("web stream: database unavailable (%s)", exc.__class__.__name__)
        await sse.send_error(send, ServiceUnavailable())
        return
    feed = TenantFeed(
        tenant=tenant,
        agent_id=agent_id,
        since=since,
        validate=partial(still_allowed, session_key, slug, agent),
        check_seconds=settings.HIKYAKU_STREAM_CHECK_SECONDS,
    )
    await serve(feed, receive, send, kind="ui")
