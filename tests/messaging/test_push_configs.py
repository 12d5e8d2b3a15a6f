"""The A2A push notification config methods, in both dialects, and with the a2a-sdk client."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from a2a.compat.v0_3 import types as types_v03
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.json_format import ParseDict

from agents.services import set_agent_policy
from messaging.models import PushConfig
from tests import factories
from tests.messaging.rpc import error, message, result, send

HOOK = "https://hooks.example.com/a2a"


def create(agent, task_id: str, **fields):
    return result(
        agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK, **fields}
    )


@pytest.mark.django_db
def test_create_get_list_delete_in_the_10_dialect(agent, peer):
    task = send(agent, peer.id)
    created = create(
        agent,
        task["id"],
        id="ci",
        token="tok",
        authentication={"scheme": "Bearer", "credentials": "c"},
    )
    ParseDict(created, TaskPushNotificationConfig())
    assert created == {
        "id": "ci",
        "taskId": task["id"],
        "url": HOOK,
        "token": "tok",
        "authentication": {"scheme": "Bearer", "credentials": "c"},
    }
    assert result(agent, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "ci"}) == (
        created
    )
    default = create(agent, task["id"])
    assert default["id"] == task["id"]  # an empty id defaults to the task id, as in a2a-sdk
    listed = result(agent, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert [c["id"] for c in listed["configs"]] == ["ci", task["id"]]
    assert listed["nextPageToken"] == ""
    deleted = result(agent, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "ci"})
    assert deleted is None
    # Deleting again is not an error (a2a-sdk semantics); getting it is "not found".
    result(agent, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "ci"})
    err = error(agent, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "ci"})
    assert err["code"] == -32001


@pytest.mark.django_db
def test_create_with_an_existing_id_replaces_it(agent, peer):
    task = send(agent, peer.id)
    create(agent, task["id"], id="x", token="old")
    replaced = create(agent, task["id"], id="x", url="https://other.example.com/h")
    assert replaced["url"] == "https://other.example.com/h" and "token" not in replaced
    assert PushConfig.objects.count() == 1


@pytest.mark.django_db
def test_list_pages(agent, peer):
    task = send(agent, peer.id)
    for i in range(5):
        create(agent, task["id"], id=f"c{i}")
    seen, token = [], ""
    while True:
        page = result(
            agent,
            "ListTaskPushNotificationConfigs",
            {"taskId": task["id"], "pageSize": 2, "pageToken": token},
        )
        seen += [c["id"] for c in page["configs"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == [f"c{i}" for i in range(5)]


@pytest.mark.django_db
def test_the_03_dialect_shapes(agent, peer):
    task = send(agent, peer.id)
    config = {
        "url": HOOK,
        "id": "old-client",
        "token": "t",
        "authentication": {"schemes": ["Bearer"], "credentials": "c"},
    }
    created = result(
        agent,
        "tasks/pushNotificationConfig/set",
        {"taskId": task["id"], "pushNotificationConfig": config},
        version=None,
    )
    types_v03.TaskPushNotificationConfig.model_validate(created)
    assert created == {"taskId": task["id"], "pushNotificationConfig": config}
    got = result(
        agent,
        "tasks/pushNotificationConfig/get",
        {"id": task["id"], "pushNotificationConfigId": "old-client"},
        version=None,
    )
    assert got == created
    # Without a config id: the caller's config (0.3 clients set one per task).
    assert result(agent, "tasks/pushNotificationConfig/get", {"id": task["id"]}, version=None) == (
        created
    )
    listed = result(agent, "tasks/pushNotificationConfig/list", {"id": task["id"]}, version=None)
    assert listed == [created]
    assert (
        result(
            agent,
            "tasks/pushNotificationConfig/delete",
            {"id": task["id"], "pushNotificationConfigId": "old-client"},
            version=None,
        )
        is None
    )
    assert PushConfig.objects.count() == 0


@pytest.mark.django_db
def test_the_recipient_may_set_configs_too_and_each_party_sees_only_its_own(agent, peer):
    task = send(agent, peer.id)
    create(agent, task["id"], id="mine", token="alice-secret")
    create(peer, task["id"], id="theirs")
    assert [
        c["id"]
        for c in result(peer, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})["configs"]
    ] == ["theirs"]
    err = error(peer, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "mine"})
    assert err["code"] == -32001
    result(peer, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "mine"})
    assert PushConfig.objects.filter(config_id="mine").exists()
    # Ids are per party: both may use the default id (the task id) or the same name.
    create(agent, task["id"], id="theirs", token="alice-too")
    create(agent, task["id"])
    create(peer, task["id"])
    assert PushConfig.objects.filter(config_id="theirs").count() == 2
    assert PushConfig.objects.filter(config_id=task["id"]).count() == 2
    peer_view = result(
        peer, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "theirs"}
    )
    assert "token" not in peer_view


@pytest.mark.django_db
@pytest.mark.parametrize(
    "method",
    [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ],
)
def test_outsiders_get_task_not_found(tenant, agent, peer, stranger, method):
    task = send(agent, peer.id)
    create(agent, task["id"], id="c")
    carol = factories.agent(tenant, name="carol")
    params = {"taskId": task["id"], "id": "c", "url": HOOK}
    unknown = error(agent, method, {**params, "taskId": str(uuid.uuid4())})
    for outsider in (stranger, carol):
        err = error(outsider, method, params)
        assert err["code"] == unknown["code"] == -32001
        assert err["message"] == unknown["message"].replace(unknown["message"][-36:], task["id"])
    # Narrowing the policy closes the door too, with the same answer.
    set_agent_policy(agent=peer.refresh(), receive_from=[])
    err = error(agent, method, params)
    assert err["code"] == -32001
    assert PushConfig.objects.count() == 1


@pytest.mark.django_db
def test_invalid_configs_are_refused_with_the_field(agent, peer):
    task = send(agent, peer.id)
    for params, words in (
        ({"taskId": task["id"]}, "url is required"),
        ({"taskId": task["id"], "url": "ftp://x.example.com/"}, "Only http and https"),
        ({"taskId": task["id"], "url": 7}, "url"),
        ({"taskId": task["id"], "url": HOOK, "bogus": 1}, "bogus"),
    ):
        err = error(agent, "CreateTaskPushNotificationConfig", params)
        assert err["code"] == -32602 and words in err["message"], (params, err)
    summary = result(
        agent,
        "SendMessage",
        {"message": {"messageId": "b1", "role": "ROLE_USER", "parts": [{"text": "all"}],
                     "metadata": {"destination": "*"}}},
    )["task"]  # fmt: skip
    err = error(agent, "CreateTaskPushNotificationConfig", {"taskId": summary["id"], "url": HOOK})
    assert err["code"] == -32001


@pytest.mark.django_db
def test_at_most_ten_configs_per_party_and_task(agent, peer):
    task = send(agent, peer.id)
    for i in range(10):
        create(agent, task["id"], id=f"c{i}")
    err = error(agent, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": HOOK})
    assert err["code"] == -32602


def test_the_broker_card_announces_push_notifications(client):
    card = client.get("/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is True


# The a2a-sdk client against a real broker process ----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a2a_sdk_client_manages_push_configs(broker, tenant):
    from tests.messaging.test_a2a_sdk_client import client_for, outgoing
    from tests.messaging.test_a2a_sdk_client import send as sdk_send

    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")

    async def scenario():
        a = await client_for(broker, alice)
        task = await sdk_send(a, outgoing("hi", to=bob.id))
        config = TaskPushNotificationConfig(task_id=task.id, id="sdk", url=HOOK, token="t")
        config.authentication.scheme = "Bearer"
        config.authentication.credentials = "c"
        created = await a.create_task_push_notification_config(config)
        assert created == config
        got = await a.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="sdk")
        )
        assert got == config
        listed = await a.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert list(listed.configs) == [config]
        await a.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="sdk")
        )
        with pytest.raises(TaskNotFoundError):
            await a.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="sdk")
            )
        await a.close()

    asyncio.run(scenario())


# A push config sent along with SendMessage -------------------------------------------------------


@pytest.mark.django_db
def test_send_message_may_carry_a_push_config(agent, peer):
    response = result(
        agent,
        "SendMessage",
        {
            "message": message("watch this", to=peer.id),
            "configuration": {"taskPushNotificationConfig": {"url": HOOK, "token": "t"}},
        },
    )
    task_id = response["task"]["id"]
    got = result(agent, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": task_id})
    assert got == {"id": task_id, "taskId": task_id, "url": HOOK, "token": "t"}


@pytest.mark.django_db
def test_send_message_in_03_may_carry_a_push_config(agent, peer):
    response = result(
        agent,
        "message/send",
        {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "user",
                "parts": [{"kind": "text", "text": "hi"}],
                "metadata": {"destination": peer.id},
            },
            "configuration": {"pushNotificationConfig": {"url": HOOK, "id": "p"}},
        },
        version=None,
    )
    task_id = response["task"]["id"]
    assert PushConfig.objects.get(task_id=task_id).config_id == "p"


@pytest.mark.django_db
def test_an_invalid_push_config_in_send_message_sends_nothing(settings, agent, peer):
    from messaging.models import Task

    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []
    for config, words in (
        ({"url": "http://127.0.0.1:9/x"}, "private"),
        ({"token": "no url"}, "url is required"),
        ({"url": HOOK, "nonsense": True}, "nonsense"),
    ):
        err = error(
            agent,
            "SendMessage",
            {
                "message": message(to=peer.id),
                "configuration": {"taskPushNotificationConfig": config},
            },
        )
        assert err["code"] == -32602 and words in err["message"], err
    assert Task.objects.count() == 0


@pytest.mark.django_db
def test_a_broadcast_with_a_push_config_attaches_nothing(agent, peer):
    result(
        agent,
        "SendMessage",
        {
            "message": message("all", to="*"),
            "configuration": {"taskPushNotificationConfig": {"url": HOOK}},
        },
    )
    assert PushConfig.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a2a_sdk_client_configured_for_push_gets_notified(settings, tenant, receiver):
    """End to end in the embedded default: an a2a-sdk client configured with a push config
    sends; the recipient works the task; the client's receiver gets signed updates."""
    settings.CELERY_TASK_ALWAYS_EAGER = True  # bob acts from this process
    import httpx
    from a2a.client import ClientConfig, create_client

    from agents.services import webhook_secret
    from messaging.push import payloads
    from tests.live import BrokerProcess
    from tests.messaging.rpc import act
    from tests.messaging.test_a2a_sdk_client import outgoing
    from tests.messaging.test_a2a_sdk_client import send as sdk_send

    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    server = BrokerProcess(env={"CELERY_BROKER_URL": ""}).start()
    try:

        async def scenario():
            http = httpx.AsyncClient(headers={"Authorization": f"Bearer {alice.token}"})
            push = TaskPushNotificationConfig(url=receiver.url, token="client-token")
            client = await create_client(
                server.url,
                client_config=ClientConfig(
                    httpx_client=http, streaming=False, push_notification_config=push
                ),
            )
            task = await sdk_send(client, outgoing("build it", to=bob.id))
            await client.close()
            return task

        task = asyncio.run(scenario())
        act(bob, task.id, "accept")
        act(bob, task.id, "complete", "built")
        requests = receiver.wait_for(2)
    finally:
        server.stop()
    states = [r.json["statusUpdate"]["status"]["state"] for r in requests]
    assert sorted(states) == ["TASK_STATE_COMPLETED", "TASK_STATE_WORKING"]
    secret = webhook_secret(agent=alice.refresh())
    for request in requests:
        assert request.headers["X-A2A-Notification-Token"] == "client-token"
        assert payloads.verify(secret, request.body, request.headers["X-Hikyaku-Signature"])
