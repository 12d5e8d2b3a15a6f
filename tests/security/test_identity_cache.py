"""A send's identity may come from the server process's identity cache (agents/auth.py), but
never outlives a change made anywhere else.

Each test makes a first send through a real server process (both tiers: the `tier` fixture),
which caches the sender's identity there; then changes the sender in this process, as an
owner on another web process would; then sends again through the same server. The second
send must see the change at once — 401 for a credential that no longer holds, the new
policy, the new name — and write nothing it should not. Run the file on SQLite and on
Postgres.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import services as agent_services
from agents import tokens
from agents.models import Agent
from messaging.lifecycle import TaskState
from messaging.models import Task
from tenants.models import ApiKey, Tenant
from tests import factories
from tests.messaging import rpc
from tests.messaging.rpc import message

pytestmark = pytest.mark.django_db(transaction=True)


def send(tier, to, *, token=None, key=None, agent_id=None, text="hello"):
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token or key}"}
    if agent_id is not None:
        headers["X-Agent-Id"] = str(agent_id)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message(text, to=str(to))},
    }
    return tier.post("/a2a/", json.dumps(body), headers)


def delivered(answer) -> dict:
    assert answer.status == 200, (answer.status, answer.body[:500])
    body = answer.json()
    assert "result" in body, body
    return body["result"]["task"]


def refused(answer) -> dict:
    assert answer.status == 401, (answer.status, answer.body[:500])
    return answer.json()["error"]


def sends_twice(tier, agent, peer, change, **credentials):
    """A send (cached), `change()`, and the same send again: its answer, and the number of
    tasks the second send stored."""
    credentials = credentials or {"token": agent.token}
    delivered(send(tier, peer.id, **credentials))
    delivered(send(tier, peer.id, **credentials))  # served from the cache
    before = Task.objects.count()
    change()
    answer = send(tier, peer.id, text="after the change", **credentials)
    return answer, Task.objects.count() - before


def test_a_revoked_token_is_refused_at_once(tier, agent, peer):
    answer, stored = sends_twice(
        tier, agent, peer, lambda: tokens.revoke_agent_token(agent=agent.refresh())
    )
    assert refused(answer)["message"] == "Invalid agent token, or the agent is not active."
    assert stored == 0


def test_a_rotated_token_is_refused_and_the_new_one_works(tier, agent, peer):
    new = []
    answer, stored = sends_twice(
        tier,
        agent,
        peer,
        lambda: new.append(agent_services.rotate_agent_token(agent=agent.refresh())),
    )
    refused(answer)
    assert stored == 0
    assert delivered(send(tier, peer.id, token=new[0]))["metadata"]["fromAgentId"] == agent.id


@pytest.mark.parametrize("change", ["deregister", "disable"])
def test_a_deregistered_or_disabled_sender_is_refused(tier, agent, peer, change):
    def apply():
        if change == "deregister":
            agent_services.deregister_agent(agent=agent.refresh())
        else:
            agent_services.set_agent_enabled(agent=agent.refresh(), enabled=False)

    answer, stored = sends_twice(tier, agent, peer, apply)
    refused(answer)
    assert stored == 0


def test_an_expired_token_is_refused(tier, agent, peer):
    def expire():
        Agent.objects.filter(pk=agent.id).update(
            token_expires_at=timezone.now() - timedelta(seconds=1)
        )

    answer, stored = sends_twice(tier, agent, peer, expire)
    refused(answer)
    assert stored == 0


def test_revoking_the_key_that_minted_a_token_stops_it(tier, tenant, peer):
    factories.api_key(tenant, label="keeps the tenant alive")
    factories.api_key(tenant, label="mints")
    key = ApiKey.objects.get(label="mints")
    sender = factories.agent(tenant, name="minted", registered_with=key)
    answer, stored = sends_twice(
        tier, sender, peer, lambda: agent_services.revoke_api_key(api_key=key)
    )
    refused(answer)
    assert stored == 0


@pytest.mark.parametrize("change", ["revoke", "expire", "require tokens"])
def test_a_key_identity_ends_with_its_key_or_the_tenant_rule(tier, tenant, agent, peer, change):
    factories.api_key(tenant, label="keeps the tenant alive")
    raw = factories.api_key(tenant, label="k")

    def apply():
        if change == "revoke":
            ApiKey.objects.filter(label="k").update(revoked_at=timezone.now())
        elif change == "expire":
            ApiKey.objects.filter(label="k").update(
                expires_at=timezone.now() - timedelta(seconds=1)
            )
        else:
            Tenant.objects.filter(pk=tenant.pk).update(require_agent_tokens=True)

    answer, stored = sends_twice(tier, agent, peer, apply, key=raw, agent_id=agent.id)
    refused(answer)
    assert stored == 0
    # The agent's own token is another identity: it still works unless tokens were the rule.
    delivered(send(tier, peer.id, token=agent.token))


def test_a_narrowed_policy_applies_to_the_next_send(tier, agent, peer):
    third = factories.agent(agent.tenant, name="third")

    def narrow():
        agent_services.set_agent_policy(agent=agent.refresh(), send_to=[third.id])

    answer, stored = sends_twice(tier, agent, peer, narrow)
    assert answer.status == 200, answer.body
    error = answer.json()["error"]
    assert "Destination agent not found" in error["message"], error
    assert stored == 0
    delivered(send(tier, third.id, token=agent.token))


def test_a_renamed_sender_is_named_by_its_new_name(tier, agent, peer):
    # What an administrator's edit of the name does: the row changes, nothing else.
    def rename():
        Agent.objects.filter(pk=agent.id).update(name="renamed")

    answer, stored = sends_twice(tier, agent, peer, rename)
    assert delivered(answer)["metadata"]["fromAgentName"] == "renamed"
    assert stored == 1


def test_a_wrong_agent_id_beside_a_cached_token_is_still_refused(tier, agent, peer):
    delivered(send(tier, peer.id, token=agent.token))
    answer = send(tier, peer.id, token=agent.token, agent_id=peer.id)
    assert refused(answer)["message"] == "X-Agent-Id does not match the agent token."


def test_a_revoked_sender_learns_nothing_about_destinations(tier, agent, peer):
    """A bad destination is answered 401, not "not found", once the credential is gone."""
    delivered(send(tier, peer.id, token=agent.token))
    tokens.revoke_agent_token(agent=agent.refresh())
    refused(send(tier, "no-such-agent", token=agent.token))
    refused(send(tier, "00000000-0000-0000-0000-000000000000", token=agent.token))


def follow_up(tier, task_id, *, token, action="ack", text="done", message_id=None):
    msg = message(text, task_id=task_id, action=action, message_id=message_id)
    body = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": msg}}
    return tier.post(
        "/a2a/", json.dumps(body), {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    )


def test_an_ack_with_a_revoked_token_changes_nothing(tier, agent, peer):
    first, second = (delivered(send(tier, peer.id, token=agent.token)) for _ in range(2))
    assert delivered(follow_up(tier, first["id"], token=peer.token))["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )
    before = Task.objects.values("state", "awaiting", "updated_at").get(pk=second["id"])
    tokens.revoke_agent_token(agent=peer.refresh())
    refused(follow_up(tier, second["id"], token=peer.token))
    assert Task.objects.values("state", "awaiting", "updated_at").get(pk=second["id"]) == before


def test_an_ack_after_a_policy_change_is_decided_by_the_new_policy(tier, agent, peer):
    first, second = (delivered(send(tier, peer.id, token=agent.token)) for _ in range(2))
    delivered(follow_up(tier, first["id"], token=peer.token))
    # The recipient may no longer hear from the sender: it cannot see the task any more.
    agent_services.set_agent_policy(agent=peer.refresh(), receive_from=[])
    answer = follow_up(tier, second["id"], token=peer.token)
    assert answer.status == 200, answer.body
    assert "not found" in answer.json()["error"]["message"].lower(), answer.body


def test_a_reply_with_a_cached_identity_still_works(tier, agent, peer):
    task = delivered(send(tier, peer.id, token=agent.token))
    delivered(follow_up(tier, task["id"], token=peer.token, action="accept"))
    answer = delivered(follow_up(tier, task["id"], token=peer.token, action="complete"))
    assert answer["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_retried_ack_with_a_revoked_token_is_refused(tier, agent, peer):
    """A retry of an action applied before is answered with the task, writing nothing: not
    to a credential revoked since."""
    task = delivered(send(tier, peer.id, token=agent.token))
    delivered(follow_up(tier, task["id"], token=peer.token, message_id="ack-1"))
    delivered(follow_up(tier, task["id"], token=peer.token, message_id="ack-1"))  # the retry
    tokens.revoke_agent_token(agent=peer.refresh())
    refused(follow_up(tier, task["id"], token=peer.token, message_id="ack-1"))


AUTHENTICATION = "WHERE agents_agent.token_hash ="  # authenticate_agent's lookup of a token


def statements(fn) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        fn()
    return [q["sql"] for q in captured.captured_queries]


def test_a_send_and_an_ack_after_the_first_read_no_credential(agent, peer):
    """What the cache is for: after the first request, neither a send nor an ack looks the
    token up (on Postgres each is then its one statement); a revocation brings the lookup
    back at the next request."""

    def send_one():
        return rpc.result(agent, "SendMessage", {"message": message(to=peer.id)})["task"]

    def ack(task_id):
        return rpc.result(peer, "SendMessage", {"message": message(task_id=task_id)})

    first = statements(send_one)
    assert any(AUTHENTICATION in sql for sql in first), first
    tasks = []
    cached = statements(lambda: tasks.append(send_one()))
    assert not any(AUTHENTICATION in sql for sql in cached), cached
    statements(lambda: ack(send_one()["id"]))  # the recipient's first request authenticates
    acked = statements(lambda: ack(tasks[0]["id"]))
    assert not any(AUTHENTICATION in sql for sql in acked), acked
    if connection.vendor == "postgresql":
        assert (len(cached), len(acked)) == (1, 1), (cached, acked)

    tokens.revoke_agent_token(agent=agent.refresh())
    after = statements(lambda: rpc.call(agent, "SendMessage", {"message": message(to=peer.id)}))
    assert any(AUTHENTICATION in sql for sql in after), after


def test_a_broadcast_with_a_revoked_token_writes_nothing(tier, agent, peer):
    """A broadcast checks a recalled identity in its own statement (on SQLite, in its write
    transaction): after a revocation elsewhere, no delivery and no summary is written."""
    delivered(send(tier, "*", token=agent.token))
    delivered(send(tier, "*", token=agent.token))  # served from the cache
    before = Task.objects.count()
    tokens.revoke_agent_token(agent=agent.refresh())
    assert refused(send(tier, "*", token=agent.token, text="after the revocation"))
    assert Task.objects.count() == before


def test_a_broadcast_after_the_first_read_no_credential(agent, peer):
    def broadcast():
        return rpc.result(agent, "SendMessage", {"message": message(to="*")})["task"]

    first = statements(broadcast)
    assert any(AUTHENTICATION in sql for sql in first), first
    cached = statements(broadcast)
    assert not any(AUTHENTICATION in sql for sql in cached), cached
    if connection.vendor == "postgresql":
        assert len(cached) == 1, cached


def call(tier, method, params, *, token):
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return tier.post("/a2a/", json.dumps(body), headers)


def test_a_list_with_a_revoked_token_is_refused(tier, agent, peer):
    """ListTasks checks a recalled identity in the statement that reads the page: after a
    revocation elsewhere the next list is a 401, never the inbox."""
    delivered(send(tier, agent.id, token=peer.token))
    for _ in range(2):  # the second is served from the cache
        answer = call(tier, "ListTasks", {}, token=agent.token)
        assert answer.status == 200 and answer.json()["result"]["totalSize"] == 1, answer.body
    tokens.revoke_agent_token(agent=agent.refresh())
    assert "tasks" not in json.dumps(refused(call(tier, "ListTasks", {}, token=agent.token)))


def one_statement_when_cached(read):
    """`read()` twice: the first authenticates; the second, on the recalled identity, is one
    statement with no credential lookup. Returns the second's result."""
    first = statements(read)
    assert any(AUTHENTICATION in sql for sql in first), first
    results = []
    cached = statements(lambda: results.append(read()))
    assert len(cached) == 1 and AUTHENTICATION not in cached[0], cached
    return results[0]


