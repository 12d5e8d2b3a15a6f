"""The A2A JSON-RPC methods in the OpenAPI document (`/api/schema/`, shown at `/api/docs/`).

JSON-RPC is one endpoint, `POST /a2a/`, whatever the method, and an OpenAPI path has one POST.
Each method is therefore documented under its own path key `/a2a/#<Method>`: the fragment
keeps the keys apart, and a client (Swagger UI's "Try it out" included) drops it, so the
request still goes to `POST /a2a/`. The wire is A2A 1.0 ProtoJSON with `A2A-Version: 1.0`
(docs/PROTOCOL.md §4); without the header the broker speaks the 0.3 dialect (docs/COMPAT.md).

`add_json_rpc_methods` is a drf-spectacular postprocessing hook (settings.SPECTACULAR_SETTINGS).
"""

from __future__ import annotations

from typing import Any

from .. import lifecycle
from .wire import STATE_V1

RPC_PATH = "/a2a/"
TAG = "A2A JSON-RPC"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Any], *, required: tuple[str, ...] = (), **extra: Any):
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    return schema


STATE_NAMES = list(STATE_V1.values())
HUMAN_STATE_NAMES = list(lifecycle.BY_NAME)
# The verbs in the lifecycle table's order (docs/PROTOCOL.md §4.4).
ACTIONS = [str(action) for action in lifecycle.TRANSITIONS if action in lifecycle.ACTIONS]

COMPONENTS: dict[str, Any] = {
    "A2APart": _object(
        {
            "text": {"type": "string"},
            "data": {"description": "Any JSON value."},
            "raw": {"type": "string", "format": "byte", "description": "A file, base64."},
            "url": {"type": "string", "format": "uri"},
            "filename": {"type": "string"},
            "mediaType": {"type": "string", "example": "text/plain"},
            "metadata": {"type": "object"},
        },
        description="One part: exactly one of text, data, raw or url (A2A 1.0, no `kind`).",
    ),
    "A2AMessage": _object(
        {
            "messageId": {
                "type": "string",
                "description": "Chosen by the sender; the idempotency key of a send.",
            },
            "role": {"type": "string", "enum": ["ROLE_USER", "ROLE_AGENT"]},
            "parts": {"type": "array", "items": _ref("A2APart"), "minItems": 1},
            "taskId": {
                "type": "string",
                "description": "A follow-up on an existing task (a lifecycle verb).",
            },
            "referenceTaskIds": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The task this new message answers (its thread).",
            },
            "metadata": _object(
                {
                    "destination": {
                        "type": "string",
                        "description": "A new message's recipient: an agent id, an agent "
                        "name of the caller's tenant, or `*` (broadcast).",
                    },
                    "action": {
                        "type": "string",
                        "enum": ACTIONS,
                        "description": "A follow-up's verb (default `ack`).",
                    },
                    "sensitivity": {
                        "type": "string",
                        "enum": ["public-safe", "internal", "restricted"],
                    },
                }
            ),
        },
        required=("messageId", "role", "parts"),
    ),
    "A2ATask": _object(
        {
            "id": {"type": "string", "format": "uuid"},
            "contextId": {"type": "string", "description": "The recipient's agent id."},
            "status": _object(
                {
                    "state": {"type": "string", "enum": STATE_NAMES},
                    "timestamp": {"type": "string", "format": "date-time"},
                    "message": _ref("A2AMessage"),
                }
            ),
            "history": {"type": "array", "items": _ref("A2AMessage")},
            "artifacts": {
                "type": "array",
                "items": _object(
                    {
                        "artifactId": {"type": "string"},
                        "name": {"type": "string"},
                        "parts": {"type": "array", "items": _ref("A2APart")},
                    }
                ),
            },
            "metadata": _object(
                {
                    "type": {
                        "type": "string",
                        "enum": ["unicast", "broadcast", "broadcast_summary"],
                    },
                    "awaiting": {
                        "type": "string",
                        "enum": ["recipient", "sender", ""],
                        "description": "Whose turn an INPUT_REQUIRED task is: `recipient` "
                        "(unread) or `sender` (blocked).",
                    },
                    "fromAgentId": {"type": "string"},
                    "fromAgentName": {"type": "string"},
                    "toAgentId": {"type": "string"},
                }
            ),
        },
        required=("id", "contextId", "status"),
    ),
    "A2AJsonRpcError": _object(
        {
            "jsonrpc": {"type": "string", "enum": ["2.0"]},
            "id": {"nullable": True},
            "error": _object(
                {
                    "code": {
                        "type": "integer",
                        "description": "-32602 invalid params, -32001 task not found, -32002 "
                        "not cancelable, -32004 not allowed in this state, -32000 "
                        "unauthenticated, -32029 rate limited, -32603 internal/unavailable.",
                    },
                    "message": {"type": "string"},
                    "data": {},
                },
                required=("code", "message"),
            ),
        },
        required=("jsonrpc", "error"),
    ),
    "A2APushConfig": _object(
        {
            "taskId": {"type": "string"},
            "id": {"type": "string"},
            "url": {"type": "string", "format": "uri"},
            "token": {"type": "string"},
        },
        description="A webhook for one task (docs/WEBHOOKS.md).",
    ),
}

