"""A2A 1.0 agent cards: the broker's own card and one card per agent (docs/PROTOCOL.md §4.7, §8)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import orjson
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

from hikyaku import parsers

from .models import Agent

VERSION = "1.0.0"
# Flipped on by the issues that implement them, so the card never promises more than we serve.
CAPABILITIES = {"streaming": True, "push_notifications": True}
# An agent's own endpoint (/a2a/agents/<id>/) streams (messaging/stream/peer.py) and serves
# push configs to its callers (messaging/a2a/peer.py); both are verified by `make tck`.
PEER_CAPABILITIES = {"streaming": True, "push_notifications": True}


def base_url(request: HttpRequest | None) -> str:
    """HIKYAKU_BASE_URL, or the request's own scheme and host when it is unset."""
    if settings.HIKYAKU_BASE_URL or request is None:
        return settings.HIKYAKU_BASE_URL or "http://localhost:8000"
    return f"{request.scheme}://{request.get_host()}"


def _security(*, public: bool = False) -> dict[str, Any]:
    description = "A tenant API key plus the X-Agent-Id header, or an agent token."
    requirements = [SecurityRequirement(schemes={"bearer": {"list": []}})]
    if public:
        description = (
            "Optional for this public agent. A tenant API key (plus X-Agent-Id to act as one "
            "of the tenant's agents) or an agent token; anonymous callers may send an hkc_ "
            "caller token of their own making to keep their tasks apart from others behind "
            "the same address."
        )
        # An empty requirement among the alternatives: no credentials needed (OpenAPI rule).
        requirements.append(SecurityRequirement())
    return {
        "security_schemes": {
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer",
                    bearer_format="hky_ API key (with X-Agent-Id), hka_ agent token"
                    + (" or hkc_ caller token" if public else ""),
                    description=description,
                )
            )
        },
        "security_requirements": requirements,
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


def _skills(raw_skills: list) -> list[AgentSkill]:
    skills = []
    for raw in raw_skills:
        skill = ParseDict(raw, AgentSkill(), ignore_unknown_fields=True)
        if not skill.description:
            skill.description = skill.name
        skills.append(skill)
    return skills


def input_modes(agent: Agent) -> list[str]:
    """Media types `agent` accepts from A2A callers: the broker's default set plus the
    inputModes its skills declare."""
    return _input_modes(agent.skills or [])


def _input_modes(skills: list, broker_modes: tuple[str, ...] | None = None) -> list[str]:
    modes = list(settings.HIKYAKU_PEER_INPUT_MODES if broker_modes is None else broker_modes)
    for skill in skills:
        for mode in (skill.get("inputModes") or []) if isinstance(skill, dict) else []:
            if isinstance(mode, str) and mode not in modes:
                modes.append(mode)
    return modes


def accepts_media_type(modes: list[str], media_type: str) -> bool:
    """Whether `media_type` matches one of `modes` (exact, `type/*` or `*/*`)."""
    essence = media_type.split(";", 1)[0].strip().lower()
    major = essence.split("/", 1)[0]
    for mode in modes:
        mode = mode.split(";", 1)[0].strip().lower()
        if mode in (essence, "*/*", "*") or mode == f"{major}/*":
            return True
    return False


def agent_url(agent: Agent, request: HttpRequest | None) -> str:
    return _endpoint(base_url(request), str(agent.id))


def _endpoint(base: str, agent_id: str) -> str:
    """An agent's A2A endpoint; it ends with "/" because clients join paths onto it."""
    return f"{base}/a2a/agents/{agent_id}/"


def agent_card(agent: Agent, request: HttpRequest | None) -> dict[str, Any]:
    """The agent's own A2A 1.0 card (docs/PROTOCOL.md §8): its name, description and skills, its
    endpoint on the broker, and whether anonymous callers are accepted (`public`).

    Building a card (protobuf messages, then their JSON) costs about 0.3 ms, and a page of the
    directory holds many. Cards are kept, as JSON, by everything they are built from — the
    agent's id, name, description, skills and `public`, the base URL and the broker's input
    modes — so an agent that changed gets a new card; each caller gets a fresh copy
    (docs/MEASUREMENTS.md, "The agent list")."""
    card = _card(
        str(agent.id),
        agent.name,
        agent.description,
        parsers.dumps(agent.skills or []),
        agent.public,
        base_url(request),
        tuple(settings.HIKYAKU_PEER_INPUT_MODES),
    )
    return orjson.loads(card)


@lru_cache(maxsize=4096)
def _card(
    agent_id: str,
    name: str,
    description: str,
    skills_json: bytes,
    public: bool,
    base: str,
    broker_modes: tuple[str, ...],
) -> bytes:
    skills = json.loads(skills_json)
    card = AgentCard(
        name=name,
        description=description or name,
        supported_interfaces=[
            AgentInterface(
                url=_endpoint(base, agent_id),
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        provider=AgentProvider(organization="Hikyaku", url=base),
        version=VERSION,
        documentation_url=f"{base}/api/docs/",
        capabilities=AgentCapabilities(**PEER_CAPABILITIES),
        default_input_modes=_input_modes(skills, broker_modes),
        default_output_modes=["text/plain", "application/json"],
        skills=_skills(skills),
        **_security(public=public),
    )
    body = MessageToDict(card)
    # ProtoJSON drops empty lists, but A2A requires the field (an agent may have no skills).
    body.setdefault("skills", [])
    return parsers.dumps(body)
