"""`python manage.py purge [--dry-run]`: the retention purge of messaging/retention.py, now."""

from django.core.management.base import BaseCommand

from messaging import retention


class Command(BaseCommand):
    help = (
        "Delete terminal tasks and their events after HIKYAKU_RETENTION_DAYS, agents "
        "deregistered longer than HIKYAKU_DEREGISTERED_TTL_DAYS with their tasks, and webhook "
        "delivery logs after HIKYAKU_WEBHOOK_LOG_DAYS (what beat runs hourly)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="Only count what would be deleted."
        )
        parser.add_argument("--batch-size", type=int, default=None, help="Ids per transaction.")

    def handle(self, *args, dry_run: bool = False, batch_size: int | None = None, **options):
        counts = retention.purge(dry_run=dry_run, batch_size=batch_size)
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb}: {counts.tasks} task(s), {counts.events} event(s), {counts.agents} "
            f"deregistered agent(s), {counts.webhook_deliveries} webhook delivery log row(s)."
        )
