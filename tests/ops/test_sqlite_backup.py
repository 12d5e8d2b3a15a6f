"""`manage.py backup` / `restore` on the embedded SQLite database, end to end.

Everything runs against a real SQLite file in a temporary directory, through subprocesses, so
these tests run the same on the SQLite and the Postgres CI legs.
"""

import io
import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from django.apps import apps
from django.core.management import CommandError, call_command

from tests.backends import sqlite_suite_only
from tests.ops.processes import REPO, base_env, free_port, granian_wsgi, manage, running

# The in-process tests point settings.DATABASES at a file; the commands only read it.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning"),
    sqlite_suite_only(
        "backs up and restores SQLite files of its own, whatever the suite's database"
    ),
]


@pytest.fixture(scope="module")
def world_template(tmp_path_factory):
    """Built once per module: migrating and populating takes a few seconds."""
    database = tmp_path_factory.mktemp("template") / "hikyaku.sqlite3"
    env = base_env(DATABASE_URL=f"sqlite:///{database}")
    manage("migrate", "--no-input", "-v0", env=env)
    secrets = json.loads(world_command("populate", env=env))
    return database, secrets


@pytest.fixture
def world(world_template, tmp_path):
    """A migrated, populated broker database file and the raw secrets it was built with."""
    template, secrets = world_template
    database = tmp_path / "live" / "hikyaku.sqlite3"
    database.parent.mkdir()
    shutil.copy(template, database)
    return database, base_env(DATABASE_URL=f"sqlite:///{database}"), secrets


def world_command(command: str, *args: str, env: dict) -> str:
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


@pytest.fixture
def live(world, settings):
    """`world`, with this process's settings pointed at its file for in-process commands.

    The commands only read settings.DATABASES (they open the file with sqlite3 themselves),
    so overriding it here is safe; Django warns about the override in general.
    """
    database, _, secrets = world
    settings.DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)}
    }
    return database


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def dump(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table, in rowid order, read with plain sqlite3."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {
            table: connection.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()
            for table in tables
        }
    finally:
        connection.close()


def test_round_trip_restores_every_row_of_every_table(world, tmp_path):
    database, env, secrets = world
    before = dump(database)
    # The comparison is generic: every model's table (messaging's too, once it has some) is in
    # it, and the credential tables are not trivially empty.
    model_tables = {model._meta.db_table for model in apps.get_models()}
    assert model_tables <= set(before)
    for table in (
        "tenants_tenant",
        "tenants_apikey",
        "tenants_membership",
        "agents_agent",
        "messaging_task",
        "messaging_taskevent",
    ):
        assert before[table], table

    backup = tmp_path / "snapshot.sqlite3"
    result = manage("backup", str(backup), env=env)
    assert "integrity ok" in result.stdout
    assert dump(backup) == before

    world_command("mutate", json.dumps(secrets), env=env)
    mutated = dump(database)
    assert mutated != before

    restored = manage("restore", str(backup), env=env)
    assert dump(database) == before
    [aside] = database.parent.glob("hikyaku.replaced-*.sqlite3")
    assert f"kept as {aside}" in restored.stdout
    assert dump(aside) == mutated
    assert dump(backup) == before  # the backup itself is only read

    access = json.loads(world_command("authenticate", json.dumps(secrets), env=env))
    assert access == {
        "active_key": True,
        # Revoked after the snapshot, so active again: README tells operators to re-revoke.
        "spare_key": True,
        "revoked_key": "UNAUTHORIZED",
        "expired_key": "UNAUTHORIZED",
        "alice_token": True,
        "bob_token": "UNAUTHORIZED",
        "carol_old_token": "UNAUTHORIZED",
        "carol_token": True,
    }


def test_backup_is_a_consistent_snapshot_while_the_broker_writes(world, live, tmp_path):
    database, env, secrets = world
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    registered: list[int] = []

    def register_agents() -> None:
        with httpx.Client(base_url=base, timeout=10) as http:
            while not stop.is_set():
                response = http.post(
                    "/api/v1/agents",
                    json={"name": f"load-{len(registered)}", "description": ""},
                    headers={"Authorization": f"Bearer {secrets['active_key']}"},
                )
                assert response.status_code == 201, response.text
                registered.append(1)

    with running(granian_wsgi(port), env=env, log=tmp_path / "web.log", ready_url=f"{base}/readyz"):
        writer = threading.Thread(target=register_agents)
        writer.start()
        try:
            while len(registered) < 5:
                stop.wait(0.05)
            backups = [tmp_path / f"online-{n}.sqlite3" for n in range(3)]
            for backup in backups:
                run("backup", str(backup))
                stop.wait(0.2)
        finally:
            stop.set()
            writer.join()
    counts = []
    for backup in backups:
        connection = sqlite3.connect(backup)
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        counts.append(connection.execute("SELECT count(*) FROM agents_agent").fetchone()[0])
        connection.close()
    assert counts == sorted(counts) and counts[-1] > 3  # snapshots taken as the load grew
    assert len(list(tmp_path.glob(".online-*"))) == 0  # no partial files left behind


