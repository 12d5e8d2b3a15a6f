"""`manage.py agent disable|enable --tenant SLUG --agent NAME`: the admin's actions."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from agents import services
from agents.management.lookup import live_agent, tenant_by_slug


class Command(BaseCommand):
    help = (
        "Disable an agent (its credentials stop at the next request, its open streams close; "
        "its inbox is kept) or enable it again."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="disable|enable")
        for action in ("disable", "enable"):
            command = sub.add_parser(action, help=f"{action.capitalize()} an agent.")
            command.add_argument("--tenant", required=True, help="Tenant slug.")
            command.add_argument("--agent", required=True, help="Agent name (or id).")

    def handle(self, *args, action: str, tenant: str, agent: str, **options):
        target = live_agent(tenant=tenant_by_slug(tenant), agent=agent)
        enabled = action == "enable"
        if services.set_agent_enabled(agent=target, enabled=enabled):
            self.stdout.write(f"{target.name} ({target.pk}) {action}d.")
        else:
            self.stdout.write(f"{target.name} ({target.pk}) was already {action}d.")
