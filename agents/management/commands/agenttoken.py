"""`manage.py agenttoken issue|rotate|revoke --tenant SLUG --agent NAME`."""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from agents import tokens
from agents.management.lookup import live_agent, tenant_by_slug
from hikyaku.errors import HikyakuError


class Command(BaseCommand):
    help = (
        "Agent tokens from the shell. issue and rotate print the new token once (only its "
        "digest is stored); rotate and revoke stop the old token at its next request, open "
        "streams included."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="issue|rotate|revoke")
        helps = {
            "issue": "Give an agent without a token (created from a tenant file) a token.",
            "rotate": "Replace the agent's token; the old one stops at once.",
            "revoke": "Remove the agent's token.",
        }
        for action, text in helps.items():
            command = sub.add_parser(action, help=text)
            command.add_argument("--tenant", required=True, help="Tenant slug.")
            command.add_argument("--agent", required=True, help="Agent name (or id).")
            if action != "revoke":
                command.add_argument(
                    "--expires", default=None, help="Expiry, ISO 8601: 2027-01-01T00:00:00Z."
                )

    def handle(self, *args, action: str, tenant: str, agent: str, **options):
        target = live_agent(tenant=tenant_by_slug(tenant), agent=agent)
        expires_at = _expiry(options.get("expires"))
        try:
            if action == "revoke":
                if tokens.revoke_agent_token(agent=target):
                    self.stdout.write(f"Revoked the token of {target.name} ({target.pk}).")
                else:
                    self.stdout.write(f"{target.name} ({target.pk}) had no token.")
                return
            if action == "issue":
                raw = tokens.issue_agent_token(agent=target, expires_at=expires_at)
            else:
                raw = tokens.replace_agent_token(agent=target, expires_at=expires_at)
        except HikyakuError as exc:
            raise CommandError(exc.message) from None
        until = f"until {expires_at.isoformat()}" if expires_at else "without expiry"
        self.stderr.write(
            f"New token of {target.name} ({target.pk}), valid {until}; it is not shown again."
        )
        self.stdout.write(raw)


def _expiry(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        expires_at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--expires is not an ISO 8601 date: {value!r}") from None
    if expires_at.tzinfo is None:
        raise CommandError("--expires needs a time zone, e.g. 2027-01-01T00:00:00Z.")
    return expires_at
