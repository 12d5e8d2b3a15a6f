from django.core.management.base import BaseCommand, CommandError

from agents.services import revoke_api_key
from tenants.selectors import api_keys_by_prefix_or_raw


class Command(BaseCommand):
    help = "Revoke an API key given the raw key or its 8-character display prefix."

    def add_arguments(self, parser):
        parser.add_argument("key", help="hky_… raw key, or its display prefix.")

    def handle(self, *args, key: str, **options):
        matches = list(api_keys_by_prefix_or_raw(key.strip()))
        if not matches:
            raise CommandError("No such API key.")
        if len(matches) > 1:
            raise CommandError("That prefix matches several keys; pass the whole key.")
        deregistered = revoke_api_key(api_key=matches[0])
        self.stdout.write(
            f"revoked hky_{matches[0].prefix}… ({deregistered} agent(s) deregistered)"
        )
