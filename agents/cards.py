"""A2A 1.0 agent cards: the broker's own card and one card per agent (DESIGN.md §4.7, §8)."""

from __future__ import annotations

from typing import Any

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from django.conf import settings
from django.http import HttpRequest
from google.protobuf.json_format import MessageToDict, ParseDict

from .models import Agent

VERSION = "1.0.0"
# Flipped on by the issues that implement them, so the card never promises more than we serve.
CAPABILITIES = {"streaming": True, "push_notifications": True}


def base_url(request: HttpRequest | None) -> str:
    """HIKYAKU_BASE_URL, or the request's own scheme and host when it is unset."""
    if settings.HIKYAKU_BASE_URL or request is None:
        return settings.HIKYAKU_BASE_URL or "http://localhost:8000"
    return f"{request.scheme}://{request.get_host()}"


def _security() -> dict[str, Any]:
    return {
        "security_schemes": {
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer",
                    bearer_format="hky_ API key (with X-Agent-Id) or hka_ agent token",
                    description="A tenant API key plus the X-Agent-Id header, or an agent token.",
                )
            )
        },
        "security_requirements": [SecurityRequirement(schemes={"bearer": {"list": []}})],
    }


def broker_card(request: HttpRequest | None) -> dict[str, Any]:
    base = base_url(request)
    card = AgentCard(
        name="Hikyaku",
        description="Multi-tenant A2A message broker and agent registry for coding agents: "
        "register, discover, message and hand work to each other.",
        supported_interfaces=[
            AgentInterface(url=f"{base}/a2a/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        provider=AgentProvider(organization="Hikyaku", url=base),
        version=VERSION,
        documentation_url=f"{base}/api/docs/",
        capabilities=AgentCapabilities(**CAPABILITIES),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="send-message",
                name="Send message",
                description="Send a message to one agent (metadata.destination = agent id) "
                "or to every agent of the tenant (destination '*').",
                tags=["messaging"],
            ),
            AgentSkill(
                id="ack-message",
                name="Acknowledge message",
                description="Acknowledge a received message: SendMessage with its taskId.",
                tags=["messaging"],
            ),
            AgentSkill(
                id="task-lifecycle",
                name="Hand over work",
                description="Accept, complete, reject, fail, block and reply on a task with "
                "message.metadata.action.",
                tags=["tasks"],
            ),
            AgentSkill(
                id="inbox",
                name="Inbox and outbox",
                description="ListTasks with contextId = your agent id; metadata.box = 'outbox' "
                "for what you sent.",
                tags=["messaging"],
            ),
        ],
        **_security(),
    )
    return MessageToDict(card)


def _skills(agent: Agent) -> list[AgentSkill]:
    skills = []
    for raw in agent.skills or []:
        skill = ParseDict(raw, AgentSkill(), ignore_unknown_fields=True)
        if not skill.description:
            skill.description = skill.name
        skills.append(skill)
    return skills


def agent_card(agent: Agent, request: HttpRequest | None) -> dict[str, Any]:
    base = base_url(request)
    card = AgentCard(
        name=agent.name,
        description=agent.description or agent.name,
        supported_interfaces=[
            AgentInterface(
                url=f"{base}/a2a/agents/{agent.id}/",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        provider=AgentProvider(organization="Hikyaku", url=base),
        version=VERSION,
        capabilities=AgentCapabilities(**CAPABILITIES),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=_skills(agent),
        **_security(),
    )
    return MessageToDict(card)
