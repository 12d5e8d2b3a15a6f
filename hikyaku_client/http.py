"""The one HTTP client of the client package: REST registry calls and A2A 1.0 JSON-RPC.

Every request carries `A2A-Version: 1.0`, so the broker answers in the A2A 1.0 dialect
(ProtoJSON camelCase, parts `{"text"}`/`{"data"}`/`{"url"}`/`{"raw"}`, states `TASK_STATE_*`,
`SendMessage` → `{"task": {...}}`, `GetTask`/`CancelTask` → the Task itself).

Identity (DESIGN.md §2) comes from `Credentials`: an agent token (`Bearer hka_…`) or the tenant
key plus `X-Agent-Id`. Sends carry a `messageId` chosen once per call and are retried with the
same id after a transport failure, so a send whose outcome was lost is never delivered twice.
"""

from __future__ import annotations

import asyncio
import base64
import json
import mimetypes
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from . import __version__

DEFAULT_URL = "http://localhost:8000"
A2A_VERSION = "1.0"
RPC_PATH = "/a2a/"
USER_AGENT = f"hikyaku-client/{__version__}"

# Lifecycle verbs of DESIGN.md §4.4, sent as SendMessage with message.taskId and
# message.metadata.action.
ACTIONS = ("ack", "accept", "complete", "reject", "fail", "block", "reply", "comment")

# The states a Hikyaku task can be in (DESIGN.md §4.4).
STATES = (
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
)
TERMINAL_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
)


