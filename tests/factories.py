"""Factories that go through the real services, so tests build state the way users do."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.test import Client

from agents import services as agent_services
from agents.models import Agent
from tenants import services as tenant_services
from tenants.models import Tenant, User


def tenant(slug: str) -> Tenant:
    return tenant_services.create_tenant(name=slug.title(), slug=slug)


def api_key(tenant: Tenant, **kwargs: Any) -> str:
    return tenant_services.create_api_key(tenant=tenant, **kwargs).raw_key


def user(email: str, password: str = "correct horse battery staple") -> User:
    return User.objects.create_user(email, password)


@dataclass
class TestAgent:
    """A registered agent and its raw agent token."""

    model: Agent
    token: str

    @property
    def id(self) -> str:
        return str(self.model.id)

    @property
    def tenant(self) -> Tenant:
        return self.model.tenant

    def refresh(self) -> Agent:
        self.model.refresh_from_db()
        return self.model


def agent(tenant: Tenant, name: str = "agent", **kwargs: Any) -> TestAgent:
    registered = agent_services.register_agent(
        tenant=tenant, name=name, description=kwargs.pop("description", f"{name} agent"), **kwargs
    )
    return TestAgent(model=registered.agent, token=registered.raw_token)


class AgentClient(Client):
    """A Django test client that sends an agent's token and JSON bodies."""

    def __init__(self, agent: TestAgent, **defaults: Any) -> None:
        super().__init__(HTTP_AUTHORIZATION=f"Bearer {agent.token}", **defaults)
        self.agent = agent

    def post_json(self, path: str, body: Any, **extra: Any):
        return self.post(path, json.dumps(body), content_type="application/json", **extra)

    def patch_json(self, path: str, body: Any, **extra: Any):
        return self.patch(path, json.dumps(body), content_type="application/json", **extra)
