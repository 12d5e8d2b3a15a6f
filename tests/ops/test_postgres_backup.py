"""The README's pg_dump / pg_restore procedure, run for real against the machine's Postgres."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from testbed import recreate_database
from tests.backends import postgres_suite_only
from tests.ops.processes import REPO, base_env, manage

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def tool(name: str) -> str:
    found = shutil.which(name) or (str(PG_BIN / name) if (PG_BIN / name).exists() else None)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def database_url(suffix: str) -> str:
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith("postgres"):
        base = "postgres://postgres@127.0.0.1:5432/hikyaku_test"
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path + suffix))


def libpq(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(scheme="postgresql"))


def snapshot(url: str) -> dict:
    """Every row of every table (order-independent) and every sequence position."""
    with psycopg.connect(libpq(url)) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
            )
        ]
        rows = {
            table: sorted(
                connection.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table))),
                key=repr,
            )
            for table in tables
        }
        sequences = dict(
            connection.execute("SELECT sequencename, last_value FROM pg_sequences").fetchall()
        )
    return {"rows": rows, "sequences": sequences}


@pytest.fixture
def databases():
    source, target = database_url("_dump_src"), database_url("_dump_dst")
    try:
        recreate_database(source)
    except psycopg.OperationalError as exc:
        pytest.skip(f"needs the machine's Postgres on 127.0.0.1: {exc}")
    recreate_database(target, create=False)
    yield source, target
    recreate_database(source, create=False)
    recreate_database(target, create=False)


@postgres_suite_only("the README's pg_dump/pg_restore procedure, on databases of its own")
def test_pg_dump_and_pg_restore_round_trip_every_row_and_credential(databases, tmp_path):
    source, target = databases
    env = base_env(DATABASE_URL=source)
    manage("migrate", "--no-input", "-v0", env=env)
    secrets = json.loads(world("populate", env=env))
    before = snapshot(source)
    for table in ("tenants_apikey", "agents_agent", "messaging_task", "messaging_taskevent"):
        assert before["rows"][table], table

    # The README's procedure: a custom-format dump, checked, restored into an empty database.
    dump = tmp_path / "hikyaku.dump"
    subprocess.run([tool("pg_dump"), "-Fc", "-f", str(dump), libpq(source)], check=True)
    listing = subprocess.run(
        [tool("pg_restore"), "--list", str(dump)], check=True, capture_output=True, text=True
    )
    assert "TABLE DATA public tenants_apikey" in listing.stdout
    recreate_database(target)
    subprocess.run(
        [tool("pg_restore"), "--no-owner", "--exit-on-error", "-d", libpq(target), str(dump)],
        check=True,
    )

    assert snapshot(target) == before
    restored_env = base_env(DATABASE_URL=target)
    access = json.loads(world("authenticate", json.dumps(secrets), env=restored_env))
    assert access["revoked_key"] == access["expired_key"] == "UNAUTHORIZED"
    assert access["bob_token"] == access["carol_old_token"] == "UNAUTHORIZED"
    assert access["active_key"] is access["alice_token"] is access["carol_token"] is True
    # Nothing is pending on the restored database.
    check = manage("migrate", "--check", env=restored_env, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def world(command: str, *args: str, env: dict) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tests.ops.world", command, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
