"""The JSON-RPC method table: parse params, call one service or selector, render."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agents.auth import Unverified
from hikyaku.errors import InvalidRequest

from .. import selectors, services
from ..models import Task
from ..push.configs import ConfigInput
from . import push
from .jsonrpc import Call, method_table
from .push import PUSH_METHODS
from .wire import Dialect, parse_message, parse_status_filter, render_task


def int_param(params: dict, name: str, *, low: int, high: int, default: int | None) -> int | None:
    """An integer parameter (a JSON number or a numeric string) within [low, high]."""
    value = params.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidRequest(f"{name} must be an integer.", details={"field": name})
    try:
        value = int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer.", details={"field": name}) from None
    if not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}.", details={"field": name})
    return value


def task_id_param(params: dict) -> str:
    """`params.id`, the task id of GetTask, CancelTask and SubscribeToTask."""
    task_id = params.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise InvalidRequest("params.id (the task id) is required.", details={"field": "id"})
    return task_id


def _wrap(call: Call, body: dict[str, Any]) -> dict[str, Any]:
    """GetTask/CancelTask: the Task itself in 1.0, `{"task": …}` in the 0.3 compat dialect."""
    return body if call.dialect is Dialect.V1_0 else {"task": body}


@dataclass(frozen=True)
class SendParams:
    """The params of SendMessage or SendStreamingMessage on the broker endpoint, checked."""

    message: dict[str, Any]
    history_length: int | None
    push_config: ConfigInput | None


def send_params(call: Call) -> SendParams:
    """Every parameter of a send, checked before the send: an error after it committed would
    tell the client "failed" about a message that was delivered."""
    configuration = call.params.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise InvalidRequest(
            "params.configuration must be an object.", details={"field": "configuration"}
        )
    history_length = int_param(configuration, "historyLength", low=0, high=10_000, default=None)
    message = parse_message(call.params.get("message"), call.dialect)
    push_config = push.config_in_send(call)
    return SendParams(message=message, history_length=history_length, push_config=push_config)


def deliver(call: Call, params: SendParams) -> Task:
    """The send, and the push config sent along with it attached to the task it made."""
    if params.push_config is not None and call.sender.check is not None:
        raise Unverified  # attaching it is a second write, which does not check the identity
    task = services.send_message(sender=call.sender, message=params.message)
    if params.push_config is not None:
        push.attach_to_sent_task(call, task, params.push_config)
    return task


def send_message(call: Call) -> dict[str, Any]:
    params = send_params(call)
    task = deliver(call, params)
    return {"task": render_task(task, call.dialect, history_length=params.history_length)}


def get_task(call: Call) -> dict[str, Any]:
    task = selectors.party_task(sender=call.sender, task_id=task_id_param(call.params))
    history_length = int_param(call.params, "historyLength", low=0, high=10_000, default=None)
    return _wrap(call, render_task(task, call.dialect, history_length=history_length))


def cancel_task(call: Call) -> dict[str, Any]:
    task = services.cancel_task(sender=call.sender, task_id=task_id_param(call.params))
    return _wrap(call, render_task(task, call.dialect))


@dataclass(frozen=True)
class ListFilters:
    """The filters and paging of a ListTasks request, validated."""

    states: list[str] | None
    awaiting: str | None  # `unread` / `blocked` (messaging/lifecycle.py)
    status_after: datetime | None
    page_size: int
    page_token: str
    history_length: int | None
    include_artifacts: bool


def list_filters(params: dict[str, Any], *, include_artifacts_default: bool) -> ListFilters:
    status = params.get("status")
    states, awaiting = None, None
    if status not in (None, "", "TASK_STATE_UNSPECIFIED"):
        states, awaiting = parse_status_filter(status)
    # `since` is the old broker's name for the same filter (its CLI's `poll --since`).
    after = params.get("statusTimestampAfter", params.get("since"))
    status_after = None
    if after is not None:
        try:
            status_after = datetime.fromisoformat(str(after).replace("Z", "+00:00"))
            if status_after.tzinfo is not None:
                status_after = status_after.astimezone(UTC)
        except (ValueError, OverflowError):
            raise InvalidRequest(
                "statusTimestampAfter must be an RFC 3339 timestamp.",
                details={"field": "statusTimestampAfter"},
            ) from None
        if status_after.tzinfo is None:
            raise InvalidRequest(
                "statusTimestampAfter needs a time zone (e.g. Z).",
                details={"field": "statusTimestampAfter"},
            )
    page_size = int_param(params, "pageSize", low=1, high=100, default=50)
    history_length = int_param(params, "historyLength", low=0, high=10_000, default=None)
    include_artifacts = params.get("includeArtifacts", include_artifacts_default)
    if not isinstance(include_artifacts, bool):
        raise InvalidRequest(
            "includeArtifacts must be a boolean.", details={"field": "includeArtifacts"}
        )
    page_token = params.get("pageToken") or ""
    if not isinstance(page_token, str):
        raise InvalidRequest("pageToken must be a string.", details={"field": "pageToken"})
    return ListFilters(
        states=states,
        awaiting=awaiting,
        status_after=status_after,
        page_size=page_size or 50,
        page_token=page_token,
        history_length=history_length,
        include_artifacts=include_artifacts,
    )


def page_result(page, filters, render) -> dict[str, Any]:
    """A ListTasks result: one page of tasks, each rendered by `render(task, **options)`."""
    return {
        "tasks": [
            render(
                task,
                history_length=filters.history_length,
                include_artifacts=filters.include_artifacts,
            )
            for task in page.tasks
        ],
        "nextPageToken": page.next_page_token,
        "pageSize": filters.page_size,
        "totalSize": page.total_size,
    }


def list_tasks(call: Call) -> dict[str, Any]:
    params = call.params
    metadata = params.get("metadata") or {}
    box = metadata.get("box", "inbox") if isinstance(metadata, dict) else "inbox"
    if box not in ("inbox", "outbox"):
        raise InvalidRequest(
            "metadata.box must be 'inbox' or 'outbox'.", details={"field": "metadata.box"}
        )
    me = str(call.sender.agent.id) if call.sender.agent else call.sender.caller_id
    context_id = params.get("contextId")
    # The credentials say whose inbox it is; a contextId, when given, must agree with them.
    if box == "inbox" and context_id is not None and context_id != me:
        raise InvalidRequest(
            "contextId, when given, must be your own agent id.", details={"field": "contextId"}
        )
    if context_id is not None and not isinstance(context_id, str):
        raise InvalidRequest("contextId must be a string.", details={"field": "contextId"})
    filters = list_filters(params, include_artifacts_default=True)
    page = selectors.list_tasks(
        sender=call.sender,
        box=box,
        peer_id=context_id if box == "outbox" else None,
        states=filters.states,
        awaiting=filters.awaiting,
        status_after=filters.status_after,
        page_size=filters.page_size,
        page_token=filters.page_token,
    )
    return page_result(
        page, filters, lambda task, **options: render_task(task, call.dialect, **options)
    )


# The broker endpoint's methods, by both names (messaging/a2a/jsonrpc.py). The streaming
# methods (SendStreamingMessage, SubscribeToTask) are not here: they answer with a stream,
# see messaging/stream/a2a.py.
METHODS: dict[str, Callable[[Call], Any]] = method_table(
    {
        "SendMessage": send_message,
        "GetTask": get_task,
        "ListTasks": list_tasks,
        "CancelTask": cancel_task,
        **PUSH_METHODS,  # messaging/a2a/push.py
    }
)
