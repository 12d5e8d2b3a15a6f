from django.db import migrations, models
from django.db.models import F


def tie_tokens_to_their_keys(apps, schema_editor):
    """Tokens minted at registration rest on the key the agent registered with. A token an
    owner issued later (a `token-issued` event) rests on no key. A rotation may have been the
    agent's own or an owner's; it is tied to the key, the safe reading (an owner who rotates
    it again unties it)."""
    Agent = apps.get_model("agents", "Agent")
    AgentEvent = apps.get_model("agents", "AgentEvent")
    issued = AgentEvent.objects.filter(kind="token-issued").values("agent_id")
    Agent.objects.filter(token_hash__isnull=False, registered_with__isnull=False).exclude(
        pk__in=issued
    ).update(token_key_id=F("registered_with"))


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0006_agent_token_expiry_and_events"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="token_key_id",
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(tie_tokens_to_their_keys, migrations.RunPython.noop),
    ]