_PAGE = {
    "pageSize": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
    "pageToken": {"type": "string", "description": "`nextPageToken` of the previous page."},
}
_TASKS_PAGE = _object(
    {
        "tasks": {"type": "array", "items": _ref("A2ATask")},
        "nextPageToken": {"type": "string"},
        "pageSize": {"type": "integer"},
        "totalSize": {"type": "integer"},
    }
)


def _method(
    summary: str, description: str, params: dict[str, Any], result: dict[str, Any], example: Any
):
    return {
        "summary": summary,
        "description": description,
        "params": params,
        "result": result,
        "example": example,
    }


_TASK_ID = _object(
    {"id": {"type": "string"}, "historyLength": {"type": "integer"}}, required=("id",)
)

# Every method of messaging.a2a.methods.METHODS by its A2A 1.0 name (the 0.3 names, e.g.
# `message/send`, take the same params in the 0.3 shapes); tests check none is missing.
METHOD_DOCS: dict[str, dict[str, Any]] = {
    "SendMessage": _method(
        "Send a message, or act on a task",
        "A new message (`metadata.destination`: an agent id or name, or `*` to broadcast) "
        "becomes an unread task in the recipient's inbox; the result is that task, or a "
        "broadcast's summary. With `message.taskId` it is a lifecycle verb on an existing "
        "task (`metadata.action`: ack, accept, complete, reject, fail, block, reply, comment) "
        "and the result is the task acted on.",
        _object(
            {
                "message": _ref("A2AMessage"),
                "configuration": _object(
                    {
                        "historyLength": {"type": "integer", "minimum": 0},
                        "taskPushNotificationConfig": _ref("A2APushConfig"),
                    }
                ),
            },
            required=("message",),
        ),
        _object({"task": _ref("A2ATask")}),
        {
            "message": {
                "messageId": "hello-1",
                "role": "ROLE_USER",
                "parts": [{"text": "please review PR 12"}],
                "metadata": {"destination": "bob"},
            }
        },
    ),
    "GetTask": _method(
        "Read one task",
        "A task the caller sent or received; anything else is -32001.",
        _TASK_ID,
        _ref("A2ATask"),
        {"id": "<task id>"},
    ),
    "ListTasks": _method(
        "List the inbox or the outbox",
        "The caller's inbox (tasks delivered to it), or with `metadata.box = outbox` the tasks "
        "it sent (`contextId` then filters by recipient). Newest status change first. The "
        "credentials say whose inbox it is: `contextId` is optional there and, when given, "
        "must be the caller's own id. `status` takes a wire state or a human name "
        "(README, Task states).",
        _object(
            {
                "contextId": {"type": "string"},
                "status": {
                    "oneOf": [
                        {"type": "string", "enum": STATE_NAMES + HUMAN_STATE_NAMES},
                        {"type": "array", "items": {"type": "string"}},
                    ]
                },
                "statusTimestampAfter": {"type": "string", "format": "date-time"},
                "historyLength": {"type": "integer", "minimum": 0},
                "includeArtifacts": {"type": "boolean", "default": True},
                "metadata": _object({"box": {"type": "string", "enum": ["inbox", "outbox"]}}),
                **_PAGE,
            }
        ),
        _TASKS_PAGE,
        {"status": "unread"},
    ),
    "CancelTask": _method(
        "Retract a message",
        "The sender cancels a task that is still unread (-32002 otherwise).",
        _object({"id": {"type": "string"}}, required=("id",)),
        _ref("A2ATask"),
        {"id": "<task id>"},
    ),
    "SendStreamingMessage": _method(
        "Send and follow the task (SSE)",
        "As SendMessage, answered with `text/event-stream`: the task, then a status update per "
        "change until the task is completed, rejected, failed or canceled. Each `data:` line "
        "is a JSON-RPC response with the request's id.",
        _object({"message": _ref("A2AMessage")}, required=("message",)),
        _object({"task": _ref("A2ATask"), "statusUpdate": {"type": "object"}}),
        {
            "message": {
                "messageId": "hello-2",
                "role": "ROLE_USER",
                "parts": [{"text": "build it"}],
                "metadata": {"destination": "bob"},
            }
        },
    ),
    "SubscribeToTask": _method(
        "Follow a task (SSE)",
        "The updates of one live task the caller sent or received, as SendStreamingMessage.",
        _object({"id": {"type": "string"}}, required=("id",)),
        _object({"task": _ref("A2ATask"), "statusUpdate": {"type": "object"}}),
        {"id": "<task id>"},
    ),
    "CreateTaskPushNotificationConfig": _method(
        "Attach a webhook to a task",
        "Events of the task are POSTed to `url`, signed (docs/WEBHOOKS.md).",
        _ref("A2APushConfig"),
        _ref("A2APushConfig"),
        {"taskId": "<task id>", "url": "https://example.com/hook"},
    ),
    "GetTaskPushNotificationConfig": _method(
        "Read a task's webhook",
        "One push config of a task of the caller's.",
        _object({"taskId": {"type": "string"}, "id": {"type": "string"}}, required=("taskId",)),
        _ref("A2APushConfig"),
        {"taskId": "<task id>", "id": "<config id>"},
    ),
    "ListTaskPushNotificationConfigs": _method(
        "List a task's webhooks",
        "The push configs of a task of the caller's.",
        _object({"taskId": {"type": "string"}, **_PAGE}, required=("taskId",)),
        _object(
            {
                "configs": {"type": "array", "items": _ref("A2APushConfig")},
                "nextPageToken": {"type": "string"},
            }
        ),
        {"taskId": "<task id>"},
    ),
    "DeleteTaskPushNotificationConfig": _method(
        "Remove a task's webhook",
        "Deletes one push config; the result is empty.",
        _object(
            {"taskId": {"type": "string"}, "id": {"type": "string"}}, required=("taskId", "id")
        ),
        {"type": "object", "nullable": True},
        {"taskId": "<task id>", "id": "<config id>"},
    ),
}


