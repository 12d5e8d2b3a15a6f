"""Where the write services' decisions become rows (docs/ARCHITECTURE.md, "One write path").

The services (messaging/services.py) decide — what a send creates, what a lifecycle action
changes, from the lifecycle (messaging/lifecycle.py) and the policy (messaging/policy.py) —
and a store writes it. Every store keeps one contract (`Store`): the same rows, the same
refusals, the same concurrency model (a compare-and-set that the caller retries), with the
statements' conditions rendered from the same definitions. Two implementations:

- `PostgresStore`: each write is one autocommit statement (data-modifying CTEs), so a send
  or a transition costs one round trip and no BEGIN/COMMIT;
- `PortableStore`: each write is a short transaction of plain statements; it serves SQLite
  (the embedded default), and runs on Postgres too, where the contract tests hold the two to
  the same rows (tests/messaging/test_store_contract.py).
"""

from __future__ import annotations

from django.db import connection

from .base import Expected, Store
from .portable import PortableStore
from .postgres import PostgresStore

__all__ = ["Expected", "PortableStore", "PostgresStore", "Store", "current"]

_STORES: dict[str, Store] = {"postgresql": PostgresStore()}
_PORTABLE = PortableStore()


def current() -> Store:
    """The store of the default database's vendor."""
    return _STORES.get(connection.vendor, _PORTABLE)
