"""Fixtures for the client package: a real broker process, tenant keys made by the real
`manage.py createapikey`, and the real `hikyaku` console script run as a subprocess.

The broker runs on the test database (pytest-django creates it; the subprocess gets its
DATABASE_URL). Test modules here are marked `LIVE_DB`: transactional, so the test database is
set up and no transaction of the test process holds locks the broker needs, but with
`available_apps` narrowed to one app with nothing of ours in it, so pytest-django does not
flush the broker's data after every test (a key costs a `manage.py` run: one per module).
Every test registers its own agents; each module has its own tenant and flushes the database
when it is done, as transactional tests elsewhere do after each test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.live import ROOT, BrokerProcess, suite_database_url

BIN = Path(sys.executable).parent
HIKYAKU = str(BIN / "hikyaku")
HIKYAKU_MCP = str(BIN / "hikyaku-mcp")


def base_env(**extra: str) -> dict[str, str]:
    """A clean environment: nothing HIKYAKU_* leaks in from the developer's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIKYAKU_")}
    env.update(extra)
    return env


LIVE_DB = pytest.mark.django_db(transaction=True, available_apps=["django.contrib.sessions"])


@pytest.fixture(scope="module", autouse=True)
def flush_after_module(request, django_db_blocker):
    """Leave the database as transactional tests do: empty, with its id sequences where they
    were. The broker processes of the session keep running across modules, and a stream
    process assumes event ids only grow (docs/TESTING.md, "Flushing under a running broker"):
    `flush` resets sequences unless told not to."""
    yield
    if request.node.get_closest_marker("django_db") is None:
        return
    from django.core.management import call_command

    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0, reset_sequences=False)


@pytest.fixture(scope="session")
def client_broker(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    # A production-like host allow-list, so the /mcp mount's own Host check is exercised.
    server = BrokerProcess(env={"DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}).start()
    yield server
    server.stop()


def create_api_key(tenant: str) -> str:
    """A tenant key made the way an operator makes one."""
    result = subprocess.run(
        [sys.executable, "manage.py", "createapikey", "--create", "--tenant", tenant, "--json"],
        cwd=ROOT,
        env=base_env(DATABASE_URL=suite_database_url()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])["api_key"]


@pytest.fixture(scope="module")
def api_key(client_broker) -> str:
    """A key of a tenant of this module's own."""
    return create_api_key(f"client-{uuid.uuid4().hex[:10]}")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def hikyaku(*args: str, env: dict[str, str], input: str | None = None, timeout=60) -> Run:
    """Run the installed `hikyaku` console script."""
    result = subprocess.run(
        [HIKYAKU, *args], env=env, capture_output=True, text=True, timeout=timeout, input=input
    )
    return Run(result.returncode, result.stdout, result.stderr)


@dataclass
class Agent:
    """A registered agent and the environments to act as it."""

    agent_id: str
    token: str
    name: str
    url: str
    api_key: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """Authenticated by its agent token."""
        return base_env(
            HIKYAKU_URL=self.url, HIKYAKU_AGENT_ID=self.agent_id, HIKYAKU_AGENT_TOKEN=self.token
        )

    @property
    def key_env(self) -> dict[str, str]:
        """The old broker's way: the tenant key, plus --agent-id on the command line."""
        return base_env(HIKYAKU_URL=self.url, HIKYAKU_API_KEY=self.api_key)

    def run(self, *args: str, **kwargs) -> Run:
        return hikyaku(*args, env=self.env, **kwargs)

    def run_json(self, *args: str):
        result = self.run("--json", *args)
        assert result.returncode == 0, result.stderr
        return result.json()

    def send(self, to: str, text: str) -> dict:
        """Send a message straight over the A2A 1.0 wire, for tests whose subject is another
        surface (the MCP server): one HTTP request instead of a `hikyaku` process."""
        import httpx

        response = httpx.post(
            f"{self.url}/a2a/",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": uuid.uuid4().hex,
                        "role": "ROLE_USER",
                        "parts": [{"text": text}],
                        "metadata": {"destination": to},
                    }
                },
            },
            headers={"Authorization": f"Bearer {self.token}", "A2A-Version": "1.0"},
            timeout=30,
        )
        body = response.json()
        assert "result" in body, body
        return body["result"]["task"]


@pytest.fixture
def register(client_broker, api_key):
    """register(name) → Agent, through the real CLI, in this module's tenant. The agents are
    deregistered after the test, which frees their names for the next one."""
    yield from registrar(client_broker, api_key)


@pytest.fixture
def register_alone(client_broker):
    """Like `register`, in a tenant of this test's own (for broadcasts and full listings)."""
    yield from registrar(client_broker, create_api_key(f"alone-{uuid.uuid4().hex[:10]}"))


def registrar(client_broker: BrokerProcess, api_key: str):
    import httpx

    registered: list[Agent] = []

    def register_agent(name: str, description: str = "") -> Agent:
        env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY=api_key)
        result = hikyaku(
            "--json", "register", "--name", name, "--description", description or name, env=env
        )
        assert result.returncode == 0, result.stderr
        body = result.json()
        agent = Agent(body["agent_id"], body["agent_token"], name, client_broker.url, api_key)
        registered.append(agent)
        return agent

    yield register_agent
    for agent in registered:  # already gone (the test deregistered it): 401 or 404
        httpx.delete(
            f"{client_broker.url}/api/v1/agents/{agent.agent_id}",
            headers={"Authorization": f"Bearer {agent.token}"},
            timeout=30,
        )


def stream_available(url: str) -> bool:
    """Whether the broker serves the inbox stream yet (401 without credentials, not 404)."""
    import httpx

    return httpx.get(f"{url}/api/v1/subscribe", timeout=5).status_code != 404
