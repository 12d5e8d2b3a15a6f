"""Push notifications (docs/PROTOCOL.md §7): task push configs, agent webhooks, and their delivery.

`configs` — the A2A TaskPushNotificationConfig services; `delivery` — fan-out, attempts,
retries; `fairness` — the per-tenant and per-destination caps on attempts in flight; `runner`
— Celery workers or the embedded pool of threads; `payloads` — the StreamResponse bodies and
the signature; `http` — the guarded POST.
docs/WEBHOOKS.md describes the receiver's side.
"""