class HikyakuError(Exception):
    """Anything that went wrong talking to the broker; `str()` is one readable line."""

    def __init__(self, message: str, *, code: str | int | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        return self.message


class ConfigurationError(HikyakuError):
    """A missing or malformed setting (environment variable or option)."""


class ConnectionFailed(HikyakuError):
    """The broker could not be reached; the message names the URL that was tried."""


class AuthenticationFailed(HikyakuError):
    """HTTP 401: the key or token is missing, invalid, revoked or expired."""


class BrokerError(HikyakuError):
    """The broker refused the request (REST error envelope or JSON-RPC error object)."""


def normalize_state(value: str) -> str:
    """`input-required`, `INPUT_REQUIRED`, `completed`, `TASK_STATE_WORKING` → `TASK_STATE_*`."""
    name = value.strip().upper().replace("-", "_").replace("CANCELLED", "CANCELED")
    if not name.startswith("TASK_STATE_"):
        name = f"TASK_STATE_{name}"
    if name not in STATES:
        choices = ", ".join(s.removeprefix("TASK_STATE_").lower().replace("_", "-") for s in STATES)
        raise ConfigurationError(f"Unknown task state {value!r}; use one of: {choices}.")
    return name


# Parts (A2A 1.0 ProtoJSON, no "kind").


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def data_part(data: Any) -> dict[str, Any]:
    return {"data": data}


def url_part(url: str, *, filename: str = "", media_type: str = "") -> dict[str, Any]:
    part: dict[str, Any] = {"url": url}
    if filename:
        part["filename"] = filename
    if media_type:
        part["mediaType"] = media_type
    return part


def file_part(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A file as a `raw` part (base64) with its name and media type."""
    file_path = Path(path)
    try:
        content = file_path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"Cannot read {str(path)!r}: {exc.strerror or exc}.") from None
    media_type = mimetypes.guess_type(file_path.name)[0] or "application/octet-stream"
    return {
        "raw": base64.b64encode(content).decode("ascii"),
        "filename": file_path.name,
        "mediaType": media_type,
    }


def build_parts(
    *,
    text: str | None = None,
    files: list[str] | tuple[str, ...] = (),
    data: Any = None,
    has_data: bool = False,
) -> list[dict[str, Any]]:
    """The message parts for the given text, files and JSON data, in that order."""
    parts: list[dict[str, Any]] = []
    if text:
        parts.append(text_part(text))
    parts.extend(file_part(f) for f in files)
    if has_data or data is not None:
        parts.append(data_part(data))
    return parts


@dataclass(frozen=True)
class Credentials:
    """Where the broker is and who we are. Either credential identifies the agent."""

    url: str = DEFAULT_URL
    api_key: str | None = None
    agent_token: str | None = None
    agent_id: str | None = None

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        agent_id: str | None = None,
        agent_token: str | None = None,
    ) -> Credentials:
        """Read `HIKYAKU_URL`, `HIKYAKU_API_KEY`, `HIKYAKU_AGENT_ID`, `HIKYAKU_AGENT_TOKEN`;
        explicit arguments win over the environment."""
        env = os.environ if environ is None else environ

        def pick(explicit: str | None, name: str) -> str | None:
            value = explicit if explicit else env.get(name, "")
            return value.strip() or None

        return cls(
            url=(pick(url, "HIKYAKU_URL") or DEFAULT_URL).rstrip("/"),
            api_key=pick(api_key, "HIKYAKU_API_KEY"),
            agent_token=pick(agent_token, "HIKYAKU_AGENT_TOKEN"),
            agent_id=pick(agent_id, "HIKYAKU_AGENT_ID"),
        )

    def with_agent(self, *, agent_id: str | None, agent_token: str | None) -> Credentials:
        return replace(self, agent_id=agent_id, agent_token=agent_token)

    @property
    def has_agent_identity(self) -> bool:
        return bool(self.agent_token or (self.api_key and self.agent_id))

    def agent_headers(self) -> dict[str, str]:
        """Headers that authenticate as the agent (DESIGN.md §2)."""
        if self.agent_token:
            headers = {"Authorization": f"Bearer {self.agent_token}"}
            if self.agent_id:
                headers["X-Agent-Id"] = self.agent_id
            return headers
        if not self.api_key:
            raise ConfigurationError(
                "No credentials: set HIKYAKU_AGENT_TOKEN (from `hikyaku register`), "
                "or HIKYAKU_API_KEY together with HIKYAKU_AGENT_ID."
            )
        if not self.agent_id:
            raise ConfigurationError(
                "HIKYAKU_AGENT_ID (or --agent-id) is required with HIKYAKU_API_KEY; "
                "or set HIKYAKU_AGENT_TOKEN."
            )
        return {"Authorization": f"Bearer {self.api_key}", "X-Agent-Id": self.agent_id}

    def key_headers(self, api_key: str | None = None) -> dict[str, str]:
        key = api_key or self.api_key
        if not key:
            raise ConfigurationError(
                "HIKYAKU_API_KEY environment variable is required. "
                "Create an API key in the Hikyaku web UI."
            )
        return {"Authorization": f"Bearer {key}"}

    def require_agent_id(self) -> str:
        if not self.agent_id:
            raise ConfigurationError(
                "HIKYAKU_AGENT_ID (or --agent-id) is required: the agent id printed by "
                "`hikyaku register`."
            )
        return self.agent_id


def error_from_response(response: httpx.Response) -> HikyakuError:
    """Translate a REST error envelope (or anything else) into one readable error."""
    code: str | None = None
    message = ""
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            code = error.get("code")
            message = str(error.get("message") or "")
            details = error.get("details")
            if isinstance(details, dict) and details:
                fields = "; ".join(
                    f"{field}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                    for field, msgs in details.items()
                )
                message = f"{message} ({fields})" if message else fields
        elif isinstance(error, str):
            message = error
    except ValueError:
        pass
    if not message:
        message = response.reason_phrase or f"HTTP {response.status_code}"
    label = f"HTTP {response.status_code}" + (f" {code}" if code else "")
    cls = AuthenticationFailed if response.status_code == 401 else BrokerError
    return cls(f"{message} [{label}]", code=code, status=response.status_code)


def _rpc_error(error: Any) -> BrokerError:
    if not isinstance(error, dict):
        return BrokerError(f"Malformed JSON-RPC error: {error!r}")
    code = error.get("code")
    message = str(error.get("message") or "JSON-RPC error")
    return BrokerError(f"{message} [JSON-RPC {code}]", code=code)


# Failures after which a request may be retried: nothing or an idempotent request was sent.
_RETRYABLE_STATUSES = frozenset({502, 503, 504})


class HikyakuClient:
    """An async client for one broker and (optionally) one agent identity.

    Use as `async with HikyakuClient(credentials) as client: ...`. `transport` lets a server
    process call its own app in-process (the `/mcp` mount does this).
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        retries: int = 2,
    ) -> None:
        self.credentials = credentials
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=credentials.url,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={"A2A-Version": A2A_VERSION, "User-Agent": USER_AGENT},
            follow_redirects=False,
        )

    async def __aenter__(self) -> HikyakuClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        return self._http

    def url_for(self, path: str) -> str:
        return f"{self.credentials.url}{path}"

    # Transport.

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str],
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        idempotent: bool = True,
    ) -> httpx.Response:
        """One HTTP exchange, retried on transport failures when that cannot duplicate work.

        A refused connection is always safe to retry (nothing was sent); a lost response or a
        502–504 only when `idempotent` (reads, and sends that carry a messageId)."""
        delay = 0.25
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    method, path, headers=headers, json=json_body, params=params
                )
            except httpx.ConnectError as exc:
                if attempt < self.retries:
                    attempt += 1
                    await asyncio.sleep(delay)
                    delay *= 2
                    continue
                raise ConnectionFailed(
                    f"Cannot connect to the broker at {self.url_for(path)} ({describe_transport_error(exc)}). "
                    "Is it running? Set HIKYAKU_URL to its address."
                ) from None
            except httpx.TimeoutException as exc:
                if idempotent and attempt < self.retries:
                    attempt += 1
                    await asyncio.sleep(delay)
                    delay *= 2
                    continue
                raise ConnectionFailed(
                    f"The broker at {self.url_for(path)} did not answer in time "
                    f"({type(exc).__name__})."
                ) from None
            except httpx.TransportError as exc:
                if idempotent and attempt < self.retries:
                    attempt += 1
                    await asyncio.sleep(delay)
                    delay *= 2
                    continue
                raise ConnectionFailed(
                    f"Connection to the broker at {self.url_for(path)} failed ({describe_transport_error(exc)})."
                ) from None
            if response.status_code in _RETRYABLE_STATUSES and idempotent:
                if attempt < self.retries:
                    attempt += 1
                    await asyncio.sleep(delay)
                    delay *= 2
                    continue
            return response

    async def _rest(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str],
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        idempotent: bool = True,
    ) -> Any:
        response = await self.request(
            method, path, headers=headers, json_body=json_body, params=params, idempotent=idempotent
        )
        if response.status_code >= 400:
            raise error_from_response(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise BrokerError(
                f"The broker at {self.url_for(path)} answered with something that is not JSON "
                f"(HTTP {response.status_code}). Is HIKYAKU_URL right?"
            ) from None

    async def rpc(self, method: str, params: dict[str, Any], *, idempotent: bool = True) -> Any:
        """Call one A2A JSON-RPC method as the agent and return its `result`."""
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
        response = await self.request(
            "POST",
            RPC_PATH,
            headers=self.credentials.agent_headers(),
            json_body=body,
            idempotent=idempotent,
        )
        if response.status_code in (404, 405):
            raise BrokerError(
                f"{self.url_for(RPC_PATH)} is not an A2A endpoint (HTTP {response.status_code}). "
                "Is HIKYAKU_URL the broker's address?",
                status=response.status_code,
            )
        if response.status_code >= 400:
            raise error_from_response(response)
        try:
            payload = response.json()
        except ValueError:
            raise BrokerError(
                f"The broker at {self.url_for(RPC_PATH)} did not answer with JSON-RPC "
                f"(HTTP {response.status_code}). Is HIKYAKU_URL right?"
            ) from None
        if not isinstance(payload, dict):
            raise BrokerError("Malformed JSON-RPC response.")
        if payload.get("error") is not None:
            raise _rpc_error(payload["error"])
        return payload.get("result")

    # Registry (REST, DESIGN.md §3).

    async def register(
        self,
        *,
        name: str,
        description: str,
        skills: list[dict[str, Any]] | None = None,
        webhook_url: str | None = None,
        api_key: str | None = None,
    ) -> dict[str, Any]:
        """Register a new agent with the tenant key; the result holds its token (shown once)."""
        body: dict[str, Any] = {"name": name, "description": description}
        if skills is not None:
            body["skills"] = skills
        if webhook_url:
            body["webhook_url"] = webhook_url
        # Not idempotent: a lost response followed by a retry would register a second agent.
        return await self._rest(
            "POST",
            "/api/v1/agents",
            headers=self.credentials.key_headers(api_key),
            json_body=body,
            idempotent=False,
        )

    async def list_agents(
        self, *, q: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        params = {k: v for k, v in {"q": q, "limit": limit, "cursor": cursor}.items() if v}
        return await self._rest(
            "GET", "/api/v1/agents", headers=self.credentials.agent_headers(), params=params
        )

    async def list_all_agents(self, *, q: str | None = None) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self.list_agents(q=q, limit=500, cursor=cursor)
            agents.extend(page.get("agents", []))
            cursor = page.get("next_cursor")
            if not cursor:
                return agents

    async def get_agent(self, agent_id: str) -> dict[str, Any]:
        return await self._rest(
            "GET", f"/api/v1/agents/{_segment(agent_id)}", headers=self.credentials.agent_headers()
        )

    async def whoami(self) -> dict[str, Any]:
        return await self.get_agent(self.credentials.require_agent_id())

    async def deregister(self) -> None:
        agent_id = self.credentials.require_agent_id()
        await self._rest(
            "DELETE",
            f"/api/v1/agents/{_segment(agent_id)}",
            headers=self.credentials.agent_headers(),
            idempotent=False,
        )

    async def task_events(
        self, task_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        params = {k: v for k, v in {"cursor": cursor, "limit": limit}.items() if v}
        return await self._rest(
            "GET",
            f"/api/v1/tasks/{_segment(task_id)}/events",
            headers=self.credentials.agent_headers(),
            params=params,
        )

    async def all_task_events(self, task_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self.task_events(task_id, cursor=cursor)
            events.extend(page.get("events", []))
            cursor = page.get("next_cursor")
            if not cursor:
                return events

    # Messaging (A2A JSON-RPC, DESIGN.md §4).

    async def send_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """SendMessage; `message` gets a role and a messageId if it has none. Returns the Task."""
        message = {"role": "ROLE_USER", **message}
        message.setdefault("messageId", str(uuid.uuid4()))
        result = await self.rpc("SendMessage", {"message": message}, idempotent=True)
        if isinstance(result, dict) and isinstance(result.get("task"), dict):
            return result["task"]
        raise BrokerError(f"Unexpected SendMessage result: {json.dumps(result)[:200]}")

    async def send(
        self,
        *,
        to: str,
        parts: list[dict[str, Any]],
        reference_task_ids: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        message_id: str | None = None,
    ) -> dict[str, Any]:
        """Unicast (`to` = agent id) or broadcast (`to` = "*"). Returns the delivery task
        (or the broadcast summary task)."""
        if not parts:
            raise ConfigurationError("A message needs at least one part (text, file or data).")
        message: dict[str, Any] = {
            "parts": parts,
            "metadata": {**(metadata or {}), "destination": to},
        }
        if reference_task_ids:
            message["referenceTaskIds"] = list(reference_task_ids)
        if message_id:
            message["messageId"] = message_id
        return await self.send_message(message)

    async def broadcast(
        self, *, parts: list[dict[str, Any]], message_id: str | None = None
    ) -> dict[str, Any]:
        return await self.send(to="*", parts=parts, message_id=message_id)

    async def act(
        self,
        *,
        task_id: str,
        action: str,
        parts: list[dict[str, Any]] | None = None,
        message_id: str | None = None,
    ) -> dict[str, Any]:
        """A lifecycle verb of DESIGN.md §4.4 on a task; returns the updated Task."""
        if action not in ACTIONS:
            raise ConfigurationError(f"Unknown action {action!r}.")
        message: dict[str, Any] = {
            "taskId": task_id,
            # The broker wants at least one part; the old client acknowledged with "ack".
            "parts": parts or [text_part(action)],
            "metadata": {"action": action},
        }
        if message_id:
            message["messageId"] = message_id
        return await self.send_message(message)

    async def get_task(self, task_id: str, *, history_length: int | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        return _unwrap_task(await self.rpc("GetTask", params))

    async def cancel(self, task_id: str) -> dict[str, Any]:
        # Not retried after the request went out: a retry of a cancel that committed would
        # report "not cancelable" for a cancel that succeeded.
        return _unwrap_task(await self.rpc("CancelTask", {"id": task_id}, idempotent=False))

    async def list_tasks(
        self,
        *,
        box: str = "inbox",
        status: str | None = None,
        since: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
        history_length: int | None = None,
        peer: str | None = None,
        include_artifacts: bool = True,
    ) -> dict[str, Any]:
        """ListTasks on the inbox (tasks sent to us) or the outbox (tasks we sent; `peer`
        filters by recipient). Result: `{tasks, nextPageToken, pageSize, totalSize}`."""
        params: dict[str, Any] = {"includeArtifacts": include_artifacts}
        if box == "outbox":
            params["metadata"] = {"box": "outbox"}
            if peer:
                params["contextId"] = peer
        else:
            params["contextId"] = self.credentials.require_agent_id()
        if status:
            params["status"] = normalize_state(status)
        if since:
            params["statusTimestampAfter"] = since
        if page_size is not None:
            params["pageSize"] = page_size
        if page_token:
            params["pageToken"] = page_token
        if history_length is not None:
            params["historyLength"] = history_length
        result = await self.rpc("ListTasks", params)
        if isinstance(result, list):  # tolerate a bare list
            return {"tasks": result, "nextPageToken": ""}
        return result or {"tasks": [], "nextPageToken": ""}


def _unwrap_task(result: Any) -> dict[str, Any]:
    """GetTask/CancelTask return the Task itself in A2A 1.0 (`{"task": …}` in 0.3); accept both."""
    if isinstance(result, dict) and isinstance(result.get("task"), dict) and "id" not in result:
        return result["task"]
    if isinstance(result, dict):
        return result
    raise BrokerError(f"Unexpected result: {json.dumps(result)[:200]}")


def _segment(value: str) -> str:
    """An id as one URL path segment (never lets '/' or '..' change the path)."""
    return quote(value.strip(), safe="")


def describe_transport_error(exc: BaseException) -> str:
    """A short reason for a transport failure ("connection refused", "unknown host", …)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "unknown host"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    text = str(exc).strip()
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return text.splitlines()[0] if text else type(exc).__name__
