"""Fair webhook delivery (docs/WEBHOOKS.md, "Fairness"): per-tenant and per-destination caps
on the attempts in flight, shared by every process through the database.

A slow receiver holds whoever is waiting on it. Without caps, one tenant's slow receiver
fills every delivery thread or worker and everyone else's webhooks queue behind it. So an
attempt starts only while its tenant has fewer than HIKYAKU_WEBHOOK_TENANT_CONCURRENCY
attempts in flight and its destination (scheme, host and port) fewer than
HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY. A delivery over a cap does not wait in a thread or a
worker: its row is marked waiting and the thread moves on. When an attempt of that tenant
or destination finishes, it wakes the oldest waiting deliveries it was holding back
(`wake`); a wake-up that is lost (a worker killed) is made up by the row's own fallback time,
which the sweeper (Celery beat) or the embedded runner's timer picks up.

"In flight" is what the delivery log already says: a pending row claimed by an attempt
(`last_error` is `delivery.UNFINISHED`) whose lease has not run out. A worker that died
mid-attempt therefore holds its slot until its lease ends, never for good.

Claims are serialised per tenant and per destination (Postgres advisory locks, taken in
that order; SQLite serialises every writer anyway), so the caps hold exactly across
processes.
"""

from __future__ import annotations

import enum
import random
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.destinations import DestinationRefused, split_url

from ..models import WebhookDelivery

Outcome = WebhookDelivery.Outcome

# What a claimed row says until its attempt records an outcome: if the worker dies mid-POST,
# it stays there, and the row's `attempts` already counts the interrupted attempt.
UNFINISHED = (
    "No outcome recorded yet: in progress, or the worker was lost (retried after the lease)."
)
# What a row held back by a cap says (the admin shows it) until an attempt of its tenant or
# destination finishes and wakes it.
WAITING = (
    "Waiting for a free slot: its tenant or its destination already has the most attempts "
    "in flight allowed (docs/WEBHOOKS.md, Fairness)."
)


class Claim(enum.Enum):
    CLAIMED = "claimed"  # the attempt may POST now
    WAITING = "waiting"  # held back by a cap; an attempt that finishes will wake it
    SKIPPED = "skipped"  # finished, not due, or claimed by another worker


def lease_seconds() -> float:
    """How long a claim holds its row (and its slot) if its worker never reports back."""
    return settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS * 3 + 30


def waiting_fallback_seconds() -> float:
    """When a waiting row falls due by itself, should every wake-up be lost: after any lease
    that holds its slot could have run out. Spread, so a backlog does not come due at once."""
    return lease_seconds() * random.uniform(1.5, 2.0)


def destination_key(url: str) -> str:
    """The destination a cap counts: scheme, host and port, so that the paths of one receiver
    share its cap."""
    try:
        scheme, host, port = split_url(url)
    except DestinationRefused:
        return url
    return f"{scheme}://{host.lower().rstrip('.')}:{port}"


def _url_prefix(url: str) -> str:
    """The URL up to its path: how waiting rows of one destination are found again (their
    stored URLs, spelled as their owners wrote them)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def claim(*, delivery_id: int, now: datetime | None = None) -> Claim:
    """Claim a pending, due delivery for one attempt — counting the attempt and setting its
    lease — if its tenant and its destination are under their caps; otherwise mark it
    waiting. One short transaction. `now` defaults to the time the locks were taken, so the
    claims of one tenant or destination see each other's leases in order."""
    row = (
        WebhookDelivery.objects.filter(pk=delivery_id, outcome=Outcome.PENDING)
        .values("tenant_id", "url")
        .first()
    )
    if row is None:
        return Claim.SKIPPED
    tenant_cap = settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY
    destination_cap = settings.HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY
    destination = destination_key(row["url"])
    with transaction.atomic():
        capped = tenant_cap > 0 or destination_cap > 0
        if capped:
            _lock("tenant", str(row["tenant_id"]))
            _lock("destination", destination)
        now = now or timezone.now()
        due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
        pending = WebhookDelivery.objects.filter(due, pk=delivery_id, outcome=Outcome.PENDING)
        if capped:
            tenant_busy, destination_busy = _in_flight(
                now, tenant_id=row["tenant_id"], destination=destination, exclude=delivery_id
            )
            if (0 < tenant_cap <= tenant_busy) or (0 < destination_cap <= destination_busy):
                held = pending.update(
                    last_error=WAITING,
                    next_attempt_at=now + timedelta(seconds=waiting_fallback_seconds()),
                    updated_at=now,
                )
                return Claim.WAITING if held else Claim.SKIPPED
        claimed = pending.update(
            next_attempt_at=now + timedelta(seconds=lease_seconds()),
            attempts=F("attempts") + 1,
            last_status=None,
            last_error=UNFINISHED,
            updated_at=now,
        )
    return Claim.CLAIMED if claimed else Claim.SKIPPED


def _lock(kind: str, key: str) -> None:
    """Serialise claims of one tenant or one destination until the transaction ends
    (Postgres; SQLite's writers are serialised by its write lock already)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s::text, 0))",
            [f"hikyaku.webhook.{kind}:{key}"],
        )


def _in_flight(now: datetime, *, tenant_id, destination: str, exclude: int) -> tuple[int, int]:
    """Attempts in flight for this tenant, and for this destination (any tenant's): claimed
    rows whose lease has not run out. Waiting rows fall due well after any lease, so the
    range reads only claimed rows and retries due soon, a handful at any time."""
    rows = (
        WebhookDelivery.objects.filter(
            outcome=Outcome.PENDING,
            last_error=UNFINISHED,
            next_attempt_at__gt=now,
            next_attempt_at__lte=now + timedelta(seconds=lease_seconds() * 1.25),
        )
        .exclude(pk=exclude)
        .values_list("tenant_id", "url")
    )
    tenant_busy = destination_busy = 0
    for row_tenant, url in rows:
        tenant_busy += row_tenant == tenant_id
        destination_busy += destination_key(url) == destination
    return tenant_busy, destination_busy


def wake(*, tenant_id, url: str) -> list[int]:
    """An attempt of this tenant to this URL finished: make the oldest deliveries that were
    waiting on either cap due now, and return their ids (the caller enqueues them). A woken
    delivery still over a cap simply waits again."""
    waiting = WebhookDelivery.objects.filter(outcome=Outcome.PENDING, last_error=WAITING)
    ids: list[int] = []
    if settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY > 0:
        ids += waiting.filter(tenant_id=tenant_id).order_by("pk").values_list("pk", flat=True)[:2]
    if settings.HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY > 0:
        ids += (
            waiting.filter(url__startswith=_url_prefix(url))
            .order_by("pk")
            .values_list("pk", flat=True)[:2]
        )
    ids = sorted(set(ids))
    if not ids:
        return []
    woken = waiting.filter(pk__in=ids)
    woken.update(next_attempt_at=timezone.now(), updated_at=timezone.now())
    return ids
