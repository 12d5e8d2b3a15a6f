from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.selectors import parse_agent_id
from agents.services import set_agent_public


class Command(BaseCommand):
    help = (
        "Publish an active agent (anyone may read its A2A card and message it at "
        "/a2a/agents/<id>/), or withdraw that with --off."
    )

    def add_arguments(self, parser):
        parser.add_argument("agent_id")
        parser.add_argument("--off", action="store_true", help="Unpublish instead.")

    def handle(self, *args, agent_id: str, off: bool, **options):
        pk = parse_agent_id(agent_id)
        agent = Agent.objects.filter(pk=pk, status=Agent.Status.ACTIVE).first() if pk else None
        if agent is None:
            raise CommandError("No such active agent.")
        set_agent_public(agent=agent, public=not off)
        state = "private" if off else "public"
        self.stdout.write(f"{agent.name} ({agent.id}) is {state}: /a2a/agents/{agent.id}/")
