"""Every agent an A2A peer: the JSON-RPC endpoint `POST /a2a/agents/<agent_id>/`
(DESIGN.md §8, docs/PEERS.md).

A standard A2A 1.0 client talks to one agent here as if the agent ran its own server. The
broker puts the caller's messages in the agent's inbox with the caller recorded as sender,
and the agent works them through the lifecycle of DESIGN.md §4.4 from its inbox and stream.
This endpoint is the caller's side of that conversation:

- `SendMessage` without `taskId` creates a task for the agent; with `taskId` it is a follow-up
  on one of the caller's tasks: `reply` when the agent asked a question (the task waits for
  the sender), `comment` otherwise (or `message.metadata.action`).
- A blocking send (A2A 1.0's default; `configuration.returnImmediately` false) waits, bounded
  by HIKYAKU_BLOCKING_TIMEOUT_SECONDS, until the agent has answered (messaging/waiting.py).
  When the agent completed the task with `metadata.replyAs = "message"`, the result is that
  reply as an A2A `Message` instead of the task.
- `GetTask`, `ListTasks`, `CancelTask` see only the caller's own tasks with this agent.
- Tasks are shown the way A2A means them: an unread task is SUBMITTED (INPUT_REQUIRED means
  the agent asked the caller something), and only the agent's result artifacts are listed.

Unlike the broker endpoint, messageId is not an idempotency key here (A2A does not make it
one and its conformance kit reuses ids for different sends).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.types import Message
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.csrf import csrf_exempt
from google.protobuf.json_format import ParseDict

from agents import cards
from agents import selectors as agent_selectors
from agents.auth import (
    authenticate_peer_caller,
    authenticate_tenant,
    client_address,
    has_credential,
)
from agents.models import Agent
from hikyaku.errors import (
    AgentNotFound,
    HikyakuError,
    InvalidRequest,
    TaskNotFound,
    Unauthenticated,
    UnsupportedOperation,
)

from .. import selectors, services, waiting
from ..models import Task, TaskState
from ..services import Sender
from . import errors
from .methods import _int_param, list_filters, page_result
from .push import PUSH_METHODS
from .views import _json, error_reply, not_post, parse_envelope, result_reply
from .wire import Dialect, dialect_for, parse_message, task_v03, task_v1

SUBMITTED = "TASK_STATE_SUBMITTED"


class ContentTypeNotSupported(HikyakuError):
    """The agent does not accept this media type."""

    code, status = "CONTENT_TYPE_NOT_SUPPORTED", 415
    rpc_code, rpc_reason = -32005, "CONTENT_TYPE_NOT_SUPPORTED"


@dataclass(frozen=True)
class PeerCall:
    agent: Agent  # the agent whose endpoint this is
    sender: Sender  # the caller, as the services know it
    dialect: Dialect
    params: dict[str, Any]


# Rendering: the caller's view of a task ---------------------------------------------------


def context_id(task: Task) -> str:
    """The A2A contextId the caller sees: the one its first message named, else the
    broker's (the agent's id)."""
    return (task.message or {}).get("contextId") or task.context_id


def render_task(
    task: Task, dialect: Dialect, *, history_length: int | None = None, **options: Any
) -> dict[str, Any]:
    body = task_v1(task, history_length=history_length, **options)
    if task.state == TaskState.INPUT_REQUIRED and task.awaiting == Task.Awaiting.RECIPIENT:
        body["status"]["state"] = SUBMITTED
    # The broker's compat copy of the caller's own message is not a result of the agent.
    artifacts = [
        a for i, a in enumerate(body.pop("artifacts", [])) if i or a.get("name") != "message"
    ]
    if artifacts:
        body["artifacts"] = artifacts
    conversation = context_id(task)
    body["contextId"] = conversation
    for message in body.get("history", []):
        message["contextId"] = conversation
    return body if dialect is Dialect.V1_0 else task_v03(body)


def message_reply(task: Task) -> dict[str, Any] | None:
    """The agent's answer as an A2A Message, when it completed the task with
    `metadata.replyAs = "message"` (a message-only reply)."""
    if task.state != TaskState.COMPLETED or not task.history:
        return None
    last = task.history[-1]
    if last.get("role") != "ROLE_AGENT" or (last.get("metadata") or {}).get("replyAs") != "message":
        return None
    return {**last, "taskId": str(task.id), "contextId": context_id(task)}


def render_message(message: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    if dialect is Dialect.V1_0:
        return message
    return conversions.to_compat_message(ParseDict(message, Message())).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


# Parameters -------------------------------------------------------------------------------

_SNAKE = re.compile(r"_([a-z])")


def _camel(params: dict[str, Any]) -> dict[str, Any]:
    """Accept proto field names (`context_id`) as well as their JSON names (`contextId`), as
    ProtoJSON parsers do."""
    return {_SNAKE.sub(lambda m: m.group(1).upper(), k): v for k, v in params.items()}


def _configuration(params: dict[str, Any]) -> dict[str, Any]:
    config = params.get("configuration") or {}
    if not isinstance(config, dict):
        raise InvalidRequest("configuration must be an object.", details={"field": "configuration"})
    return _camel(config)


def _blocking(config: dict[str, Any], dialect: Dialect) -> bool:
    """A2A 1.0 blocks unless `returnImmediately`; the 0.3 dialect only with `blocking`."""
    name = "returnImmediately" if dialect is Dialect.V1_0 else "blocking"
    value = config.get(name, False)
    if not isinstance(value, bool):
        raise InvalidRequest(
            f"configuration.{name} must be a boolean.", details={"field": f"configuration.{name}"}
        )
    return not value if dialect is Dialect.V1_0 else value


def _task_id(params: dict[str, Any]) -> str:
    task_id = params.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise InvalidRequest("params.id (the task id) is required.", details={"field": "id"})
    return task_id


def _own_task(call: PeerCall, task_id: str) -> Task:
    """A task the caller sent to this agent; anything else is "not found"."""
    task = selectors.party_task(sender=call.sender, task_id=task_id)
    if task.recipient_id != call.agent.id or "sender" not in services.party_roles(
        call.sender, task
    ):
        raise TaskNotFound(f"Task not found: {task_id}")
    return task


def _check_media_types(agent: Agent, message: dict[str, Any]) -> None:
    modes = cards.input_modes(agent)
    for index, part in enumerate(message.get("parts") or []):
        media_type = part.get("mediaType") or (
            "text/plain" if "text" in part else "application/json" if "data" in part else ""
        )
        if media_type and not cards.accepts_media_type(modes, media_type):
            raise ContentTypeNotSupported(
                f"message.parts[{index}]: {media_type} is not accepted by this agent "
                f"(accepted: {', '.join(modes)}).",
                details={"field": f"message.parts[{index}].mediaType"},
            )


# Methods ----------------------------------------------------------------------------------


def send_message(call: PeerCall) -> dict[str, Any]:
    message = parse_message(call.params.get("message"), call.dialect, ignore_unknown_fields=True)
    services.check_limits(message)
    _check_media_types(call.agent, message)
    config = _configuration(call.params)
    history_length = _int_param(config, "historyLength", low=0, high=10_000, default=None)
    blocking = _blocking(config, call.dialect)
    destination = (message.get("metadata") or {}).get("destination")
    if destination not in (None, "", str(call.agent.id)):
        raise InvalidRequest(
            "message.metadata.destination must be empty here: this endpoint is one agent's.",
            details={"field": "message.metadata.destination"},
        )
    if message.get("taskId"):
        task = _follow_up(call, message)
    else:
        task = services.deliver_unicast(
            sender=call.sender, message=message, to=str(call.agent.id), idempotent=False
        )
    if blocking:
        task = waiting.await_answer(task)
    reply = message_reply(task)
    if reply is not None:
        return {"message": render_message(reply, call.dialect)}
    return {"task": render_task(task, call.dialect, history_length=history_length)}


def _follow_up(call: PeerCall, message: dict[str, Any]) -> Task:
    """The caller's next message on its task: the answer to the agent's question (`reply`)
    when the task waits for it, otherwise a `comment`, unless `metadata.action` says."""
    task = _own_task(call, message["taskId"])
    given = message.get("contextId")
    if given and given not in (context_id(task), task.context_id):
        raise InvalidRequest(
            f"message.contextId {given!r} is not the context of task {task.id} "
            f"({context_id(task)!r}).",
            details={"field": "message.contextId"},
        )
    action = (message.get("metadata") or {}).get("action")
    if not action:
        waits_for_caller = (
            task.state == TaskState.INPUT_REQUIRED and task.awaiting == Task.Awaiting.SENDER
        )
        action = services.Kind.REPLY if waits_for_caller else services.Kind.COMMENT
    return services.act_on_task(
        sender=call.sender, task_id=str(task.id), action=action, message=message
    )


def get_task(call: PeerCall) -> dict[str, Any]:
    task = _own_task(call, _task_id(call.params))
    history_length = _int_param(call.params, "historyLength", low=0, high=10_000, default=None)
    body = render_task(task, call.dialect, history_length=history_length)
    return body if call.dialect is Dialect.V1_0 else {"task": body}


def cancel_task(call: PeerCall) -> dict[str, Any]:
    task = _own_task(call, _task_id(call.params))
    task = services.cancel_task(sender=call.sender, task_id=str(task.id), while_live=True)
    body = render_task(task, call.dialect)
    return body if call.dialect is Dialect.V1_0 else {"task": body}


# In the caller's view an unread task is SUBMITTED and INPUT_REQUIRED means "waiting for you".
_PEER_STATES = {
    SUBMITTED: (TaskState.INPUT_REQUIRED, Task.Awaiting.RECIPIENT),
    "submitted": (TaskState.INPUT_REQUIRED, Task.Awaiting.RECIPIENT),
    "TASK_STATE_INPUT_REQUIRED": (TaskState.INPUT_REQUIRED, Task.Awaiting.SENDER),
    "input-required": (TaskState.INPUT_REQUIRED, Task.Awaiting.SENDER),
}


def list_tasks(call: PeerCall) -> dict[str, Any]:
    """The caller's tasks with this agent, newest status change first. `contextId` keeps one
    conversation (the agent's id, the default context, keeps them all)."""
    params = call.params
    awaiting = None
    status = params.get("status")
    if isinstance(status, str) and status in _PEER_STATES:
        state, awaiting = _PEER_STATES[status]
        params = {**params, "status": state.value}
    # A2A 1.0: artifacts only when asked for.
    filters = list_filters(params, include_artifacts_default=False)
    conversation = params.get("contextId")
    if conversation is not None and not isinstance(conversation, str):
        raise InvalidRequest("contextId must be a string.", details={"field": "contextId"})
    page = selectors.list_tasks(
        sender=call.sender,
        box="outbox",
        peer_id=str(call.agent.id),
        states=filters.states,
        awaiting=awaiting,
        context_id=conversation if conversation and conversation != str(call.agent.id) else None,
        status_after=filters.status_after,
        page_size=filters.page_size,
        page_token=filters.page_token,
    )
    return page_result(
        page, filters, lambda task, **options: render_task(task, call.dialect, **options)
    )


def streaming_not_here(call: PeerCall) -> dict[str, Any]:
    raise UnsupportedOperation("Streaming is not available on this endpoint yet.")


class PushNotSupported(UnsupportedOperation):
    """Push notifications are not supported on an agent's own endpoint (its card says so)."""

    rpc_code, rpc_reason = -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED"


def push_not_supported(call: PeerCall) -> dict[str, Any]:
    raise PushNotSupported()


def no_extended_card(call: PeerCall) -> dict[str, Any]:
    raise UnsupportedOperation("This agent has no extended agent card.")


PEER_METHODS: dict[str, Callable[[PeerCall], dict[str, Any]]] = {
    "SendMessage": send_message,
    "message/send": send_message,
    "GetTask": get_task,
    "tasks/get": get_task,
    "ListTasks": list_tasks,
    "tasks/list": list_tasks,
    "CancelTask": cancel_task,
    "tasks/cancel": cancel_task,
    "SendStreamingMessage": streaming_not_here,
    "message/stream": streaming_not_here,
    "SubscribeToTask": streaming_not_here,
    "tasks/resubscribe": streaming_not_here,
    **dict.fromkeys(PUSH_METHODS, push_not_supported),
    "GetExtendedAgentCard": no_extended_card,
    "agent/getAuthenticatedExtendedCard": no_extended_card,
}


# The view ---------------------------------------------------------------------------------


def _is_json(content_type: str) -> bool:
    essence = content_type.split(";", 1)[0].strip().lower()
    return essence in ("", "application/json") or essence.endswith("+json")


def _callee(request: HttpRequest, agent_id: str) -> Agent:
    """The agent whose endpoint this is. An unknown one is 401 without credentials (so that
    it looks like a private agent) and 404 with valid ones."""
    agent = agent_selectors.peer_agent(agent_id=agent_id)
    if agent is None:
        authorization = request.headers.get("Authorization")
        if not has_credential(authorization):
            raise Unauthenticated("Send 'Authorization: Bearer <api key or agent token>'.")
        authenticate_tenant(authorization=authorization, agent_id=request.headers.get("X-Agent-Id"))
        raise AgentNotFound(f"Agent not found: {agent_id}")
    return agent


@csrf_exempt
def agent_jsonrpc(request: HttpRequest, agent_id: str) -> HttpResponse:
    if request.method in ("GET", "HEAD"):
        return HttpResponseRedirect(f"/a2a/agents/{agent_id}/.well-known/agent-card.json")
    if request.method != "POST":
        return not_post(request)
    if not _is_json(request.content_type or ""):
        error = ContentTypeNotSupported("Send JSON-RPC requests as application/json.")
        return _json(errors.response(None, errors.from_domain(error)))
    envelope = parse_envelope(request)
    if isinstance(envelope, HttpResponse):
        return envelope
    request_id, method = envelope.request_id, envelope.method
    try:
        dialect = dialect_for(request.headers.get("A2A-Version"))
        agent = _callee(request, agent_id)
        caller = authenticate_peer_caller(
            callee=agent,
            authorization=request.headers.get("Authorization"),
            agent_id=request.headers.get("X-Agent-Id"),
            address=client_address(request.META),
        )
        request.hikyaku_log = {
            "tenant_id": str(agent.tenant_id),
            "agent_id": str(agent.id),
            "caller": str(caller.agent.id) if caller.agent else caller.caller_id,
            "rpc_method": method,
        }
        handler = PEER_METHODS.get(method)
        if handler is None:
            return _json(
                errors.response(
                    request_id,
                    errors.error_object(errors.METHOD_NOT_FOUND, f"Method not found: {method}"),
                )
            )
        sender = Sender(tenant=agent.tenant, agent=caller.agent, caller_id=caller.caller_id)
        result = handler(
            PeerCall(agent=agent, sender=sender, dialect=dialect, params=_camel(envelope.params))
        )
    except AgentNotFound as exc:
        error = errors.error_object(errors.INVALID_REQUEST, exc.message)
        return _json(errors.response(request_id, error), status=404)
    except (HikyakuError, DatabaseError) as exc:
        return error_reply(request_id, exc, method)
    return result_reply(request_id, result)
