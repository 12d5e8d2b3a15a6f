"""Who may talk to whom (docs/PROTOCOL.md §4.5): the allow-list matrix on every surface, disclosure
ceilings, and disabled agents. Refusals must look exactly like "not found"."""

from __future__ import annotations

import itertools
import json
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.auth import authenticate_agent, identity_is_current
from agents.services import set_agent_enabled, set_agent_policy
from tests import factories
from tests.messaging.rpc import act, error, message, result, send

pytestmark = pytest.mark.django_db

# Values of alice.send_to and bob.receive_from, by name.
SEND_TO = ["*", "bob", "carol", "nobody"]
RECEIVE_FROM = ["*", "alice", "carol", "nobody"]


@pytest.fixture
def trio(tenant):
    return (
        factories.agent(tenant, name="alice"),
        factories.agent(tenant, name="bob"),
        factories.agent(tenant, name="carol"),
    )


def ids(names: str, agents: dict) -> list[str]:
    if names == "*":
        return ["*"]
    if names == "nobody":
        return []
    return [agents[names].id]


def inbox(agent, **params):
    return result(agent, "ListTasks", {"contextId": agent.id, **params})


def outbox(agent, **params):
    return result(agent, "ListTasks", {"metadata": {"box": "outbox"}, **params})


def get_task_error(agent, task_id):
    return error(agent, "GetTask", {"id": task_id})


def not_found_like(err: dict, task_id: str, caller) -> None:
    """The refusal is byte-for-byte what an unknown task id gets, apart from the id."""
    unknown_id = str(uuid.uuid4())
    unknown = get_task_error(caller, unknown_id)
    assert err == {**unknown, "message": unknown["message"].replace(unknown_id, task_id)}


def events_status(agent, task_id) -> int:
    return factories.AgentClient(agent).get(f"/api/v1/tasks/{task_id}/events").status_code


@pytest.mark.parametrize(
    ("send_to", "receive_from"), list(itertools.product(SEND_TO, RECEIVE_FROM))
)
def test_allow_list_matrix(trio, send_to, receive_from):
    alice, bob, carol = trio
    agents = {"alice": alice, "bob": bob, "carol": carol}
    allowed = send_to in ("*", "bob") and receive_from in ("*", "alice")
    # History from before the policy: one unread task, one to cancel.
    task = send(alice, bob.id, "before")
    to_cancel = send(alice, bob.id, "cancel me")
    set_agent_policy(agent=alice.refresh(), send_to=ids(send_to, agents))
    set_agent_policy(agent=bob.refresh(), receive_from=ids(receive_from, agents))

    # Send: both lists must allow it; a refusal is the unknown-destination error.
    new = message("after", to=bob.id)
    if allowed:
        assert result(alice, "SendMessage", {"message": new})["task"]["contextId"] == bob.id
    else:
        err = error(alice, "SendMessage", {"message": new})
        unknown = str(uuid.uuid4())
        assert err == {
            **error(alice, "SendMessage", {"message": message(to=unknown)}),
            "message": f"Destination agent not found: {bob.id}",
        }

    # Broadcast: skips bob unless both allow it; carol gets it when alice may send to her.
    summary = result(alice, "SendMessage", {"message": message("all", to="*")})["task"]
    delivered_to = {
        t["contextId"]
        for t in result(alice, "ListTasks", {"metadata": {"box": "outbox"}, "pageSize": 100})[
            "tasks"
        ]
        if t["metadata"]["type"] == "broadcast"
        and t["metadata"]["broadcastId"] == summary["metadata"]["broadcastId"]
    }
    expected = {bob.id} if allowed else set()
    if send_to in ("*", "carol"):
        expected.add(carol.id)
    assert delivered_to == expected
    assert summary["metadata"]["recipientCount"] == len(expected)

    # Reads by both parties: GetTask, inbox/outbox listings (counts too), the REST timeline.
    for party in (alice, bob):
        if allowed:
            assert result(party, "GetTask", {"id": task["id"]})["id"] == task["id"]
            assert events_status(party, task["id"]) == 200
        else:
            not_found_like(get_task_error(party, task["id"]), task["id"], party)
            assert events_status(party, task["id"]) == 404
    listed = inbox(bob, pageSize=100)
    assert (task["id"] in [t["id"] for t in listed["tasks"]]) is allowed
    assert listed["totalSize"] == len(listed["tasks"])
    sent = outbox(alice, pageSize=100)
    assert (task["id"] in [t["id"] for t in sent["tasks"]]) is allowed
    assert sent["totalSize"] == len(sent["tasks"])

    # Transitions: ack by the recipient, cancel by the sender.
    if allowed:
        assert act(bob, task["id"], "ack")["status"]["state"] == "TASK_STATE_COMPLETED"
        canceled = result(alice, "CancelTask", {"id": to_cancel["id"]})
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    else:
        not_found_like(
            error(bob, "SendMessage", {"message": message(task_id=task["id"])}), task["id"], bob
        )
        not_found_like(error(alice, "CancelTask", {"id": to_cancel["id"]}), to_cancel["id"], alice)