@pytest.mark.parametrize("method", ["ListTasks", "tasks/list"])
def test_a_list_after_the_first_read_no_credential(agent, peer, method):
    """After the first request a list is one statement — count, page and the identity check —
    by either method name; a policy change brings the lookup back and the new policy
    applies at once."""
    rpc.result(peer, "SendMessage", {"message": message(to=agent.id)})

    def listed():
        return rpc.result(agent, method, {})

    assert len(one_statement_when_cached(listed)["tasks"]) == 1
    agent_services.set_agent_policy(agent=peer.refresh(), send_to=[])
    pages = []
    after = statements(lambda: pages.append(listed()))
    assert any(AUTHENTICATION in sql for sql in after), after
    assert pages[-1]["tasks"] == [] and pages[-1]["totalSize"] == 0


def test_a_get_with_a_revoked_token_is_refused_whether_or_not_the_task_exists(tier, agent, peer):
    task = delivered(send(tier, agent.id, token=peer.token))
    for _ in range(2):  # the second is served from the cache
        answer = call(tier, "GetTask", {"id": task["id"]}, token=agent.token)
        assert answer.status == 200 and answer.json()["result"]["id"] == task["id"], answer.body
    tokens.revoke_agent_token(agent=agent.refresh())
    refused(call(tier, "GetTask", {"id": task["id"]}, token=agent.token))
    refused(
        call(tier, "GetTask", {"id": "00000000-0000-4000-8000-000000000000"}, token=agent.token)
    )
    refused(call(tier, "GetTask", {"id": "not a task id"}, token=agent.token))


