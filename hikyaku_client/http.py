"""The one HTTP client of the client package: REST registry calls and A2A 1.0 JSON-RPC.

Every request carries `A2A-Version: 1.0`, so the broker answers in the A2A 1.0 dialect
(ProtoJSON camelCase, parts `{"text"}`/`{"data"}`/`{"url"}`/`{"raw"}`, states `TASK_STATE_*`,
`SendMessage` → `{"task": {...}}`, `GetTask`/`CancelTask` → the Task itself).

Identity (docs/PROTOCOL.md §2) comes from `Credentials`: an agent token (`Bearer hka_…`) or the
tenant key plus `X-Agent-Id`. Sends carry a `messageId` chosen once per call and are retried with
the same id after a transport failure, so a send whose outcome was lost is never delivered twice.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from . import __version__
from .config import Credentials
from .errors import (
    BrokerError,
    ConfigurationError,
    ConnectionFailed,
    describe_transport_error,
    error_from_response,
    rpc_error,
)
from .wire import ACTIONS, normalize_state, text_part

A2A_VERSION = "1.0"
RPC_PATH = "/a2a/"
USER_AGENT = f"hikyaku-client/{__version__}"


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
        headers: dict[str, str] | None = None,
    ) -> None:
        self.credentials = credentials
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=credentials.url,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={"A2A-Version": A2A_VERSION, "User-Agent": USER_AGENT, **(headers or {})},
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
            raise rpc_error(payload["error"])
        return payload.get("result")

    # Registry (REST, docs/PROTOCOL.md §3).

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
        result = await self._rest(
            "POST",
            "/api/v1/agents",
            headers=self.credentials.key_headers(api_key),
            json_body=body,
            idempotent=False,
        )
        # The REST answer echoes the tenant key (the old broker's shape); what we hand on to
        # terminals, scripts and MCP results never does.
        if isinstance(result, dict):
            result.pop("api_key", None)
        return result

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
        """The acting agent as GET /api/v1/agents/me describes it: identity, tenant, relations,
        ceiling and the tenant's policy revision. Brokers older than that route answer
        AGENT_NOT_FOUND for "me"; then the agent's own record stands in."""
        try:
            return await self._rest(
                "GET", "/api/v1/agents/me", headers=self.credentials.agent_headers()
            )
        except BrokerError as exc:
            if exc.code != "AGENT_NOT_FOUND" or not self.credentials.agent_id:
                raise
        return await self.get_agent(self.credentials.agent_id)

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

    # Messaging (A2A JSON-RPC, docs/PROTOCOL.md §4).

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
        """A lifecycle verb of docs/PROTOCOL.md §4.4 on a task; returns the updated Task."""
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
        elif self.credentials.agent_id:
            # Optional (the credentials say whose inbox it is); sent for older brokers.
            params["contextId"] = self.credentials.agent_id
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
