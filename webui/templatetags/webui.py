"""Template filters of the web UI."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from messaging import lifecycle
from messaging.parties import actor_display

from ..files import part_digest

register = template.Library()


@register.filter
def ago(value: datetime | None) -> str:
    """A <time> element reading "just now" or "5 minutes ago", the full time on hover."""
    if value is None:
        return ""
    delta = (timezone.now() - value).total_seconds()
    text = "just now" if delta < 60 else f"{timesince(value)} ago"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        value.strftime("%Y-%m-%d %H:%M:%S UTC"),
        text,
    )


@register.filter
def possessive(name: str) -> str:
    """ "Bob's", "Acme Robots'": English possessive of a name."""
    name = str(name)
    return f"{name}'" if name.endswith(("s", "S")) else f"{name}'s"


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON text (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@register.filter
def http_url(value: Any) -> str:
    """The URL if it is http(s), else "" — so a javascript: or data: URL is never a link."""
    if not isinstance(value, str):
        return ""
    return value if urlsplit(value.strip()).scheme.lower() in ("http", "https") else ""


@register.filter
def raw_size(part: dict) -> int:
    """Decoded size in bytes of a raw (base64) part."""
    data = part.get("raw") or ""
    return len(data) * 3 // 4 - data.count("=", -2) if isinstance(data, str) else 0


# Text attachments up to this size are shown inline; anything bigger, or not text, is a
# download (webui.views.messages.task_file).
INLINE_TEXT_BYTES = 64 * 1024
TEXT_TYPES = ("text/", "application/json", "application/x-ndjson", "application/yaml")


@register.filter
def raw_text(part: dict) -> str:
    """A raw part's content as text when it is small text (UTF-8), else ""."""
    media_type = str(part.get("mediaType") or "")
    data = part.get("raw")
    if not media_type.startswith(TEXT_TYPES) or not isinstance(data, str):
        return ""
    if len(data) * 3 // 4 > INLINE_TEXT_BYTES:
        return ""
    try:
        return base64.b64decode(data, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""


@register.filter
def file_digest(part: dict) -> str:
    """The key of a raw part in its task's download URL: a digest of its content."""
    return part_digest(part)


@register.filter
def actor_name(event: Any) -> str:
    agent = event.actor if event.actor_id is not None else None
    return actor_display(agent.name if agent else None, event.actor_label)


@register.filter
def party_name(task: Any, side: str) -> str:
    """The sender's or recipient's name; an external A2A caller by its caller id."""
    if side == "sender":
        return task.sender.name if task.sender_id else f"external: {task.caller_id}"
    if task.recipient_id:
        return task.recipient.name
    count = (task.metadata or {}).get("recipientCount", 0)
    return f"Everyone ({count})"


@register.filter
def preview(task: Any) -> str:
    text = (task.search_text or "").strip()
    if text:
        return text
    kinds = [next(iter(k for k in part if k in PART_KINDS), "part") for part in _parts(task)]
    return ", ".join(f"[{kind}]" for kind in kinds) or "—"


PART_KINDS = ("text", "data", "url", "raw")


def _parts(task: Any) -> list[dict]:
    message = task.message or {}
    return [p for p in message.get("parts") or [] if isinstance(p, dict)]


@register.filter
def follow_ups(task: Any) -> list[dict]:
    """The messages after the original one, in order."""
    return [m for m in (task.history or [])[1:] if isinstance(m, dict)]


@register.filter
def results(task: Any) -> list[dict]:
    """Result artifacts (the first artifact is the delivered message itself, compat)."""
    return [a for a in (task.artifacts or [])[1:] if isinstance(a, dict)]


@register.filter
def state_label(task: Any) -> str:
    """A task's state in the human vocabulary (messaging/lifecycle.py): "Unread", "Blocked"…"""
    return lifecycle.phase_of(task.state, task.awaiting).label


@register.filter
def timeline(events: list[Any]) -> list[tuple[Any, Any, Any]]:
    """(event, state before, state after) in the human vocabulary, oldest first: whose turn
    an INPUT_REQUIRED was follows from the verbs before it."""
    rows, before = [], None
    for event in events:
        after = lifecycle.after_event(event.kind, event.to_state, before)
        rows.append((event, before, after))
        before = after
    return rows


@register.filter
def state_css(task: Any) -> str:
    """The badge class: the human state's name."""
    return lifecycle.phase_of(task.state, task.awaiting).name