def test_removing_a_relationship_closes_its_history_and_restoring_reopens_it(trio):
    alice, bob, carol = trio
    task = send(alice, bob.id, "secret plans")
    act(bob, task["id"], "accept")
    set_agent_policy(agent=bob.refresh(), receive_from=[carol.id])
    unknown_id = str(uuid.uuid4())
    for party in (alice, bob):
        assert get_task_error(party, task["id"])["code"] == -32001
        timeline = factories.AgentClient(party).get(f"/api/v1/tasks/{task['id']}/events")
        unknown = factories.AgentClient(party).get(f"/api/v1/tasks/{unknown_id}/events")
        assert timeline.status_code == unknown.status_code == 404
        assert timeline.json() == json.loads(
            json.dumps(unknown.json()).replace(unknown_id, task["id"])
        )
    assert inbox(bob)["tasks"] == [] and inbox(bob)["totalSize"] == 0
    assert error(bob, "SendMessage", {"message": message(task_id=task["id"], action="complete")})[
        "code"
    ] == -32001  # fmt: skip
    assert error(alice, "SendMessage", {"message": message(task_id=task["id"], action="comment")})[
        "code"
    ] == -32001  # fmt: skip
    # A reply that references the closed task cannot use it as a thread parent either.
    err = error(
        alice,
        "SendMessage",
        {"message": {**message(to=carol.id), "referenceTaskIds": [task["id"]]}},
    )
    assert err["code"] == -32602 and "Referenced task not found" in err["message"]
    # Carol is unaffected.
    assert send(carol, bob.id)["contextId"] == bob.id
    set_agent_policy(agent=bob.refresh(), receive_from=["*"])
    assert result(bob, "GetTask", {"id": task["id"]})["status"]["state"] == "TASK_STATE_WORKING"
    assert act(bob, task["id"], "complete")["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_peer_side_of_a_policy_counts_too(trio):
    """Alice's own lists are open, but bob's receive_from excludes her: she loses her outbox
    view of it as well."""
    alice, bob, carol = trio
    task = send(alice, bob.id)
    set_agent_policy(agent=bob.refresh(), receive_from=[carol.id])
    assert outbox(alice)["tasks"] == []
    assert get_task_error(alice, task["id"])["code"] == -32001
    set_agent_policy(agent=bob.refresh(), receive_from=["*"])
    set_agent_policy(agent=alice.refresh(), send_to=[carol.id])
    assert inbox(bob)["tasks"] == []


def test_a_retried_send_after_the_relationship_closed_is_refused_like_a_new_one(trio):
    alice, bob, _ = trio
    original = message("once", to=bob.id)
    result(alice, "SendMessage", {"message": original})
    set_agent_policy(agent=bob.refresh(), receive_from=[])
    err = error(alice, "SendMessage", {"message": original})
    assert err["code"] == -32602 and err["message"] == f"Destination agent not found: {bob.id}"


def test_paging_is_exact_when_the_policy_hides_tasks(trio):
    alice, bob, carol = trio
    expected = []
    for i in range(8):
        expected.append(send(alice, bob.id, f"a{i}")["id"])
        send(carol, bob.id, f"c{i}")
    set_agent_policy(agent=bob.refresh(), receive_from=[alice.id])
    seen, token = [], ""
    while True:
        page = inbox(bob, pageSize=3, pageToken=token)
        assert page["totalSize"] == 8
        seen += [t["id"] for t in page["tasks"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == list(reversed(expected))


def test_list_tasks_query_count_does_not_grow_with_restricted_peers(tenant, trio):
    alice, bob, _ = trio
    send(alice, bob.id)
    inbox(bob)  # the first request also records last_seen_at
    with CaptureQueriesContext(connection) as before:
        inbox(bob)
    for i in range(5):
        restricted = factories.agent(tenant, name=f"r{i}")
        set_agent_policy(agent=restricted.model, send_to=[bob.id])
    inbox(bob)  # a policy change makes the next request authenticate afresh
    with CaptureQueriesContext(connection) as after:
        inbox(bob)
    assert len(after.captured_queries) == len(before.captured_queries)


# Disclosure ceilings ---------------------------------------------------------------------------


def test_a_send_above_either_ceiling_is_refused(trio):
    alice, bob, _ = trio
    restricted = message("for your eyes only", to=bob.id, sensitivity="restricted")
    err = error(alice, "SendMessage", {"message": restricted})  # above alice's ceiling
    assert err["code"] == -32602 and err["message"] == f"Destination agent not found: {bob.id}"
    set_agent_policy(agent=alice.refresh(), disclosure_ceiling="restricted")
    err = error(alice, "SendMessage", {"message": restricted})  # above bob's
    assert err["message"] == f"Destination agent not found: {bob.id}"
    set_agent_policy(agent=bob.refresh(), disclosure_ceiling="restricted")
    task = result(alice, "SendMessage", {"message": restricted})["task"]
    assert task["metadata"]["sensitivity"] == "restricted"
    set_agent_policy(agent=bob.refresh(), disclosure_ceiling="public-safe")
    assert error(alice, "SendMessage", {"message": message(to=bob.id)})["code"] == -32602
    public = result(
        alice, "SendMessage", {"message": message(to=bob.id, sensitivity="public-safe")}
    )
    assert public["task"]["contextId"] == bob.id


def test_a_broadcast_skips_recipients_below_its_sensitivity(tenant, trio):
    alice, bob, carol = trio
    set_agent_policy(agent=alice.refresh(), disclosure_ceiling="restricted")
    set_agent_policy(agent=carol.refresh(), disclosure_ceiling="restricted")
    summary = result(
        alice, "SendMessage", {"message": message("need to know", to="*", sensitivity="restricted")}
    )["task"]
    assert summary["metadata"]["recipientCount"] == 1
    assert [t["contextId"] for t in inbox(carol)["tasks"]] == [carol.id]
    assert inbox(bob)["tasks"] == []


def test_lowering_a_ceiling_hides_tasks_above_it_everywhere(trio):
    alice, bob, _ = trio
    internal = send(alice, bob.id, "internal by default")
    public = send(alice, bob.id, "hello world", sensitivity="public-safe")
    set_agent_policy(agent=bob.refresh(), disclosure_ceiling="public-safe")
    listed = inbox(bob)
    assert [t["id"] for t in listed["tasks"]] == [public["id"]] and listed["totalSize"] == 1
    assert get_task_error(bob, internal["id"])["code"] == -32001
    assert events_status(bob, internal["id"]) == 404
    assert error(bob, "SendMessage", {"message": message(task_id=internal["id"])})["code"] == (
        -32001
    )
    # The sender's ceiling did not change: alice still sees what she sent.
    assert result(alice, "GetTask", {"id": internal["id"]})["id"] == internal["id"]
    set_agent_policy(agent=bob.refresh(), disclosure_ceiling="internal")
    assert inbox(bob)["totalSize"] == 2


# Disabled agents -------------------------------------------------------------------------------


def test_a_disabled_agent_cannot_authenticate_receive_or_be_listed(client, api_key, trio):
    alice, bob, carol = trio
    task = send(alice, bob.id, "before")
    token_identity = authenticate_agent(authorization=f"Bearer {bob.token}", agent_id=None)
    key_identity = authenticate_agent(authorization=f"Bearer {api_key}", agent_id=bob.id)
    set_agent_enabled(agent=bob.refresh(), enabled=False)
    # Open streams re-check their identity and close.
    assert not identity_is_current(token_identity) and not identity_is_current(key_identity)
    for headers in (
        {"HTTP_AUTHORIZATION": f"Bearer {bob.token}"},
        {"HTTP_AUTHORIZATION": f"Bearer {api_key}", "HTTP_X_AGENT_ID": bob.id},
    ):
        assert client.get("/api/v1/agents", **headers).status_code == 401
    assert error(alice, "SendMessage", {"message": message(to=bob.id)})["code"] == -32602
    summary = result(alice, "SendMessage", {"message": message("all", to="*")})["task"]
    assert summary["metadata"]["recipientCount"] == 1  # carol only
    listed = factories.AgentClient(alice).get("/api/v1/agents").json()["agents"]
    assert bob.id not in [a["agent_id"] for a in listed]
    assert factories.AgentClient(alice).get(f"/api/v1/agents/{bob.id}").status_code == 404
    # Enabled again: same identity, inbox intact.
    set_agent_enabled(agent=bob.refresh(), enabled=True)
    assert identity_is_current(token_identity)
    assert [t["id"] for t in inbox(bob)["tasks"]] == [task["id"]]
    assert act(bob, task["id"], "ack")["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_kept_rendering_follows_every_change_to_an_agents_policy(trio):
    """Renderings of a rule are kept (messaging/policy.py, `sql`). Changing an agent's
    allow-lists or its ceiling, even on the same instance, must change its rendering to
    what rendering it afresh gives."""
    from messaging import policy

    alice, bob, carol = (agent.model for agent in trio)

    def rendered():
        return (
            policy.sql(
                policy.DELIVER, sender=alice, recipient=policy.Row("d"), sensitivity="internal"
            ),
            policy.sql(
                policy.READ,
                sender=policy.Row("s", "m.sender_agent_id"),
                recipient=alice,
                reader=alice,
                sensitivity=policy.Column("m.sensitivity"),
            ),
        )

    def afresh():
        policy._rendered.cache_clear()
        return rendered()

    before = rendered()
    for field, value in [
        ("send_to", [str(bob.id)]),
        ("receive_from", [str(carol.id)]),
        ("disclosure_ceiling", "public-safe"),
    ]:
        setattr(alice, field, value)
        kept = rendered()
        assert kept != before, field
        assert kept == afresh(), field
        before = kept
