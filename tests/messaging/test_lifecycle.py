"""The lifecycle table of docs/PROTOCOL.md §4.4, row by row, and its refusals."""

import uuid

import pytest

from messaging.models import TaskEvent
from tests import factories
from tests.messaging.rpc import act, act_error, error, result, send

pytestmark = pytest.mark.django_db


def state(task: dict) -> str:
    return task["status"]["state"].removeprefix("TASK_STATE_")


def events_of(task_id: str) -> list[tuple[str, str, str]]:
    return list(
        TaskEvent.objects.filter(task_id=task_id)
        .order_by("id")
        .values_list("kind", "from_state", "to_state")
    )


def test_ack_is_the_default_action_and_completes_an_unread_task(agent, peer):
    task = send(agent, peer.id)
    done = act(peer, task["id"])  # no action
    assert state(done) == "COMPLETED"
    assert "awaiting" not in done["metadata"]
    assert events_of(task["id"]) == [
        ("created", "", "input_required"),
        ("ack", "input_required", "completed"),
    ]


def test_accept_then_complete_adds_a_result_artifact(agent, peer):
    task = send(agent, peer.id)
    assert state(act(peer, task["id"], "accept")) == "WORKING"
    done = act(peer, task["id"], "complete", "all green")
    assert state(done) == "COMPLETED"
    assert done["artifacts"][-1]["name"] == "result"
    assert done["artifacts"][-1]["parts"] == [{"text": "all green"}]
    assert done["history"][-1]["role"] == "ROLE_AGENT"


def test_complete_straight_from_unread(agent, peer):
    task = send(agent, peer.id)
    assert state(act(peer, task["id"], "complete", "done")) == "COMPLETED"


@pytest.mark.parametrize("accept_first", [False, True])
def test_reject_carries_the_reason_in_the_status(agent, peer, accept_first):
    task = send(agent, peer.id)
    if accept_first:
        act(peer, task["id"], "accept")
    rejected = act(peer, task["id"], "reject", "not my area")
    assert state(rejected) == "REJECTED"
    assert rejected["status"]["message"]["parts"] == [{"text": "not my area"}]


def test_fail_only_from_working(agent, peer):
    task = send(agent, peer.id)
    assert act_error(peer, task["id"], "fail")["code"] == -32004
    act(peer, task["id"], "accept")
    failed = act(peer, task["id"], "fail", "tests broke")
    assert (
        state(failed) == "FAILED"
        and failed["status"]["message"]["parts"][0]["text"] == "tests broke"
    )


def test_block_and_reply_move_awaiting_between_the_parties(agent, peer):
    task = send(agent, peer.id)
    act(peer, task["id"], "accept")
    blocked = act(peer, task["id"], "block", "which branch?")
    assert state(blocked) == "INPUT_REQUIRED"
    assert blocked["metadata"]["awaiting"] == "sender"
    assert blocked["status"]["message"]["parts"] == [{"text": "which branch?"}]
    # While blocked, the task is not "unread": the recipient cannot ack it, the sender cannot cancel it.
    assert act_error(peer, task["id"], "ack")["code"] == -32004
    assert error(agent, "CancelTask", {"id": task["id"]})["code"] == -32002
    # Only the sender replies.
    assert act_error(peer, task["id"], "reply")["code"] == -32004
    replied = act(agent, task["id"], "reply", "main")
    assert state(replied) == "WORKING" and "awaiting" not in replied["metadata"]
    assert state(act(peer, task["id"], "complete", "merged")) == "COMPLETED"
    kinds = [k for k, _, _ in events_of(task["id"])]
    assert kinds == ["created", "accept", "block", "reply", "complete"]


def test_awaiting_answers_what_is_waiting_for_me_in_one_query(agent, peer):
    from messaging.models import Task

    unread = send(agent, peer.id)["id"]
    blocked = send(agent, peer.id)["id"]
    act(peer, blocked, "accept")
    act(peer, blocked, "block", "?")
    assert list(
        Task.objects.filter(recipient=peer.model, awaiting="recipient").values_list("id", flat=True)
    ) == [uuid.UUID(unread)]
    assert list(
        Task.objects.filter(sender=agent.model, awaiting="sender").values_list("id", flat=True)
    ) == [uuid.UUID(blocked)]


def test_comment_by_either_party_appends_history_without_a_state_change(agent, peer):
    task = send(agent, peer.id)
    act(agent, task["id"], "comment", "also check docs")
    commented = act(peer, task["id"], "comment", "ok")
    assert state(commented) == "INPUT_REQUIRED"
    assert [m["parts"][0]["text"] for m in commented["history"]] == [
        "hello",
        "also check docs",
        "ok",
    ]


