"""The push notification config methods of the JSON-RPC surface, in both dialects.

1.0 (`A2A-Version: 1.x`): `CreateTaskPushNotificationConfig` takes a TaskPushNotificationConfig
(`{taskId, id?, url, token?, authentication?: {scheme, credentials}}`) and returns it;
`Get…` takes `{taskId, id}`; `List…` `{taskId, pageSize?, pageToken?}` and returns
`{configs, nextPageToken}`; `Delete…` `{taskId, id}` and returns null.
0.3 (no header): `tasks/pushNotificationConfig/set` takes `{taskId, pushNotificationConfig:
{url, id?, token?, authentication?: {schemes, credentials}}}`; `get`/`delete` take
`{id: <task id>, pushNotificationConfigId}`; `list` takes `{id}` and returns a list.
Either dialect's parameter shape is accepted under either method name; the response follows
the request's dialect. Parsing and rendering go through a2a-sdk's types and conversions.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.types import AuthenticationInfo, TaskPushNotificationConfig
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from pydantic import ValidationError

from agents.destinations import check_url
from hikyaku.errors import HikyakuError, InvalidRequest

from ..models import Task
from ..push import configs
from ..push.configs import ConfigInput
from .jsonrpc import Call
from .wire import Dialect

log = logging.getLogger(__name__)


def _invalid(exc: Exception, field: str = "params") -> InvalidRequest:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or field
        return InvalidRequest(f"Invalid {field}: {first['msg']}", details={"field": field})
    return InvalidRequest(f"Invalid {field}: {exc}", details={"field": field})


def _parse_config(params: dict[str, Any]) -> TaskPushNotificationConfig:
    try:
        if "pushNotificationConfig" in params:  # the 0.3 shape
            compat = types_v03.TaskPushNotificationConfig.model_validate(params)
            return conversions.to_core_task_push_notification_config(compat)
        return ParseDict(params, TaskPushNotificationConfig())
    except (ParseError, ValidationError, TypeError, ValueError, OverflowError) as exc:
        raise _invalid(exc) from None


def _render(config, dialect: Dialect) -> dict[str, Any]:
    proto = TaskPushNotificationConfig(
        id=config.config_id, task_id=str(config.task_id), url=config.url, token=config.token
    )
    if config.auth_scheme or config.auth_credentials:
        proto.authentication.CopyFrom(
            AuthenticationInfo(scheme=config.auth_scheme, credentials=config.auth_credentials)
        )
    if dialect is Dialect.V1_0:
        return MessageToDict(proto)
    return conversions.to_compat_task_push_notification_config(proto).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def _ids(params: dict[str, Any]) -> tuple[str, str]:
    """(task id, config id) from either dialect's parameters."""
    if "taskId" in params:
        task_id, config_id = params.get("taskId"), params.get("id", "")
    else:
        task_id, config_id = params.get("id"), params.get("pushNotificationConfigId", "")
    if not isinstance(task_id, str) or not task_id:
        raise InvalidRequest("The task id (taskId) is required.", details={"field": "taskId"})
    if config_id is None:
        config_id = ""
    if not isinstance(config_id, str):
        raise InvalidRequest("The config id must be a string.", details={"field": "id"})
    return task_id, config_id


def create_config(call: Call, *, payload: str | None = None) -> dict[str, Any]:
    """`payload`: the shape of the notifications (PushConfig.dialect), by default the
    request's dialect."""
    proto = _parse_config(call.params)
    if not proto.task_id:
        raise InvalidRequest("taskId is required.", details={"field": "taskId"})
    config = configs.set_push_config(
        sender=call.sender,
        config=ConfigInput(
            task_id=proto.task_id,
            url=proto.url,
            config_id=proto.id,
            token=proto.token,
            auth_scheme=proto.authentication.scheme,
            auth_credentials=proto.authentication.credentials,
        ),
        dialect=payload or call.dialect.value,
    )
    return _render(config, call.dialect)


def get_config(call: Call) -> dict[str, Any]:
    task_id, config_id = _ids(call.params)
    config = configs.get_push_config(sender=call.sender, task_id=task_id, config_id=config_id)
    return _render(config, call.dialect)


def list_configs(call: Call) -> Any:
    task_id, _ = _ids(call.params)
    page_size = call.params.get("pageSize") or 50
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= 100:
        raise InvalidRequest(
            "pageSize must be an integer between 1 and 100.", details={"field": "pageSize"}
        )
    page_token = call.params.get("pageToken") or ""
    if not isinstance(page_token, str):
        raise InvalidRequest("pageToken must be a string.", details={"field": "pageToken"})
    _, page, token = configs.list_push_configs(
        sender=call.sender, task_id=task_id, page_size=page_size, page_token=page_token
    )
    rendered = [_render(config, call.dialect) for config in page]
    if call.dialect is Dialect.V0_3:
        return rendered
    return {"configs": rendered, "nextPageToken": token}


def delete_config(call: Call) -> None:
    task_id, config_id = _ids(call.params)
    configs.delete_push_config(sender=call.sender, task_id=task_id, config_id=config_id)
    return None


def config_in_send(call: Call) -> ConfigInput | None:
    """A push config sent along with SendMessage (1.0 `configuration.taskPushNotificationConfig`,
    0.3 `configuration.pushNotificationConfig`; a2a-sdk clients configured with a push config
    send it on every message), validated before anything is sent."""
    configuration = call.params.get("configuration")
    if not isinstance(configuration, dict):
        return None
    field = next(
        (f for f in ("taskPushNotificationConfig", "pushNotificationConfig") if f in configuration),
        None,
    )
    if field is None or configuration[field] is None:
        return None
    raw = configuration[field]
    try:
        if field == "pushNotificationConfig":
            compat = types_v03.PushNotificationConfig.model_validate(raw)
            proto = conversions.to_core_push_notification_config(compat)
        else:
            proto = ParseDict(raw, TaskPushNotificationConfig())
    except (ParseError, ValidationError, TypeError, ValueError, OverflowError) as exc:
        raise _invalid(exc, f"configuration.{field}") from None
    if not proto.url:
        raise InvalidRequest(
            f"configuration.{field}.url is required.", details={"field": f"configuration.{field}"}
        )
    check_url(proto.url, field=f"configuration.{field}.url")
    return ConfigInput(
        task_id="",
        url=proto.url,
        config_id=proto.id,
        token=proto.token,
        auth_scheme=proto.authentication.scheme,
        auth_credentials=proto.authentication.credentials,
    )


def attach_to_sent_task(
    call: Call, task: Task, config: ConfigInput, *, payload: str | None = None
) -> None:
    """Attach the SendMessage push config to the task the send produced or acted on (not to a
    broadcast summary: its deliveries belong to their recipients). The send has committed, so
    a config that cannot be stored is logged, never turned into an error."""
    if task.type == Task.Type.BROADCAST_SUMMARY:
        return
    try:
        configs.set_push_config(
            sender=call.sender,
            config=dataclasses.replace(config, task_id=str(task.id)),
            dialect=payload or call.dialect.value,
        )
    except HikyakuError as exc:
        log.warning("push config of SendMessage on task %s not stored: %s", task.id, exc)


# By their A2A 1.0 names; the method tables add the 0.3 names (messaging/a2a/jsonrpc.py).
PUSH_METHODS = {
    "CreateTaskPushNotificationConfig": create_config,
    "GetTaskPushNotificationConfig": get_config,
    "ListTaskPushNotificationConfigs": list_configs,
    "DeleteTaskPushNotificationConfig": delete_config,
}
