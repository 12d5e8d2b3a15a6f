"""Template filters of the web UI."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

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
