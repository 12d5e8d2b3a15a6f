import uuid

import pytest
from a2a.types import Task as TaskProto
from django.db import connection
from django.test.utils import CaptureQueriesContext
from google.protobuf.json_format import ParseDict

from messaging.models import Task, TaskEvent
from tests import factories
from tests.messaging.rpc import act, call, error, message, result, send

pytestmark = pytest.mark.django_db


def inbox(agent, **params):
    return result(agent, "ListTasks", {"contextId": agent.id, **params})


# Unicast ---------------------------------------------------------------------------------


def test_unicast_creates_an_unread_task_in_the_recipients_inbox(agent, peer):
    task = send(agent, peer.id, "review PR 12")
    ParseDict(task, TaskProto())  # a valid A2A 1.0 Task
    assert task["contextId"] == peer.id
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["metadata"] == {
        "fromAgentId": agent.id,
        "toAgentId": peer.id,
        "type": "unicast",
        "fromAgentName": "alice",
        "awaiting": "recipient",
    }
    assert task["artifacts"][0]["parts"] == [{"text": "review PR 12"}]
    assert task["history"][0]["parts"] == [{"text": "review PR 12"}]
    listed = inbox(peer)
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert inbox(agent)["tasks"] == []


def test_every_part_kind_is_kept_exactly(agent, peer):
    parts = [
        {"text": "héllo ✓ 日本語 🚀"},
        {"data": {"n": 1, "f": 1.5, "nested": {"list": [1, "two", None, True]}}},
        {
            "url": "https://example.com/report.html",
            "mediaType": "text/html",
            "filename": "report.html",
        },
        {"raw": "aGVsbG8=", "mediaType": "application/octet-stream", "filename": "hello.bin"},
    ]
    task = send(agent, peer.id, parts=parts)
    stored = inbox(peer)["tasks"][0]
    assert stored["artifacts"][0]["parts"] == parts
    assert task["history"][0]["parts"] == parts


def test_send_to_self_is_allowed(agent):
    task = send(agent, agent.id, "note to self")
    assert [t["id"] for t in inbox(agent)["tasks"]] == [task["id"]]


@pytest.mark.parametrize(
    "destination", ["not-a-uuid", "{random}", "{stranger}", "{deregistered}", "{disabled}"]
)
def test_unreachable_destinations_are_the_same_not_found(agent, tenant, stranger, destination):
    from agents.services import deregister_agent, set_agent_enabled

    gone = factories.agent(tenant, name="gone")
    deregister_agent(agent=gone.model)
    off = factories.agent(tenant, name="off")
    set_agent_enabled(agent=off.model, enabled=False)
    target = destination.format(
        random=uuid.uuid4(), stranger=stranger.id, deregistered=gone.id, disabled=off.id
    )
    err = error(agent, "SendMessage", {"message": message(to=target)})
    assert err["code"] == -32602
    assert err["message"] == f"Destination agent not found: {target}"
    assert Task.objects.count() == 0 and TaskEvent.objects.count() == 0


def test_message_id_is_the_idempotency_key(agent, peer):
    first = send(agent, peer.id, "once", message_id="m-1")
    again = send(agent, peer.id, "once", message_id="m-1")
    assert again["id"] == first["id"]
    assert Task.objects.count() == 1
    err = error(
        agent, "SendMessage", {"message": message("different", to=peer.id, message_id="m-1")}
    )
    assert err["code"] == -32602 and "messageId" in err["message"]
    # Another sender may use the same messageId.
    assert send(peer, agent.id, "once", message_id="m-1")["id"] != first["id"]


# Broadcast -------------------------------------------------------------------------------


def test_broadcast_delivers_one_task_per_other_active_agent_and_returns_a_summary(
    agent, peer, tenant, stranger
):
    third = factories.agent(tenant, name="carol")
    summary = send(agent, "*", "standup in 5")
    assert summary["status"]["state"] == "TASK_STATE_COMPLETED"
    assert summary["metadata"]["type"] == "broadcast_summary"
    assert summary["metadata"]["recipientCount"] == 2
    data = summary["artifacts"][0]["parts"][0]["data"]
    assert data["recipientCount"] == 2
    delivered = {t["id"] for r in (peer, third) for t in inbox(r)["tasks"]}
    assert delivered == set(data["deliveryTaskIds"])
    for r in (peer, third):
        (task,) = inbox(r)["tasks"]
        assert task["metadata"]["type"] == "broadcast"
        assert task["metadata"]["broadcastId"] == summary["metadata"]["broadcastId"]
    assert inbox(agent)["tasks"] == []  # summaries never appear in inboxes
    assert inbox(stranger)["tasks"] == []
    got = result(agent, "GetTask", {"id": summary["id"]})
    assert got["id"] == summary["id"]
    assert error(peer, "GetTask", {"id": summary["id"]})["code"] == -32001


