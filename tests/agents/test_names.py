"""Names as addresses: unique among a tenant's live agents, resolved on the send path."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from agents import selectors, services
from agents.models import Agent
from tests import factories
from tests.messaging.rpc import error, message, result

pytestmark = pytest.mark.django_db


def register(key: str, name: str):
    return Client().post(
        "/api/v1/agents",
        json.dumps({"name": name, "description": "x"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


def test_registering_a_taken_name_is_409_and_writes_nothing(api_key, agent):
    before = Agent.objects.count()
    response = register(api_key, agent.model.name)
    assert response.status_code == 409
    body = response.json()["error"]
    assert body["code"] == "AGENT_NAME_TAKEN" and body["details"] == {"name": ["taken"]}
    assert "An agent named 'alice' is already registered" in body["message"]
    assert Agent.objects.count() == before


def test_a_disabled_agent_keeps_its_name_a_deregistered_one_frees_it(api_key, agent):
    services.set_agent_enabled(agent=agent.model, enabled=False)
    assert register(api_key, "alice").status_code == 409
    services.deregister_agent(agent=agent.model)
    assert register(api_key, "alice").status_code == 201


def test_another_tenant_may_use_the_same_name(agent, other_tenant):
    assert factories.agent(other_tenant, name="alice").model.name == "alice"


def test_the_database_refuses_a_second_live_name(agent):
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.create(tenant=agent.model.tenant, name="alice", token_hash="x" * 64)


def test_resolve_destination_finds_active_agents_of_the_tenant_only(tenant, agent, peer, stranger):
    assert selectors.resolve_destination(tenant=tenant, to="bob") == str(peer.id)
    assert selectors.resolve_destination(tenant=tenant, to=str(peer.id)) == str(peer.id)
    assert selectors.resolve_destination(tenant=tenant, to="*") == "*"
    assert selectors.resolve_destination(tenant=tenant, to="mallory") == "mallory"
    services.set_agent_enabled(agent=peer.model, enabled=False)
    assert selectors.resolve_destination(tenant=tenant, to="bob") == "bob"


def test_send_message_takes_a_name_as_destination(agent, peer, stranger):
    task = result(agent, "SendMessage", {"message": message("hi", to="bob")})["task"]
    assert task["metadata"]["toAgentId"] == str(peer.id)
    assert task["contextId"] == str(peer.id)
    # Another tenant's agent's name is not an address here: the same not-found as anything.
    refused = error(agent, "SendMessage", {"message": message("hi", to="mallory")})
    assert (
        refused["code"] == -32602 and "Destination agent not found: mallory" in refused["message"]
    )


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_newest_name_and_renames_older_duplicates(tenant):
    executor = MigrationExecutor(connection)
    before, after = (
        [("agents", "0004_webhook_secret_and_policy_index")],
        [("agents", "0005_agent_live_name_unique")],
    )
    executor.migrate(before)
    try:
        old_apps = executor.loader.project_state(before).apps
        OldAgent = old_apps.get_model("agents", "Agent")
        from datetime import timedelta

        from django.utils import timezone

        now = timezone.now()
        rows = [
            OldAgent.objects.create(
                tenant_id=tenant.pk,
                name="bob",
                status=status,
                registered_at=now - timedelta(minutes=age),
                deregistered_at=now if status == "deregistered" else None,
                token_hash=f"{age:064d}",
            )
            for age, status in (
                (30, "active"),
                (20, "disabled"),
                (10, "active"),
                (5, "deregistered"),
            )
        ]
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    names = {str(a.id): a.name for a in Agent.objects.filter(tenant=tenant)}
    oldest, older, newest, gone = (str(r.id) for r in rows)
    assert names[newest] == "bob" and names[gone] == "bob"
    assert names[oldest] == f"bob-{oldest[:8]}" and names[older] == f"bob-{older[:8]}"
