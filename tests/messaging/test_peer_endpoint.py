"""An agent's own A2A endpoint, POST /a2a/agents/<id>/ (docs/PROTOCOL.md §8, docs/PEERS.md), through
Django's test client: the view a web process serves. Blocking sends that wait, streams and real
A2A clients: test_peer_waits.py, test_peer_streaming.py, test_peer_live.py."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
from django.test import Client

from agents import services as agent_services
from messaging.models import PushConfig, Task, TaskEvent
from messaging.push import payloads
from tests import factories
from tests.messaging.rpc import act, act_error, result
from tests.messaging.rpc import send as rpc_send

pytestmark = pytest.mark.django_db

_ids = itertools.count(1)
CALLER_TOKEN = "hkc_" + "c" * 40


@pytest.fixture(autouse=True)
def quick_settings(settings):
    """Anonymous requests of the whole suite share one address, so only the rate limit test
    counts them; nobody answers here, so blocking sends do not wait (test_peer_live.py has
    real waits)."""
    settings.HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE = 0
    settings.HIKYAKU_BLOCKING_TIMEOUT_SECONDS = 0


@pytest.fixture
def bob(tenant) -> factories.TestAgent:
    """A public agent: the callee of most tests."""
    bob = factories.agent(tenant, name="bob")
    agent_services.set_agent_public(agent=bob.model, public=True)
    return bob


def rpc(
    agent: factories.TestAgent,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    credential: str | None = None,
    headers: dict[str, str] | None = None,
    version: str | None = "1.0",
    address: str = "198.51.100.7",
):
    extra = {"REMOTE_ADDR": address}
    if credential:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {credential}"
    if version is not None:
        extra["HTTP_A2A_VERSION"] = version
    for name, value in (headers or {}).items():
        extra["HTTP_" + name.upper().replace("-", "_")] = value
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
    return Client().post(
        f"/a2a/agents/{agent.id}/", json.dumps(body), content_type="application/json", **extra
    )


def ok(
    agent: factories.TestAgent, method: str, params: dict[str, Any] | None = None, **kwargs: Any
):
    response = rpc(agent, method, params, **kwargs)
    assert response.status_code == 200, response.content
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def err(
    agent: factories.TestAgent, method: str, params: dict[str, Any] | None = None, **kwargs: Any
):
    body = rpc(agent, method, params, **kwargs).json()
    assert "error" in body, body
    return body["error"]


def say(text: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **fields}


def send(agent: factories.TestAgent, text: str = "hello", **kwargs: Any) -> dict[str, Any]:
    """A non-blocking SendMessage; returns the task."""
    params = {"message": say(text), "configuration": {"returnImmediately": True}}
    return ok(agent, "SendMessage", params, **kwargs)["task"]


# Sending ----------------------------------------------------------------------------------


def test_anonymous_send_puts_a_task_in_the_agents_inbox(bob):
    task = send(bob, "please review #12")
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"  # unread, in A2A's words
    assert task["contextId"] == bob.id
    assert "artifacts" not in task  # the broker's copy of the message is not a result
    inbox = result(bob, "ListTasks", {"contextId": bob.id})["tasks"]
    assert [t["id"] for t in inbox] == [task["id"]]
    delivered = inbox[0]
    assert delivered["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert delivered["metadata"]["fromCallerId"].startswith("ip:")
    assert "198.51.100.7" not in json.dumps(delivered)  # the address itself is never shown
    stored = Task.objects.get(pk=task["id"])
    assert stored.sender is None and stored.recipient_id == bob.model.id


def test_caller_identities(bob, agent, api_key, other_api_key, stranger):
    def caller_of(**kwargs: Any) -> str:
        task = Task.objects.get(pk=send(bob, **kwargs)["id"])
        return str(task.sender_id) if task.sender_id else task.caller_id

    assert caller_of(credential=agent.token) == agent.id
    assert caller_of(credential=api_key, headers={"X-Agent-Id": agent.id}) == agent.id
    assert caller_of(credential=api_key) == "tenant-key"
    assert caller_of(credential=CALLER_TOKEN).startswith("anon:")
    assert caller_of().startswith("ip:")
    external = caller_of(credential=other_api_key)
    assert external.startswith("ext:") and str(stranger.tenant.id) not in external
    assert caller_of(credential=stranger.token).startswith("ext:")


def test_a_tenant_agent_caller_is_recorded_as_sender_and_sees_it_in_its_outbox(bob, agent):
    task = send(bob, credential=agent.token)
    outbox = result(agent, "ListTasks", {"metadata": {"box": "outbox"}})["tasks"]
    assert [t["id"] for t in outbox] == [task["id"]]
    assert outbox[0]["metadata"]["fromAgentId"] == agent.id


def test_private_agents_refuse_anonymous_callers(agent):
    response = rpc(agent, "SendMessage", {"message": say()})
    assert response.status_code == 401 and "Bearer" in response["WWW-Authenticate"]
    assert rpc(agent, "SendMessage", {"message": say()}, credential=CALLER_TOKEN).status_code == 401
    assert not Task.objects.exists()


def test_other_tenants_get_404_from_a_private_agent(agent, other_api_key, stranger):
    for credential in (other_api_key, stranger.token):
        response = rpc(agent, "SendMessage", {"message": say()}, credential=credential)
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"Agent not found: {agent.id}"


def test_unknown_and_inactive_agents(tenant, api_key, bob):
    unknown = factories.TestAgent(model=type(bob.model)(id=uuid.uuid4()), token="")
    assert rpc(unknown, "GetTask", {"id": "x"}).status_code == 401
    assert rpc(unknown, "GetTask", {"id": "x"}, credential=api_key).status_code == 404
    assert rpc(unknown, "GetTask", {"id": "x"}, credential="hky_" + "0" * 32).status_code == 401
    agent_services.deregister_agent(agent=bob.model)
    assert rpc(bob, "SendMessage", {"message": say()}).status_code == 401
    assert rpc(bob, "SendMessage", {"message": say()}, credential=api_key).status_code == 404


def test_bad_credentials_are_401_even_for_a_public_agent(bob):
    assert rpc(bob, "SendMessage", {"message": say()}, credential="hka_nope").status_code == 401


def test_message_id_is_not_an_idempotency_key_here(bob):
    params = {"message": say("same"), "configuration": {"returnImmediately": True}}
    first = ok(bob, "SendMessage", params)["task"]
    second = ok(bob, "SendMessage", params)["task"]
    assert first["id"] != second["id"]


def test_destination_is_implied_by_the_endpoint(bob, agent):
    assert ok(bob, "SendMessage", {"message": say(metadata={"destination": bob.id})})
    error = err(bob, "SendMessage", {"message": say(metadata={"destination": agent.id})})
    assert error["code"] == -32602


def test_unknown_fields_are_ignored_and_snake_case_names_accepted(bob):
    msg = {**say(), "tckUnknownField": 1}
    params = {"message": msg, "tckExtraParam": 42, "configuration": {"return_immediately": True}}
    assert ok(bob, "SendMessage", params)["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_client_context_ids_are_kept_as_conversations(bob):
    task = ok(
        bob,
        "SendMessage",
        {"message": say(contextId="conv-1"), "configuration": {"returnImmediately": True}},
    )["task"]
    assert task["contextId"] == "conv-1"
    send(bob)
    listed = ok(bob, "ListTasks", {"contextId": "conv-1"})["tasks"]
    assert [t["id"] for t in listed] == [task["id"]]
    assert len(ok(bob, "ListTasks", {"contextId": bob.id})["tasks"]) == 2


def test_media_types_outside_the_agents_input_modes_are_refused(bob, settings):
    settings.HIKYAKU_PEER_INPUT_MODES = ["text/plain", "image/*"]
    raw = {"raw": "dGNr", "mediaType": "application/x-unsupported"}
    error = err(bob, "SendMessage", {"message": {**say(), "parts": [raw]}})
    assert error["code"] == -32005
    assert error["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    png = {"raw": "dGNr", "mediaType": "image/png", "filename": "shot.png"}
    params = {"message": {**say(), "parts": [png]}, "configuration": {"returnImmediately": True}}
    assert ok(bob, "SendMessage", params)
    data = {"data": {"a": 1}}
    assert err(bob, "SendMessage", {"message": {**say(), "parts": [data]}})["code"] == -32005


def test_any_media_type_is_accepted_by_default(bob):
    raw = {"raw": "dGNr", "mediaType": "application/x-anything"}
    params = {"message": {**say(), "parts": [raw]}, "configuration": {"returnImmediately": True}}
    assert ok(bob, "SendMessage", params)


def test_non_json_requests_get_content_type_not_supported(bob):
    response = Client().post(f"/a2a/agents/{bob.id}/", "{'x': 1}", content_type="text/plain")
    assert response.json()["error"]["code"] == -32005


def test_size_limits_apply(bob, settings):
    settings.HIKYAKU_MAX_PARTS = 2
    parts = [{"text": "x"}] * 3
    assert err(bob, "SendMessage", {"message": {**say(), "parts": parts}})["code"] == -32602


def handed_off(response, method: str) -> None:
    """The web process's answer to a long-held call (messaging/stream/handoff.py)."""
    assert response.status_code == 421, response.content
    error = response.json()["error"]
    assert error["code"] == -32004
    assert error["message"].startswith(f"{method} is not served here")
    assert "stream process" in error["message"]