def test_backup_never_overwrites_a_file(live, tmp_path):
    existing = tmp_path / "precious.sqlite3"
    existing.write_bytes(b"do not touch")
    with pytest.raises(CommandError, match="already exists"):
        run("backup", str(existing))
    assert existing.read_bytes() == b"do not touch"


def test_restore_refuses_while_a_server_is_running(world, live, tmp_path):
    database, env, _ = world
    backup = tmp_path / "snapshot.sqlite3"
    run("backup", str(backup))
    before = dump(database)
    port = free_port()
    ready = f"http://127.0.0.1:{port}/readyz"
    with running(granian_wsgi(port), env=env, log=tmp_path / "web.log", ready_url=ready):
        with pytest.raises(CommandError, match="server or worker is running"):
            run("restore", str(backup))
        assert httpx.get(ready).status_code == 200
    assert dump(database) == before
    assert not list(database.parent.glob("*.replaced-*"))
    # Once the server is gone the same restore goes through.
    assert "Restored" in run("restore", str(backup))


def test_restore_refuses_while_another_process_holds_a_transaction(live, tmp_path):
    backup = tmp_path / "snapshot.sqlite3"
    run("backup", str(backup))
    writer = sqlite3.connect(live, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(CommandError, match="open in a transaction"):
            run("restore", str(backup))
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_restore_refuses_a_corrupt_backup(live, tmp_path):
    backup = tmp_path / "snapshot.sqlite3"
    run("backup", str(backup))
    data = bytearray(backup.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for page in range(2, len(data) // page_size, 3):  # scribble over b-tree pages
        offset = page * page_size
        data[offset : offset + 64] = b"\xa5" * 64
    corrupt = tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(bytes(data))
    before = dump(live)
    with pytest.raises(CommandError, match="integrity check"):
        run("restore", str(corrupt))
    assert dump(live) == before


def test_restore_refuses_files_that_are_not_hikyaku_backups(live, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    other = tmp_path / "other.sqlite3"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    for path, message in (
        (text, "not an SQLite database"),
        (other, "not a Hikyaku database"),
        (tmp_path / "missing.sqlite3", "There is no file"),
        (live, "live database itself"),
    ):
        with pytest.raises(CommandError, match=message):
            run("restore", str(path))


def edited_backup(tmp_path: Path, sql: str) -> Path:
    backup = tmp_path / "snapshot.sqlite3"
    run("backup", str(backup))
    connection = sqlite3.connect(backup)
    connection.execute(sql)
    connection.commit()
    connection.close()
    return backup


def test_restore_refuses_a_backup_from_a_newer_version(live, tmp_path):
    backup = edited_backup(
        tmp_path,
        "INSERT INTO django_migrations (app, name, applied) "
        "VALUES ('agents', '9999_from_the_future', '2099-01-01')",
    )
    with pytest.raises(CommandError, match=r"newer version.*agents\.9999_from_the_future"):
        run("restore", str(backup))


def test_restore_of_an_older_backup_says_to_migrate(live, tmp_path):
    backup = edited_backup(tmp_path, "DELETE FROM django_migrations WHERE app = 'sessions'")
    assert "run `python manage.py migrate`" in run("restore", str(backup))


def test_restore_into_a_fresh_directory_needs_nothing_to_replace(live, settings, tmp_path):
    backup = tmp_path / "snapshot.sqlite3"
    run("backup", str(backup))
    fresh = tmp_path / "fresh" / "hikyaku.sqlite3"
    settings.DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(fresh)}}
    assert "kept as" not in run("restore", str(backup))
    assert dump(fresh) == dump(backup)


@pytest.mark.parametrize("command", ["backup", "restore"])
def test_postgres_deployments_are_pointed_to_pg_dump(command, settings, tmp_path):
    settings.DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}}
    with pytest.raises(CommandError, match="pg_dump") as error:
        run(command, str(tmp_path / "x.sqlite3"))
    assert "postgresql" in str(error.value)
