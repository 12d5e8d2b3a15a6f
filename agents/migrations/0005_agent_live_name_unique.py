"""Agent names become addresses: unique among a tenant's live (active or disabled) agents.

Duplicates already stored are settled before the constraint is added: the most recently
registered agent keeps the name (the live session, for ephemeral agents), every older one is
renamed `<name>-<first 8 characters of its id>`. Nothing else changes: ids, tokens, inboxes
and histories stay, and a renamed agent still answers to its id (README, "Names as
addresses").
"""

from django.db import migrations, models
from django.db.models import Count

LIVE = ("active", "disabled")
MAX_NAME = 200


def rename_duplicates(apps, schema_editor):
    Agent = apps.get_model("agents", "Agent")
    live = Agent.objects.filter(status__in=LIVE)
    duplicated = (
        live.values("tenant_id", "name").annotate(n=Count("id")).filter(n__gt=1).order_by()
    )
    for row in duplicated:
        holders = live.filter(tenant_id=row["tenant_id"], name=row["name"]).order_by(
            "-registered_at", "-id"
        )
        for agent in list(holders)[1:]:
            suffix = "-" + str(agent.id)[:8]
            agent.name = agent.name[: MAX_NAME - len(suffix)] + suffix
            agent.save(update_fields=["name"])


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0004_webhook_secret_and_policy_index"),
    ]

    operations = [
        migrations.RunPython(rename_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ["active", "disabled"])),
                fields=("tenant", "name"),
                name="agent_live_name_unique",
                violation_error_message="An agent of this tenant already has this name.",
            ),
        ),
    ]
