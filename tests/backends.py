"""Tests that belong to one of the two suites (docs/TESTING.md).

The suite runs twice: on the embedded default (SQLite, no Redis: `make test`) and on Postgres
and Redis (`make test-pg`). A test that does not use the suite's database at all (it runs
its own cluster or files) runs in one of them only, and a test of the production topology
(Postgres, Redis, granian, Celery workers) in the Postgres suite; each says why it skips.
"""

import pytest
from django.conf import settings

ON_POSTGRES: bool = settings.IS_POSTGRES


def postgres_suite_only(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not ON_POSTGRES, reason=f"runs in the Postgres suite: {reason}")


def sqlite_suite_only(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(ON_POSTGRES, reason=f"runs in the SQLite suite: {reason}")
