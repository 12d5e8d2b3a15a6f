"""Every agent an A2A peer: the JSON-RPC endpoint `POST /a2a/agents/<agent_id>/`
(docs/PROTOCOL.md §8, docs/PEERS.md).

A standard A2A 1.0 client talks to one agent here as if the agent ran its own server. The
broker puts the caller's messages in the agent's inbox with the caller recorded as sender,
and the agent works them through the lifecycle of docs/PROTOCOL.md §4.4 from its inbox and stream.
This endpoint is the caller's side of that conversation:

- `SendMessage` without `taskId` creates a task for the agent; with `taskId` it is a follow-up
  on one of the caller's tasks: `reply` when the agent asked a question (the task waits for
  the sender), `comment` otherwise (or `message.metadata.action`).
- A blocking send (A2A 1.0's default; `configuration.returnImmediately` false) waits, bounded
  by HIKYAKU_BLOCKING_TIMEOUT_SECONDS, until the agent has answered. Only the stream
  processes wait (messaging/stream/answers.py, on the hub: no thread per wait); this view
  hands such a send to them before doing anything (`waits_for_answer`,
  messaging/stream/handoff.py). When the agent completed the task with
  `metadata.replyAs = "message"`, the result is that reply as an A2A `Message` instead of
  the task.
- `GetTask`, `ListTasks`, `CancelTask`, the push notification config methods and the
  streams (`SendStreamingMessage`, `SubscribeToTask`: messaging/stream/peer.py, routed there
  by hikyaku.asgi) see only the caller's own tasks with this agent.
- Tasks are shown the way A2A means them (messaging/a2a/peer_view.py): an unread task is
  SUBMITTED (INPUT_REQUIRED means the agent asked the caller something), and only the
  agent's result artifacts are listed.

Unlike the broker endpoint, messageId is not an idempotency key here (A2A does not make it
one and its conformance kit reuses ids for different sends).

This module holds the methods and how a call is opened (`open_call`); the view is
messaging/a2a/views.py, the stream handler messaging/stream/peer.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents import cards
from agents import selectors as agent_selectors
from agents.auth import (
    AgentIdentity,
    authenticate_peer_caller,
    authenticate_tenant,
    has_credential,
    not_public,
)
from agents.models import Agent
from hikyaku.errors import (
    AgentNotFound,
    HikyakuError,
    InvalidRequest,
    TaskNotFound,
    UnsupportedOperation,
)

from .. import lifecycle, messages, selectors, services
from ..models import Task
from ..parties import Sender, party_roles
from . import push
from .jsonrpc import Call, method_table
from .methods import int_param, list_filters, page_result, task_id_param
from .peer_view import SUBMITTED, context_id, message_reply, render_message, render_task
from .wire import Dialect, dialect_for, parse_message


class ContentTypeNotSupported(HikyakuError):
    """The agent does not accept this media type."""

    code, status = "CONTENT_TYPE_NOT_SUPPORTED", 415
    rpc_code, rpc_reason = -32005, "CONTENT_TYPE_NOT_SUPPORTED"


def content_type_refused() -> ContentTypeNotSupported:
    """The answer to a request whose Content-Type is not JSON."""
    return ContentTypeNotSupported("Send JSON-RPC requests as application/json.")


class UnknownAgent(HikyakuError):
    """No such agent for this caller: a 404 with -32600 on an agent's endpoint (docs/PEERS.md;
    other tenants' private agents look the same)."""

    code, status = "AGENT_NOT_FOUND", 404
    rpc_code, rpc_reason, rpc_status = -32600, "INVALID_REQUEST", 404


@dataclass(frozen=True)
class PeerCall:
    agent: Agent  # the agent whose endpoint this is
    sender: Sender  # the caller, as the services know it
    dialect: Dialect
    params: dict[str, Any]
    # The caller's agent identity when it is one of the callee tenant's agents: open streams
    # re-check it like the agent's own streams.
    identity: AgentIdentity | None = None


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


