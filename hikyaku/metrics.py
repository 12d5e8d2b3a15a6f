"""Metrics hooks. The operations work replaces the bodies with Prometheus counters; callers
use only these functions, so they never depend on the metrics backend."""


def doorbell(outcome: str) -> None:
    pass


def sent(message_type: str, deliveries: int) -> None:
    pass


def transition(kind: str) -> None:
    pass


def events_written(count: int) -> None:
    pass


def webhook_attempt(outcome: str) -> None:
    """delivered, http_error, timeout, connection_error, refused, dropped, gave_up."""
    pass