def test_broadcast_is_idempotent_by_message_id(agent, peer):
    first = send(agent, "*", "hi all", message_id="b-1")
    assert send(agent, "*", "hi all", message_id="b-1")["id"] == first["id"]
    assert Task.objects.filter(type="broadcast").count() == 1


# GetTask / ListTasks ---------------------------------------------------------------------


def test_get_task_honours_history_length(agent, peer):
    task = send(agent, peer.id)
    act(peer, task["id"], "accept")
    act(peer, task["id"], "comment", "looking")
    full = result(agent, "GetTask", {"id": task["id"]})
    assert len(full["history"]) == 3
    last = result(agent, "GetTask", {"id": task["id"], "historyLength": 1})
    assert [m["parts"][0]["text"] for m in last["history"]] == ["looking"]
    assert "history" not in result(agent, "GetTask", {"id": task["id"], "historyLength": 0})


def test_list_tasks_pages_newest_status_change_first(agent, peer):
    sent = [send(agent, peer.id, f"m{i}")["id"] for i in range(7)]
    act(peer, sent[0], "accept")  # status change moves it to the front
    expected = [sent[0], *reversed(sent[1:])]
    seen, token = [], ""
    while True:
        page = inbox(peer, pageSize=3, pageToken=token)
        assert page["pageSize"] == 3 and page["totalSize"] == 7
        seen += [t["id"] for t in page["tasks"]]
        token = page["nextPageToken"]
        if token == "":
            break
    assert seen == expected


def test_list_tasks_filters_by_status_in_both_spellings(agent, peer):
    a = send(agent, peer.id)["id"]
    send(agent, peer.id)
    act(peer, a, "accept")
    for spelling in ("TASK_STATE_WORKING", "working"):
        assert [t["id"] for t in inbox(peer, status=spelling)["tasks"]] == [a]
    assert len(inbox(peer, status="TASK_STATE_INPUT_REQUIRED")["tasks"]) == 1
    assert len(inbox(peer, status="input-required")["tasks"]) == 1


def test_list_tasks_status_timestamp_after_is_inclusive(agent, peer):
    first = send(agent, peer.id)
    stamp = first["status"]["timestamp"]
    second = send(agent, peer.id)
    ids = [t["id"] for t in inbox(peer, statusTimestampAfter=stamp)["tasks"]]
    assert ids == [second["id"], first["id"]]


def test_list_tasks_history_length_and_include_artifacts(agent, peer):
    send(agent, peer.id)
    (task,) = inbox(peer, historyLength=0, includeArtifacts=False)["tasks"]
    assert "history" not in task and "artifacts" not in task


def test_list_tasks_takes_the_human_state_names(agent, peer):
    unread, blocked, working = (send(agent, peer.id)["id"] for _ in range(3))
    for task_id in (blocked, working):
        act(peer, task_id, "accept")
    act(peer, blocked, "block", "which one?")
    for name, expected in (("unread", [unread]), ("blocked", [blocked]), ("working", [working])):
        assert [t["id"] for t in inbox(peer, status=name)["tasks"]] == expected
    outbox = {"metadata": {"box": "outbox"}}
    assert [
        t["id"] for t in result(agent, "ListTasks", {**outbox, "status": "blocked"})["tasks"]
    ] == [blocked]
    assert len(inbox(peer, status=["working", "completed"])["tasks"]) == 1
    err = error(peer, "ListTasks", {"status": ["unread", "working"]})
    assert err["code"] == -32602 and "unread and blocked" in err["message"]
    err = error(peer, "ListTasks", {"status": "sleeping"})
    assert "unread, working, blocked" in err["message"]


def test_list_tasks_context_id_is_optional_the_token_says_whose_inbox(agent, peer):
    task_id = send(agent, peer.id)["id"]
    listed = result(peer, "ListTasks", {})
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    assert result(agent, "ListTasks", {})["tasks"] == []  # alice's inbox, not her outbox
    refused = error(agent, "ListTasks", {"contextId": str(peer.id)})
    assert refused["code"] == -32602 and "contextId" in refused["message"]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"contextId": "{peer}"}, "contextId"),
        ({"contextId": "{me}", "pageSize": 0}, "pageSize"),
        ({"contextId": "{me}", "pageSize": 101}, "pageSize"),
        ({"contextId": "{me}", "pageSize": "ten"}, "pageSize"),
        ({"contextId": "{me}", "status": "TASK_STATE_BOGUS"}, "status"),
        ({"contextId": "{me}", "statusTimestampAfter": "yesterday"}, "statusTimestampAfter"),
        ({"contextId": "{me}", "pageToken": "garbage!"}, "pageToken"),
        ({"contextId": "{me}", "includeArtifacts": "yes"}, "includeArtifacts"),
        ({"contextId": "{me}", "metadata": {"box": "spam"}}, "metadata.box"),
    ],
)
def test_list_tasks_rejects_bad_params(agent, peer, params, field):
    params = {
        k: v.format(me=agent.id, peer=peer.id) if isinstance(v, str) else v
        for k, v in params.items()
    }
    err = error(agent, "ListTasks", params)
    assert err["code"] == -32602