def _own_task(call: PeerCall, task_id: str) -> Task:
    """A task the caller sent to this agent; anything else is "not found"."""
    task = selectors.party_task(sender=call.sender, task_id=task_id)
    if task.recipient_id != call.agent.id or "sender" not in party_roles(call.sender, task):
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


@dataclass(frozen=True)
class Delivered:
    """What a SendMessage did, before any waiting."""

    task: Task
    history_length: int | None
    blocking: bool


def deliver(call: PeerCall) -> Delivered:
    """The send part of SendMessage and SendStreamingMessage: every parameter is checked
    first (an error after the send committed would report a delivered message as failed),
    then the task is created or followed up, and a push config sent along is attached."""
    message = parse_message(call.params.get("message"), call.dialect, ignore_unknown_fields=True)
    messages.check_limits(message)
    _check_media_types(call.agent, message)
    config = _configuration(call.params)
    history_length = int_param(config, "historyLength", low=0, high=10_000, default=None)
    blocking = _blocking(config, call.dialect)
    push_call = _broker_call(call, {"configuration": config})
    push_config = push.config_in_send(push_call)
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
    if push_config is not None:
        push.attach_to_sent_task(push_call, task, push_config, payload=PUSH_PAYLOADS[call.dialect])
    return Delivered(task=task, history_length=history_length, blocking=blocking)


SEND_METHODS = ("SendMessage", "message/send")


def waits_for_answer(method: str, params: dict[str, Any], version: str | None) -> bool:
    """Whether this call is a SendMessage that would wait for the agent's answer (blocking,
    with a timeout above zero). Decided from the request alone, before anything is written.
    A malformed configuration or version is False: the ordinary path answers its error."""
    if method not in SEND_METHODS or settings.HIKYAKU_BLOCKING_TIMEOUT_SECONDS <= 0:
        return False
    try:
        return _blocking(_configuration(_camel(params)), dialect_for(version))
    except HikyakuError:
        return False


def send_result(call: PeerCall, task: Task, history_length: int | None) -> dict[str, Any]:
    """SendMessage's result: the agent's message-only reply, else the task."""
    reply = message_reply(task)
    if reply is not None:
        return {"message": render_message(reply, call.dialect)}
    return {"task": render_task(task, call.dialect, history_length=history_length)}


def send_message(call: PeerCall) -> dict[str, Any]:
    """A SendMessage that does not wait (waiting ones are the stream processes')."""
    sent = deliver(call)
    return send_result(call, sent.task, sent.history_length)


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
        waits_for_caller = lifecycle.phase_of(task.state, task.awaiting) is lifecycle.BLOCKED
        action = lifecycle.EventKind.REPLY if waits_for_caller else lifecycle.EventKind.COMMENT
    return services.act_on_task(
        sender=call.sender, task_id=str(task.id), action=action, message=message
    )


def get_task(call: PeerCall) -> dict[str, Any]:
    task = _own_task(call, task_id_param(call.params))
    history_length = int_param(call.params, "historyLength", low=0, high=10_000, default=None)
    body = render_task(task, call.dialect, history_length=history_length)
    return body if call.dialect is Dialect.V1_0 else {"task": body}


def cancel_task(call: PeerCall) -> dict[str, Any]:
    task = _own_task(call, task_id_param(call.params))
    task = services.cancel_task(sender=call.sender, task_id=str(task.id), while_live=True)
    body = render_task(task, call.dialect)
    return body if call.dialect is Dialect.V1_0 else {"task": body}