def test_a_send_that_would_wait_is_handed_to_the_stream_processes_unwritten(bob, settings):
    settings.HIKYAKU_BLOCKING_TIMEOUT_SECONDS = 25
    handed_off(rpc(bob, "SendMessage", {"message": say()}), "SendMessage")
    message_0_3 = {"messageId": "m-03", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    blocking_0_3 = {"message": message_0_3, "configuration": {"blocking": True}}
    handed_off(rpc(bob, "message/send", blocking_0_3, version=None), "message/send")
    assert not Task.objects.exists()  # nothing delivered: the stream tier will do it, once
    # Sends that do not wait are answered here, at once.
    assert send(bob)["status"]["state"] == "TASK_STATE_SUBMITTED"
    plain_0_3 = ok(bob, "message/send", {"message": message_0_3}, version=None)
    assert plain_0_3["task"]["status"]["state"] == "submitted"
    # A malformed configuration is the ordinary error, not a hand-off.
    bad = {"message": say(), "configuration": {"returnImmediately": "yes"}}
    assert err(bob, "SendMessage", bad)["code"] == -32602


def test_without_a_blocking_timeout_a_blocking_send_is_answered_here(bob):
    # quick_settings: HIKYAKU_BLOCKING_TIMEOUT_SECONDS = 0, so nothing would wait.
    task = ok(bob, "SendMessage", {"message": say()})["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"


# The conversation -------------------------------------------------------------------------


def test_question_answer_and_result(bob):
    task = send(bob, "fix the flaky test")
    act(bob, task["id"], "accept", "on it")
    act(bob, task["id"], "block", "which branch?")
    asked = ok(bob, "GetTask", {"id": task["id"]})
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert asked["status"]["message"]["parts"] == [{"text": "which branch?"}]
    assert asked["status"]["message"]["role"] == "ROLE_AGENT"
    # A plain follow-up answers the question (reply).
    follow_up = {"message": say("main", taskId=task["id"])}
    answered = ok(bob, "SendMessage", follow_up)["task"]
    assert answered["status"]["state"] == "TASK_STATE_WORKING"
    assert "message" not in answered["status"]
    act(bob, task["id"], "complete", "fixed in abc123")
    done = ok(bob, "GetTask", {"id": task["id"]})
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [a["parts"] for a in done["artifacts"]] == [[{"text": "fixed in abc123"}]]
    assert [m["role"] for m in done["history"]] == [
        "ROLE_USER",
        "ROLE_AGENT",
        "ROLE_AGENT",
        "ROLE_USER",
        "ROLE_AGENT",
    ]
    kinds = list(TaskEvent.objects.filter(task_id=task["id"]).values_list("kind", flat=True))
    assert kinds == ["created", "accept", "block", "reply", "complete"]


def test_follow_ups_while_the_agent_works_are_comments(bob):
    task = send(bob)
    act(bob, task["id"], "accept")
    after = ok(
        bob,
        "SendMessage",
        {
            "message": say("also check CI", taskId=task["id"]),
            "configuration": {"returnImmediately": True},
        },
    )["task"]
    assert after["status"]["state"] == "TASK_STATE_WORKING"
    assert TaskEvent.objects.filter(task_id=task["id"]).last().kind == "comment"


def test_a_failure_shows_its_reason(bob):
    task = send(bob, "deploy")
    act(bob, task["id"], "accept")
    act(bob, task["id"], "fail", "the cluster is down")
    failed = ok(bob, "GetTask", {"id": task["id"]})
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert failed["status"]["message"]["parts"] == [{"text": "the cluster is down"}]


def test_follow_up_errors(bob):
    task = send(bob)
    mismatch = say(taskId=task["id"], contextId="someone-elses")
    assert err(bob, "SendMessage", {"message": mismatch})["code"] == -32602
    assert err(bob, "SendMessage", {"message": say(taskId="nope")})["code"] == -32001
    act(bob, task["id"], "reject", "not mine")
    terminal = err(bob, "SendMessage", {"message": say(taskId=task["id"])})
    assert terminal["code"] == -32004
    assert ok(bob, "GetTask", {"id": task["id"]})["status"]["state"] == "TASK_STATE_REJECTED"


def test_a_completed_message_reply_is_returned_as_a_message(bob):
    task = send(bob, "what time is it?")
    act(bob, task["id"], "complete", "noon", replyAs="message")
    # A retry of a blocking send, or GetTask, still shows what happened.
    got = ok(bob, "GetTask", {"id": task["id"]})
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    from messaging.a2a import peer

    reply = peer.message_reply(Task.objects.get(pk=task["id"]))
    assert reply["role"] == "ROLE_AGENT" and reply["parts"] == [{"text": "noon"}]
    assert reply["taskId"] == task["id"] and reply["contextId"] == bob.id


# Reading and cancelling: only the caller's own tasks with this agent ----------------------


def test_callers_only_see_their_own_tasks(bob, agent, api_key):
    mine = send(bob, address="192.0.2.1")
    theirs = send(bob, address="192.0.2.2")
    with_token = send(bob, credential=CALLER_TOKEN, address="192.0.2.1")
    as_agent = send(bob, credential=agent.token)
    assert ok(bob, "GetTask", {"id": mine["id"]}, address="192.0.2.1")["id"] == mine["id"]
    for task in (theirs, with_token, as_agent):
        assert err(bob, "GetTask", {"id": task["id"]}, address="192.0.2.1")["code"] == -32001
    listed = ok(bob, "ListTasks", {}, address="192.0.2.1")
    assert [t["id"] for t in listed["tasks"]] == [mine["id"]] and listed["totalSize"] == 1
    by_token = ok(bob, "ListTasks", {}, credential=CALLER_TOKEN, address="198.51.100.1")
    assert [t["id"] for t in by_token["tasks"]] == [with_token["id"]]
    # The agent itself, calling its own endpoint, is just another caller here.
    assert err(bob, "GetTask", {"id": mine["id"]}, credential=bob.token)["code"] == -32001
    assert err(bob, "CancelTask", {"id": mine["id"]}, credential=api_key)["code"] == -32001


def test_tasks_sent_to_another_agent_are_not_found_here(bob, tenant):
    carol = factories.agent(tenant, name="carol")
    agent_services.set_agent_public(agent=carol.model, public=True)
    task = send(carol)
    assert err(bob, "GetTask", {"id": task["id"]})["code"] == -32001


def test_list_tasks_follows_a2a_1_0(bob, django_assert_max_num_queries):
    tasks = [send(bob, f"m{i}") for i in range(3)]
    act(bob, tasks[0]["id"], "complete", "done")
    with django_assert_max_num_queries(3):  # agent, count, page
        page = ok(bob, "ListTasks", {"page_size": 2, "context_id": bob.id})
    assert [t["id"] for t in page["tasks"]] == [tasks[0]["id"], tasks[2]["id"]]
    assert page["pageSize"] == 2 and page["totalSize"] == 3
    assert all("artifacts" not in t for t in page["tasks"])  # includeArtifacts defaults off
    rest = ok(bob, "ListTasks", {"pageSize": 2, "pageToken": page["nextPageToken"]})
    assert [t["id"] for t in rest["tasks"]] == [tasks[1]["id"]] and rest["nextPageToken"] == ""
    with_artifacts = ok(bob, "ListTasks", {"includeArtifacts": True, "historyLength": 0})
    done = with_artifacts["tasks"][0]
    assert done["artifacts"][0]["parts"] == [{"text": "done"}] and "history" not in done
    submitted = ok(bob, "ListTasks", {"status": "TASK_STATE_SUBMITTED"})["tasks"]
    assert {t["id"] for t in submitted} == {tasks[1]["id"], tasks[2]["id"]}
    assert ok(bob, "ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"})["tasks"] == []


@pytest.mark.parametrize("stage", ["unread", "working", "blocked"])
def test_the_caller_may_cancel_a_live_task(bob, stage):
    task = send(bob)
    if stage != "unread":
        act(bob, task["id"], "accept")
    if stage == "blocked":
        act(bob, task["id"], "block", "question?")
    canceled = ok(bob, "CancelTask", {"id": task["id"]})
    assert canceled["id"] == task["id"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert "message" not in canceled["status"]
    again = err(bob, "CancelTask", {"id": task["id"]})
    assert again["code"] == -32002
    # The agent sees the cancellation in its inbox and cannot finish the task any more.
    assert act_error(bob, task["id"], "complete")["code"] == -32004


def test_cancel_errors(bob):
    assert err(bob, "CancelTask", {"id": str(uuid.uuid4())})["code"] == -32001
    assert err(bob, "CancelTask", {})["code"] == -32602


# Protocol surface -------------------------------------------------------------------------


def test_protocol_errors(bob):
    assert err(bob, "Nope")["code"] == -32601
    assert err(bob, "SendMessage", {})["code"] == -32602
    assert err(bob, "GetTask", {"id": "tck-nonexistent"})["code"] == -32001
    # Streams' errors come from the stream processes (test_peer_streaming.py,
    # test_peer_waits.py); this view hands streams over without reading them.
    assert err(bob, "GetExtendedAgentCard")["code"] == -32004
    version = err(bob, "SendMessage", {"message": say()}, version="99.0")
    assert version["code"] == -32009 and version["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    not_found = err(bob, "GetTask", {"id": str(uuid.uuid4())})
    assert not_found["data"][0] == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "TASK_NOT_FOUND",
        "domain": "a2a-protocol.org",
        "metadata": {},
    }


def test_the_0_3_dialect_works_here_too(bob):
    params = {
        "message": {
            "messageId": "m-03",
            "role": "user",
            "kind": "message",
            "parts": [{"kind": "text", "text": "hi"}],
        }
    }
    task = ok(bob, "message/send", params, version=None)["task"]
    assert task["kind"] == "task" and task["status"]["state"] == "submitted"
    got = ok(bob, "tasks/get", {"id": task["id"]}, version=None)["task"]
    assert got["id"] == task["id"]


def test_get_redirects_to_the_card(bob):
    for path in (f"/a2a/agents/{bob.id}/", f"/a2a/agents/{bob.id}"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"] == f"/a2a/agents/{bob.id}/.well-known/agent-card.json"


def test_the_endpoint_answers_without_the_trailing_slash_too(bob):
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    response = Client().post(
        f"/a2a/agents/{bob.id}", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 200 and response.json()["result"]["tasks"] == []


def test_anonymous_callers_are_rate_limited_per_address(bob, settings):
    settings.HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE = 2
    settings.REDIS_URL = ""
    statuses = [rpc(bob, "ListTasks", address="203.0.113.50").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    # Minting caller tokens does not buy more requests: the address is what counts.
    limited = rpc(bob, "ListTasks", credential="hkc_" + "z" * 40, address="203.0.113.50")
    assert limited.status_code == 429
    assert rpc(bob, "ListTasks", address="203.0.113.51").status_code == 200


def test_client_address_behind_trusted_proxies(bob, settings):
    settings.HIKYAKU_TRUSTED_PROXY_HOPS = 1
    task = send(bob, headers={"X-Forwarded-For": "spoofed, 192.0.2.77"}, address="10.0.0.1")
    visible = ok(bob, "GetTask", {"id": task["id"]}, headers={"X-Forwarded-For": "192.0.2.77"})
    assert visible["id"] == task["id"]
    assert err(bob, "GetTask", {"id": task["id"]}, address="10.0.0.1")["code"] == -32001


def test_streaming_methods_are_handed_to_the_stream_processes_unwritten(bob):
    task = send(bob)
    streamed = {"message": say("stream me")}
    handed_off(rpc(bob, "SendStreamingMessage", streamed), "SendStreamingMessage")
    handed_off(rpc(bob, "SubscribeToTask", {"id": task["id"]}), "SubscribeToTask")
    handed_off(rpc(bob, "message/stream", streamed, version=None), "message/stream")
    assert Task.objects.count() == 1  # only the first send's task
    # Before any authentication: the stream process authenticates (and counts) it once.
    handed_off(
        rpc(bob, "SubscribeToTask", {"id": task["id"]}, credential="hka_bad"), "SubscribeToTask"
    )


# Push notification configs ----------------------------------------------------------------


def test_push_config_crud_is_scoped_to_the_callers_own_tasks(bob, agent, settings):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []
    task = send(bob, address="192.0.2.1")
    config = {"taskId": task["id"], "id": "hook", "url": "https://example.com/hook"}
    created = ok(bob, "CreateTaskPushNotificationConfig", config, address="192.0.2.1")
    assert created == {**config, "url": "https://example.com/hook"}
    # proto field names, like the A2A TCK sends them
    got = ok(bob, "GetTaskPushNotificationConfig", {"task_id": task["id"], "id": "hook"},
             address="192.0.2.1")  # fmt: skip
    assert got["url"] == "https://example.com/hook"
    listed = ok(bob, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}, address="192.0.2.1")
    assert [c["id"] for c in listed["configs"]] == ["hook"]
    # Another caller (address, agent, the agent itself) does not find the task at all.
    for other in ({"address": "192.0.2.2"}, {"credential": agent.token}, {"credential": bob.token}):
        for method, params in (
            ("CreateTaskPushNotificationConfig", config),
            ("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "hook"}),
            ("ListTaskPushNotificationConfigs", {"taskId": task["id"]}),
            ("DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "hook"}),
        ):
            assert err(bob, method, params, **other)["code"] == -32001, (method, other)
    delete = {"taskId": task["id"], "id": "hook"}
    assert ok(bob, "DeleteTaskPushNotificationConfig", delete, address="192.0.2.1") is None
    assert ok(bob, "DeleteTaskPushNotificationConfig", delete, address="192.0.2.1") is None
    missing = err(bob, "GetTaskPushNotificationConfig", delete, address="192.0.2.1")
    assert missing["code"] == -32001
    # The loopback guard holds here too.
    hook = {"taskId": task["id"], "url": "http://127.0.0.1:9/hook"}
    assert err(bob, "CreateTaskPushNotificationConfig", hook, address="192.0.2.1")["code"] == -32602


def test_push_config_of_a_tenant_agent_caller_and_in_send(bob, agent, tenant):
    """A tenant agent is a party of many tasks, but only its tasks with this agent count
    here; a config sent along with SendMessage is attached as on the broker endpoint."""
    carol = factories.agent(tenant, name="carol")
    elsewhere = rpc_send(agent, carol.id)["id"]
    params = {"taskId": elsewhere, "url": "https://example.com/hook"}
    denied = err(bob, "CreateTaskPushNotificationConfig", params, credential=agent.token)
    assert denied["code"] == -32001
    hook = {"id": "inline", "url": "https://example.com/inline", "token": "t0k"}
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": hook}
    params = {"message": say(), "configuration": configuration}
    sent = ok(bob, "SendMessage", params, credential=agent.token)["task"]
    listed = ok(
        bob, "ListTaskPushNotificationConfigs", {"taskId": sent["id"]}, credential=agent.token
    )
    assert listed["configs"] == [{**hook, "taskId": sent["id"]}]


def test_push_notifications_show_the_task_in_the_callers_view(bob):
    hook = {"url": "https://example.com/hook"}
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": hook}
    message = say("hi", contextId="conversation-7")
    task = ok(bob, "SendMessage", {"message": message, "configuration": configuration})["task"]
    assert PushConfig.objects.get(task_id=task["id"]).dialect == "peer"
    act(bob, task["id"], "comment", "looking soon")
    act(bob, task["id"], "accept", "on it")
    act(bob, task["id"], "block", "which branch?")
    stored = Task.objects.get(pk=task["id"])
    bodies = [
        payloads.stream_response(stored, event, "peer")["statusUpdate"]
        for event in TaskEvent.objects.filter(task=stored).exclude(kind="created").order_by("id")
    ]
    assert [b["status"]["state"] for b in bodies] == [
        "TASK_STATE_SUBMITTED",  # the agent's comment on the unread task
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
    ]
    assert {b["contextId"] for b in bodies} == {"conversation-7"}
    assert bodies[-1]["status"]["message"]["parts"] == [{"text": "which branch?"}]
