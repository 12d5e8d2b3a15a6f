"""Builds and inspects a populated broker database from a separate process.

Run as `python -m tests.ops.world <command>` with DATABASE_URL pointing at the database
(a SQLite file or a Postgres database); prints one JSON object. The backup tests use it so
that the database they copy was written by the real services, outside pytest's test
database.
"""

import json
import os
import sys
import uuid
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
django.setup()

from django.utils import timezone  # noqa: E402

from agents import services as agent_services  # noqa: E402
from agents.auth import authenticate_agent  # noqa: E402
from hikyaku.errors import HikyakuError  # noqa: E402
from tenants import services as tenant_services  # noqa: E402
from tenants.models import ApiKey, Membership, User  # noqa: E402


def populate() -> dict:
    """Two tenants with people, keys in every state, and agents in every state."""
    acme = tenant_services.create_tenant(name="Acme", slug="acme")
    globex = tenant_services.create_tenant(name="Globex", slug="globex")
    owner = User.objects.create_user("owner@example.com", "correct horse battery staple")
    tenant_services.add_member(tenant=acme, user=owner, role=Membership.Role.OWNER)
    active = tenant_services.create_api_key(tenant=acme, label="ci", created_by=owner)
    spare = tenant_services.create_api_key(tenant=acme, label="spare")
    revoked = tenant_services.create_api_key(tenant=acme, label="leaked")
    agent_services.revoke_api_key(api_key=revoked.api_key)
    expired = tenant_services.create_api_key(
        tenant=globex, label="old", expires_at=timezone.now() + timedelta(days=1)
    )
    # The service only accepts future expiry dates; let this one have run out already.
    ApiKey.objects.filter(pk=expired.api_key.pk).update(
        expires_at=timezone.now() - timedelta(days=1)
    )
    tenant_services.create_api_key(tenant=globex, label="globex")
    alice = agent_services.register_agent(
        tenant=acme,
        name="alice",
        description="reviewer",
        skills=[{"id": "review", "name": "Review"}],
    )
    bob = agent_services.register_agent(tenant=acme, name="bob", description="builder")
    agent_services.deregister_agent(agent=bob.agent)
    rotated = agent_services.register_agent(tenant=globex, name="carol", description="")
    new_token = agent_services.rotate_agent_token(agent=rotated.agent)
    _exchange_messages(acme, alice.agent)
    return {
        "active_key": active.raw_key,
        "spare_key": spare.raw_key,
        "revoked_key": revoked.raw_key,
        "expired_key": expired.raw_key,
        "alice": str(alice.agent.id),
        "alice_token": alice.raw_token,
        "bob": str(bob.agent.id),
        "bob_token": bob.raw_token,
        "carol_old_token": rotated.raw_token,
        "carol_token": new_token,
    }


def _message(text: str, **metadata) -> dict:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    if metadata:
        message["metadata"] = metadata
    return message


def _exchange_messages(tenant, alice) -> None:
    """Tasks and events in several states: completed, cancelled, unread, and a broadcast."""
    from messaging.parties import Sender
    from messaging.services import act_on_task, cancel_task, send_message

    erin = agent_services.register_agent(tenant=tenant, name="erin", description="worker").agent
    as_alice, as_erin = Sender(tenant=tenant, agent=alice), Sender(tenant=tenant, agent=erin)
    work = send_message(sender=as_alice, message=_message("build PR 12"), to=str(erin.id))
    act_on_task(sender=as_erin, task_id=str(work.id), action="accept", message=_message("on it"))
    act_on_task(sender=as_erin, task_id=str(work.id), action="complete", message=_message("green"))
    withdrawn = send_message(sender=as_alice, message=_message("never mind"), to=str(erin.id))
    cancel_task(sender=as_alice, task_id=str(withdrawn.id))
    send_message(sender=as_alice, message=_message("still unread"), to=str(erin.id))
    send_message(sender=as_erin, message=_message("standup in 5"), to="*")


def mutate(secrets: dict) -> dict:
    """Changes made after the snapshot: a revocation and a new agent."""
    from tenants.selectors import api_keys_by_prefix_or_raw

    [key] = api_keys_by_prefix_or_raw(secrets["spare_key"])
    agent_services.revoke_api_key(api_key=key)
    tenant = key.tenant
    agent_services.register_agent(tenant=tenant, name="dave", description="after the snapshot")
    return {}


def authenticate(secrets: dict) -> dict:
    """Which credentials work now: True when accepted, else the error code."""

    def attempt(raw: str, agent_id: str | None) -> object:
        try:
            authenticate_agent(authorization=f"Bearer {raw}", agent_id=agent_id)
            return True
        except HikyakuError as exc:
            return exc.code

    return {
        "active_key": attempt(secrets["active_key"], secrets["alice"]),
        "spare_key": attempt(secrets["spare_key"], secrets["alice"]),
        "revoked_key": attempt(secrets["revoked_key"], secrets["alice"]),
        "expired_key": attempt(secrets["expired_key"], None),
        "alice_token": attempt(secrets["alice_token"], None),
        "bob_token": attempt(secrets["bob_token"], None),
        "carol_old_token": attempt(secrets["carol_old_token"], None),
        "carol_token": attempt(secrets["carol_token"], None),
    }


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "populate":
        print(json.dumps(populate()))
    else:
        secrets = json.loads(sys.argv[2])
        print(json.dumps({"mutate": mutate, "authenticate": authenticate}[command](secrets)))