@pytest.mark.parametrize("method", ["GetTask", "tasks/get"])
def test_a_get_after_the_first_read_no_credential(agent, peer, method):
    task = rpc.result(peer, "SendMessage", {"message": message(to=agent.id)})["task"]

    def got():
        return rpc.result(agent, method, {"id": task["id"]})

    assert one_statement_when_cached(got)["id"] == task["id"]

    agent_services.set_agent_policy(agent=peer.refresh(), send_to=[])  # closes the history
    after = statements(lambda: rpc.call(agent, method, {"id": task["id"]}))
    assert any(AUTHENTICATION in sql for sql in after), after
    assert rpc.call(agent, method, {"id": task["id"]}).json()["error"]["code"] == -32001


def test_a_cancel_with_a_revoked_token_changes_nothing(tier, agent, peer):
    """CancelTask is a lifecycle action in one statement, which checks a recalled identity."""
    first = delivered(send(tier, peer.id, token=agent.token))
    second = delivered(send(tier, peer.id, token=agent.token, text="second"))
    answer = call(
        tier, "CancelTask", {"id": first["id"]}, token=agent.token
    )  # served from the cache
    assert answer.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", answer.body
    tokens.revoke_agent_token(agent=agent.refresh())
    refused(call(tier, "CancelTask", {"id": second["id"]}, token=agent.token))
    assert Task.objects.get(pk=second["id"]).state == TaskState.INPUT_REQUIRED


def test_a_cancel_after_the_first_read_no_credential(agent, peer):
    tasks = [
        rpc.result(agent, "SendMessage", {"message": message(to=peer.id, text=f"m{i}")})["task"]
        for i in range(2)
    ]
    statements(lambda: rpc.result(agent, "CancelTask", {"id": tasks[0]["id"]}))
    cached = statements(lambda: rpc.result(agent, "CancelTask", {"id": tasks[1]["id"]}))
    assert cached and not any(AUTHENTICATION in sql for sql in cached), cached
    if connection.vendor == "postgresql":
        assert len(cached) == 1, cached
