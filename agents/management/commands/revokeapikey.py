from django.core.management.base import BaseCommand, CommandError

from agents.services import RevokedKeyAgents, revoke_api_key
from tenants.selectors import api_keys_by_prefix_or_raw


class Command(BaseCommand):
    help = (
        "Revoke an API key given the raw key or its 8-character display prefix. The agents "
        "whose tokens it issued stop: their tokens are revoked, or with --deregister-agents "
        "they are deregistered. Revoking a tenant's last active key deregisters all its agents."
    )

    def add_arguments(self, parser):
        parser.add_argument("key", help="hky_… raw key, or its display prefix.")
        parser.add_argument(
            "--deregister-agents",
            action="store_true",
            help="Deregister the agents registered with this key instead of revoking their tokens.",
        )

    def handle(self, *args, key: str, deregister_agents: bool = False, **options):
        matches = list(api_keys_by_prefix_or_raw(key.strip()))
        if not matches:
            raise CommandError("No such API key.")
        if len(matches) > 1:
            raise CommandError("That prefix matches several keys; pass the whole key.")
        agents = (
            RevokedKeyAgents.DEREGISTER if deregister_agents else RevokedKeyAgents.REVOKE_TOKENS
        )
        done = revoke_api_key(api_key=matches[0], agents=agents)
        self.stdout.write(
            f"revoked hky_{matches[0].prefix}… ({done.deregistered} agent(s) deregistered, "
            f"{done.tokens_revoked} agent token(s) revoked)"
        )