def test_outbox_lists_what_i_sent_and_filters_by_recipient(agent, peer, tenant):
    carol = factories.agent(tenant, name="carol")
    to_peer = send(agent, peer.id)["id"]
    to_carol = send(agent, carol.id)["id"]
    send(agent, "*")  # summary is in my outbox too
    out = result(agent, "ListTasks", {"metadata": {"box": "outbox"}})
    assert {to_peer, to_carol} <= {t["id"] for t in out["tasks"]}
    only = result(agent, "ListTasks", {"contextId": carol.id, "metadata": {"box": "outbox"}})
    assert to_carol in [t["id"] for t in only["tasks"]] and to_peer not in [
        t["id"] for t in only["tasks"]
    ]


def test_an_outbox_filtered_by_what_is_not_an_agent_id_is_empty(agent, peer):
    send(agent, peer.id)
    send(agent, "*")  # its summary, whose recipient is no agent, is in the outbox
    for context_id in ("not-an-agent-id", "*"):
        page = result(agent, "ListTasks", {"contextId": context_id, "metadata": {"box": "outbox"}})
        assert (page["tasks"], page["totalSize"]) == ([], 0), context_id


def test_list_tasks_query_count_is_constant_per_page(agent, peer):
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            inbox(peer, pageSize=100)
        return len(ctx.captured_queries)

    send(agent, peer.id)
    count()
    few = count()
    for i in range(20):
        send(agent, peer.id, f"more {i}")
    assert count() == few
    assert few <= 4


# Limits (docs/PROTOCOL.md §4.6) -----------------------------------------------------------------


def test_message_limits(agent, peer, settings):
    settings.HIKYAKU_MAX_PARTS = 3
    err = error(agent, "SendMessage", {"message": message(to=peer.id, parts=[{"text": "x"}] * 4)})
    assert err["code"] == -32602 and "parts" in err["message"]
    settings.HIKYAKU_MAX_METADATA_BYTES = 100
    err = error(agent, "SendMessage", {"message": message(to=peer.id, blob="x" * 200)})
    assert err["code"] == -32602 and "metadata" in err["message"]
    settings.HIKYAKU_MAX_MESSAGE_BYTES = 500
    err = error(agent, "SendMessage", {"message": message("x" * 600, to=peer.id)})
    assert err["code"] == -32602
    assert Task.objects.count() == 0


def test_body_over_one_mebibyte_is_413(agent, peer):
    response = call(
        agent, "SendMessage", {"message": message("x" * (1024 * 1024 + 10), to=peer.id)}
    )
    assert response.status_code == 413


def test_thread_depth_limit(agent, peer, settings):
    settings.HIKYAKU_MAX_THREAD_DEPTH = 2
    root = send(agent, peer.id, "root")
    reply = result(
        peer,
        "SendMessage",
        {"message": {**message("re", to=agent.id), "referenceTaskIds": [root["id"]]}},
    )["task"]
    assert (
        reply["metadata"]["parentTaskId"] == root["id"]
        and reply["metadata"]["threadId"] == root["id"]
    )
    second = result(
        agent,
        "SendMessage",
        {"message": {**message("re2", to=peer.id), "referenceTaskIds": [reply["id"]]}},
    )["task"]
    assert second["metadata"]["threadId"] == root["id"]
    err = error(
        peer,
        "SendMessage",
        {"message": {**message("re3", to=agent.id), "referenceTaskIds": [second["id"]]}},
    )
    assert err["code"] == -32602 and "depth" in err["message"]


def test_reference_to_a_task_i_am_not_party_to_is_refused(agent, peer, tenant):
    carol = factories.agent(tenant, name="carol")
    private = send(peer, carol.id, "private")
    err = error(
        agent,
        "SendMessage",
        {"message": {**message("re", to=peer.id), "referenceTaskIds": [private["id"]]}},
    )
    assert err["code"] == -32602


def test_a_retry_after_the_recipient_left_returns_the_original(agent, peer):
    from agents.services import deregister_agent

    first = send(agent, peer.id, "once", message_id="m-late")
    deregister_agent(agent=peer.model)
    assert send(agent, peer.id, "once", message_id="m-late")["id"] == first["id"]