def test_cancel_by_the_sender_while_unread(agent, peer):
    task = send(agent, peer.id)
    canceled = result(agent, "CancelTask", {"id": task["id"]})
    assert state(canceled) == "CANCELED"
    assert act_error(peer, task["id"], "ack")["code"] == -32004


def test_cancel_refusals(agent, peer):
    task = send(agent, peer.id)
    assert error(peer, "CancelTask", {"id": task["id"]})["code"] == -32002  # the recipient
    act(peer, task["id"], "accept")
    assert error(agent, "CancelTask", {"id": task["id"]})["code"] == -32002  # no longer unread
    act(peer, task["id"], "complete")
    assert error(agent, "CancelTask", {"id": task["id"]})["code"] == -32002  # terminal


@pytest.mark.parametrize("terminal", ["ack", "reject", "cancel", "fail", "complete"])
@pytest.mark.parametrize(
    "action", ["ack", "accept", "complete", "reject", "fail", "block", "reply", "comment"]
)
def test_terminal_states_are_final(agent, peer, terminal, action):
    task = send(agent, peer.id)
    if terminal == "cancel":
        result(agent, "CancelTask", {"id": task["id"]})
    elif terminal == "fail":
        act(peer, task["id"], "accept")
        act(peer, task["id"], "fail")
    else:
        act(peer, task["id"], terminal)
    before = TaskEvent.objects.count()
    actor = agent if action == "reply" else peer
    assert act_error(actor, task["id"], action)["code"] == -32004
    assert TaskEvent.objects.count() == before


def test_the_sender_cannot_act_as_the_recipient(agent, peer):
    task = send(agent, peer.id)
    for action in ("ack", "accept", "complete", "reject"):
        assert act_error(agent, task["id"], action)["code"] == -32004


def test_unknown_action_is_invalid_params(agent, peer):
    task = send(agent, peer.id)
    err = act_error(peer, task["id"], "explode")
    assert err["code"] == -32602 and "action" in err["message"]


def test_retried_follow_up_returns_the_current_task(agent, peer):
    from tests.messaging.rpc import message

    task = send(agent, peer.id)
    ack = {"message": message("ok", task_id=task["id"], message_id="ack-1")}
    first = result(peer, "SendMessage", ack)["task"]
    again = result(peer, "SendMessage", ack)["task"]
    assert state(first) == state(again) == "COMPLETED"
    assert len(events_of(task["id"])) == 2


# Isolation: another tenant's or a non-party's task is exactly an unknown id ---------------


@pytest.mark.parametrize("who", ["stranger", "bystander"])
def test_non_parties_see_not_found_exactly_like_an_unknown_id(agent, peer, stranger, tenant, who):
    outsider = stranger if who == "stranger" else factories.agent(tenant, name="bystander")
    task = send(agent, peer.id)

    def errors_for(task_id: str) -> list[tuple[int, str]]:
        found = []
        found.append(error(outsider, "GetTask", {"id": task_id}))
        found.append(error(outsider, "CancelTask", {"id": task_id}))
        for action in ("ack", "accept", "comment"):
            found.append(act_error(outsider, task_id, action))
        return [(e["code"], e["message"].replace(task_id, "<id>")) for e in found]

    unknown = str(uuid.uuid4())
    assert errors_for(task["id"]) == errors_for(unknown)
    assert {code for code, _ in errors_for(unknown)} == {-32001}
    assert state(result(agent, "GetTask", {"id": task["id"]})) == "INPUT_REQUIRED"


def test_other_tenant_timeline_is_not_found(agent, peer, stranger):
    from django.test import Client

    task = send(agent, peer.id)
    mine = Client().get(
        f"/api/v1/tasks/{task['id']}/events", HTTP_AUTHORIZATION=f"Bearer {peer.token}"
    )
    assert mine.status_code == 200 and [e["kind"] for e in mine.json()["events"]] == ["created"]
    theirs = Client().get(
        f"/api/v1/tasks/{task['id']}/events", HTTP_AUTHORIZATION=f"Bearer {stranger.token}"
    )
    unknown = Client().get(
        f"/api/v1/tasks/{uuid.uuid4()}/events", HTTP_AUTHORIZATION=f"Bearer {stranger.token}"
    )
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["error"]["code"] == unknown.json()["error"]["code"] == "NOT_FOUND"
