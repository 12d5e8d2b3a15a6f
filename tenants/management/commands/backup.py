from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from hikyaku.sqlite_backup import SqliteOpsError, backup_database, sqlite_path


class Command(BaseCommand):
    help = (
        "Write a consistent, integrity-checked snapshot of the embedded SQLite database to a "
        "new file (safe while the broker runs; never overwrites). For Postgres use pg_dump."
    )
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("target", help="The new backup file; it must not exist yet.")

    def handle(self, *args, target: str, **options):
        database = sqlite_path(settings.DATABASES["default"])
        if database is None:
            raise CommandError(not_sqlite_message("backup"))
        try:
            result = backup_database(database=database, target=Path(target))
        except SqliteOpsError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Backed up {database} to {result.path} ({result.size} bytes, integrity ok)."
        )


def not_sqlite_message(verb: str) -> str:
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    return (
        f"`{verb}` handles the embedded SQLite database only; this broker uses {engine}. "
        "For Postgres use pg_dump / pg_restore (README, Operations: Backup and restore)."
    )