# In the caller's view an unread task is SUBMITTED and INPUT_REQUIRED means "waiting for you".
_UNREAD, _BLOCKED = lifecycle.UNREAD, lifecycle.BLOCKED
_PEER_STATES = {
    SUBMITTED: (_UNREAD.state, _UNREAD.awaiting),
    "submitted": (_UNREAD.state, _UNREAD.awaiting),
    "TASK_STATE_INPUT_REQUIRED": (_BLOCKED.state, _BLOCKED.awaiting),
    "input-required": (_BLOCKED.state, _BLOCKED.awaiting),
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


def subscribed_task(call: PeerCall) -> Task:
    """SubscribeToTask's task: one of the caller's, not yet terminal."""
    task = _own_task(call, task_id_param(call.params))
    if task.is_terminal:
        raise UnsupportedOperation(
            f"Task {task.pk} is {task.state}: a terminal task has no updates to stream."
        )
    return task


# Push notification configs: the broker's methods (messaging/a2a/push.py), limited to the
# caller's own tasks with this agent. Their notifications show the task in the caller's view.
PUSH_PAYLOADS = {Dialect.V1_0: "peer", Dialect.V0_3: "peer-0.3"}


def _broker_call(call: PeerCall, params: dict[str, Any] | None = None) -> Call:
    return Call(sender=call.sender, dialect=call.dialect, params=call.params | (params or {}))


def _push_method(method: Callable[..., Any]) -> Callable[[PeerCall], Any]:
    def serve(call: PeerCall) -> Any:
        # Both dialects' shapes: `taskId` (1.0, and 0.3's set), else `id` (0.3's others);
        # a missing one is the method's own InvalidRequest.
        params = call.params
        by_id = "taskId" not in params and method is not push.create_config
        task_id = params.get("id") if by_id else params.get("taskId")
        if isinstance(task_id, str) and task_id:
            _own_task(call, task_id)
        if method is push.create_config:
            return push.create_config(_broker_call(call), payload=PUSH_PAYLOADS[call.dialect])
        return method(_broker_call(call))

    return serve


def no_extended_card(call: PeerCall) -> dict[str, Any]:
    raise UnsupportedOperation("This agent has no extended agent card.")


PEER_METHODS: dict[str, Callable[[PeerCall], Any]] = method_table(
    {
        "SendMessage": send_message,
        "GetTask": get_task,
        "ListTasks": list_tasks,
        "CancelTask": cancel_task,
        **{name: _push_method(method) for name, method in push.PUSH_METHODS.items()},
        "GetExtendedAgentCard": no_extended_card,
    }
)
# SendStreamingMessage and SubscribeToTask: messaging/stream/peer.py.


# Opening a call ---------------------------------------------------------------------------------


def is_json(content_type: str) -> bool:
    essence = content_type.split(";", 1)[0].strip().lower()
    return essence in ("", "application/json") or essence.endswith("+json")


def _callee(*, agent_id: str, authorization: str | None, x_agent_id: str | None) -> Agent:
    """The agent whose endpoint this is. An unknown one is the very answer a private agent
    gives without credentials (so that nobody learns which ids exist: docs/PEERS.md), and
    404 with valid credentials."""
    agent = agent_selectors.peer_agent(agent_id=agent_id)
    if agent is None:
        if not has_credential(authorization):
            raise not_public()
        authenticate_tenant(authorization=authorization, agent_id=x_agent_id)
        raise UnknownAgent(f"Agent not found: {agent_id}")
    return agent


def open_call(
    *,
    agent_id: str,
    version: str | None,
    authorization: str | None,
    x_agent_id: str | None,
    address: str,
    params: dict[str, Any],
) -> PeerCall:
    """Who calls which agent, in which dialect (shared by the view and the stream handler).
    Raises UnknownAgent (a 404), Unauthenticated, RateLimited, ..."""
    dialect = dialect_for(version)
    agent = _callee(agent_id=agent_id, authorization=authorization, x_agent_id=x_agent_id)
    try:
        caller = authenticate_peer_caller(
            callee=agent, authorization=authorization, agent_id=x_agent_id, address=address
        )
    except AgentNotFound:
        # Another tenant's private agent: word for word what an unknown id gets.
        raise UnknownAgent(f"Agent not found: {agent_id}") from None
    return PeerCall(
        agent=agent,
        sender=Sender(tenant=agent.tenant, agent=caller.agent, caller_id=caller.caller_id),
        dialect=dialect,
        params=_camel(params),
        identity=caller.identity,
    )
