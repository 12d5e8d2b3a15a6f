"""Files attached to tasks (raw parts): found by a digest of their content, downloaded with
headers that never let a browser run them."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from django.http import HttpResponse

from messaging.models import Task


def part_digest(part: dict[str, Any]) -> str:
    data = part.get("raw")
    return hashlib.sha256(data.encode()).hexdigest()[:32] if isinstance(data, str) else ""


def raw_parts(task: Task) -> Iterator[dict[str, Any]]:
    """Every raw part of a task: its message, its follow-ups, its results."""
    messages = [task.message or {}, *(task.history or []), *(task.artifacts or [])]
    for holder in messages:
        for part in (holder.get("parts") or []) if isinstance(holder, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("raw"), str):
                yield part


def find_part(task: Task, digest: str) -> dict[str, Any] | None:
    return next((p for p in raw_parts(task) if part_digest(p) == digest), None)


def download(part: dict[str, Any]) -> HttpResponse:
    """The file as an attachment: a download, never a page. Whatever its declared type, it is
    sent as application/octet-stream with nosniff and a sandboxing CSP, so an HTML or SVG
    file from an agent cannot run script on the broker's origin."""
    content = base64.b64decode(part["raw"])
    name = (part.get("filename") or "file").replace("/", "_").replace("\\", "_")
    ascii_name = name.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    response = HttpResponse(content, content_type="application/octet-stream")
    response["Content-Disposition"] = (
        f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
    )
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Length"] = str(len(content))
    return response
