from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db.migrations.loader import MigrationLoader

from hikyaku.sqlite_backup import (
    SqliteOpsError,
    check_backup_file,
    restore_database,
    sqlite_path,
)

from .backup import not_sqlite_message


class Command(BaseCommand):
    help = (
        "Replace the embedded SQLite database with a backup made by `backup`. Refuses while "
        "any server or worker runs, or when the backup fails its checks; the replaced "
        "database is kept aside with a timestamped name."
    )
    # Restore must not hold the live database open itself: no system checks (they could open
    # it), and migrations are read from disk only.
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("backup", help="A file written by `manage.py backup`.")

    def handle(self, *args, backup: str, **options):
        database = sqlite_path(settings.DATABASES["default"])
        if database is None:
            raise CommandError(not_sqlite_message("restore"))
        backup_path = Path(backup)
        try:
            pending = self._check_migrations(backup_path)
            result = restore_database(database=database, backup=backup_path)
        except SqliteOpsError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Restored {database} from {backup_path}.")
        if result.replaced is not None:
            self.stdout.write(f"The replaced database was kept as {result.replaced}.")
        if pending:
            self.stdout.write(
                f"The backup predates {len(pending)} migration(s) of this version: "
                "run `python manage.py migrate` before starting the broker."
            )

    def _check_migrations(self, backup: Path) -> set[tuple[str, str]]:
        """Refuse a backup from a newer version; return the migrations it has not applied."""
        connection = check_backup_file(backup)
        try:
            applied = set(connection.execute("SELECT app, name FROM django_migrations"))
        finally:
            connection.close()
        disk = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
        known = set(disk)
        for migration in disk.values():
            known.update(tuple(replaced) for replaced in migration.replaces or [])
        unknown = applied - known
        if unknown:
            names = ", ".join(f"{app}.{name}" for app, name in sorted(unknown)[:5])
            raise SqliteOpsError(
                f"The backup was made by a newer version of Hikyaku (unknown migrations: "
                f"{names}). Restore it with that version or newer."
            )
        return {
            key
            for key, migration in disk.items()
            if key not in applied
            and not (migration.replaces and {tuple(r) for r in migration.replaces} <= applied)
        }