def _operation(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    request = _object(
        {
            "jsonrpc": {"type": "string", "enum": ["2.0"]},
            "id": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "method": {"type": "string", "enum": [name]},
            "params": doc["params"],
        },
        required=("jsonrpc", "id", "method", "params"),
    )
    response = {
        "oneOf": [
            _object(
                {
                    "jsonrpc": {"type": "string", "enum": ["2.0"]},
                    "id": {},
                    "result": doc["result"],
                },
                required=("jsonrpc", "result"),
            ),
            _ref("A2AJsonRpcError"),
        ]
    }
    streaming = name in ("SendStreamingMessage", "SubscribeToTask")
    content_type = "text/event-stream" if streaming else "application/json"
    return {
        "post": {
            "operationId": f"a2a_{name}",
            "summary": f"{name}: {doc['summary']}",
            "description": doc["description"]
            + "\n\nErrors are JSON-RPC error objects in an HTTP 200 answer (401 for bad "
            "credentials, 429 when rate limited).",
            "tags": [TAG],
            "parameters": [
                {
                    "name": "A2A-Version",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "default": "1.0"},
                    "description": "1.0 for the A2A 1.0 wire; absent, the 0.3 dialect.",
                }
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": request,
                        "example": {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": name,
                            "params": doc["example"],
                        },
                    }
                },
            },
            "responses": {
                "200": {
                    "description": "A JSON-RPC response.",
                    "content": {content_type: {"schema": response}},
                },
                "401": {
                    "description": "Missing or invalid credentials.",
                    "content": {"application/json": {"schema": _ref("A2AJsonRpcError")}},
                },
            },
        }
    }


def add_json_rpc_methods(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: document every JSON-RPC method."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    for name, doc in METHOD_DOCS.items():
        result.setdefault("paths", {})[f"{RPC_PATH}#{name}"] = _operation(name, doc)
    tags = result.setdefault("tags", [])
    tags.append(
        {
            "name": TAG,
            "description": "Messaging: every method is `POST /a2a/` with a JSON-RPC 2.0 body "
            "and `A2A-Version: 1.0` (docs/PROTOCOL.md §4). Each is listed under "
            "`/a2a/#<Method>`; the fragment only names it.",
        }
    )
    return result
