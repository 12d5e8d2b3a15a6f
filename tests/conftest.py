"""Small explicit fixtures. Factories live in tests/factories.py."""

import pytest
from django.test import Client

from tests import factories
from tests.live import broker  # noqa: F401  (fixture)


@pytest.fixture
def tenant(db):
    return factories.tenant("acme")


@pytest.fixture
def other_tenant(db):
    return factories.tenant("globex")


@pytest.fixture
def api_key(tenant):
    """The raw key of an active key of `tenant`."""
    return factories.api_key(tenant)


@pytest.fixture
def other_api_key(other_tenant):
    return factories.api_key(other_tenant)


@pytest.fixture
def agent(tenant):
    return factories.agent(tenant, name="alice")


@pytest.fixture
def peer(tenant):
    return factories.agent(tenant, name="bob")


@pytest.fixture
def stranger(other_tenant):
    """An agent of another tenant."""
    return factories.agent(other_tenant, name="mallory")


@pytest.fixture
def client():
    return Client()


@pytest.fixture
def agent_client(agent):
    """A client that authenticates as `agent` with its agent token."""
    return factories.AgentClient(agent)


# A real server process ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """SQLite tests use a database file rather than memory, so that a real server process
    (tests/server.py) can open the same test database."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3") and not database.get("TEST", {}).get("NAME"):
        database.setdefault("TEST", {})["NAME"] = str(
            tmp_path_factory.mktemp("db") / "test.sqlite3"
        )


@pytest.fixture(scope="session")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """A uvicorn process serving the broker on the test database, for the whole session.
    Tests that use it need `transactional_db` so that what they write is visible to it."""
    from django.db import connection

    from tests.server import database_url_for, start_server

    process = start_server(
        database_url=database_url_for(connection.settings_dict),
        log_path=tmp_path_factory.mktemp("server") / "server.log",
    )
    yield process
    process.stop()
