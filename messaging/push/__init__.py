"""Push notifications (docs/PROTOCOL.md §7): task push configs, agent webhooks, and their delivery.

`configs` — the A2A TaskPushNotificationConfig services; `delivery` — fan-out, attempts,
retries; `payloads` — the StreamResponse bodies and the signature; `http` — the guarded POST.
docs/WEBHOOKS.md describes the receiver's side.
"""
