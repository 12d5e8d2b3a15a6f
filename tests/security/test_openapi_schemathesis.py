"""schemathesis against the served OpenAPI schema (`/api/schema/`) of a real server process.

For every operation, schemathesis generates valid (positive) and invalid (negative) requests
from the schema and sends them with valid credentials; every response must be below 500,
have a documented status code, content type and headers, and match its documented schema;
invalid requests must be refused. Path ids are sometimes swapped for real ones (the caller's
own id, a peer's, a task's) so the success paths are exercised, not only 404s; the caller
registers a fresh agent when a generated request deregisters or re-keys it.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

import httpx
import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi import checks as openapi_checks

from tests import factories
from tests.messaging.rpc import send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXAMPLES = 60


def operation_labels() -> list[str]:
    """Collected from the in-process schema so each operation is its own test."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    # The JSON-RPC methods (`/a2a/#<Method>`) are documentation of one endpoint that answers
    # errors in HTTP 200; tests/security/test_jsonrpc_fuzz.py is their fuzzer.
    return sorted(
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method in operations
        if not path.startswith("/a2a/")
    )


CHECKS = [
    not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.negative_data_rejection,
    openapi_checks.ignored_auth,
]


@dataclass
class Caller:
    """The identity requests are sent as; replaced when a request deregisters it."""

    key: str
    tenant: object
    agent: factories.TestAgent
    peer: factories.TestAgent
    task_id: str

    def renew(self, base_url: str) -> None:
        response = httpx.post(
            f"{base_url}/api/v1/agents",
            # Names are unique among live agents, and a re-keyed agent is still live. Not the
            # `random` module: hypothesis seeds it alike for every example.
            json={"name": f"schemathesis-{uuid.uuid4().hex}", "description": ""},
            headers={"Authorization": f"Bearer {self.key}"},
        )
        response.raise_for_status()
        body = response.json()
        from agents.models import Agent

        self.agent = factories.TestAgent(
            model=Agent.objects.get(pk=body["agent_id"]), token=body["agent_token"]
        )


@pytest.fixture
def caller(tenant) -> Caller:
    key = factories.api_key(tenant)
    agent = factories.agent(tenant, name="alice")
    peer = factories.agent(tenant, name="bob")
    task = send(agent, peer.id, "hello")
    return Caller(key=key, tenant=tenant, agent=agent, peer=peer, task_id=task["id"])


def real_ids(case, caller: Caller, rng: random.Random) -> None:
    """Swap generated path ids for real ones half of the time."""
    if not case.path_parameters or rng.random() < 0.5:
        return
    if "agent_id" in case.path_parameters:
        case.path_parameters["agent_id"] = rng.choice([caller.agent.id, caller.peer.id])
    if "task_id" in case.path_parameters:
        case.path_parameters["task_id"] = caller.task_id


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("label", operation_labels())
def test_schemathesis_finds_no_5xx_and_no_schema_violation(broker, caller, label, mode):
    schema = schemathesis.openapi.from_url(f"{broker.url}/api/schema/")
    method, path = label.split(" ", 1)
    operation = schema[path][method]
    rng = random.Random(label)

    @schema.auth(refresh_interval=None)
    class AgentToken:
        """The caller's current token, looked up for every generated case."""

        def get(self, case, context):
            return caller.agent.token

        def set(self, case, data, context):
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=operation.as_strategy(generation_mode=mode, auth_storage=schema.auth))
    def run(case):
        real_ids(case, caller, rng)
        response = case.call_and_validate(base_url=broker.url, checks=CHECKS)
        gone = response.status_code == 204 or (
            response.status_code == 200 and path.endswith("/token")
        )
        if gone or response.status_code == 401:
            caller.renew(broker.url)  # deregistered, re-keyed, or generated bad credentials

    run()
