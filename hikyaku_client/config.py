"""Where the broker is and who we are: `HIKYAKU_URL`, `HIKYAKU_AGENT_TOKEN`, or the old pair
`HIKYAKU_API_KEY` + `HIKYAKU_AGENT_ID` (docs/PROTOCOL.md §2)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .errors import ConfigurationError

DEFAULT_URL = "http://localhost:8000"


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
        """Headers that authenticate as the agent (docs/PROTOCOL.md §2)."""
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
            self.agent_headers()  # with no credentials at all, say that first
            raise ConfigurationError(
                "HIKYAKU_AGENT_ID (or --agent-id) is required: the agent id printed by "
                "`hikyaku register`."
            )
        return self.agent_id
