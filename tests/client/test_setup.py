"""`hikyaku setup CLIENT` in a temporary home and project, against a real broker: it writes
configurations in each client's format (parsed here as the client reads them: JSON, TOML,
dotenv), keeps the token out of the files a repository holds, starts a server that acts as the
seat, changes nothing when run again, and `--remove` puts every file back byte for byte."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.client.conftest import HIKYAKU_MCP, LIVE_DB, base_env, hikyaku
from tests.client.test_mcp import call, run, session_with
from tests.client.test_mcp_profiles import expand_like_claude_code

pytestmark = LIVE_DB

CLIENT_VARIABLES = ("XDG_STATE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR")


@pytest.fixture
def place(tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    return home, project


def setup_env(home: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in base_env(**extra).items() if k not in CLIENT_VARIABLES}
    return {**env, "HOME": str(home), "HIKYAKU_URL": url}


def snapshot(*roots: Path) -> dict[str, bytes]:
    files = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and ".git" not in path.relative_to(root).parts[:1]:
                files[str(path)] = path.read_bytes()
    return files


def dotenv(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip('"')
    return values


def expand_like_gemini(value: str, env: dict[str, str]) -> str:
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), value
    )


# What each client already had, so setup has to edit files rather than only create them.
SEEDS = {
    ("claude-code", "project"): {
        ".mcp.json": '{\n  "mcpServers": {\n    "docs": {\n      "command": "docs-mcp"\n    }\n  }\n}\n',
        ".claude/settings.local.json": '{\n  "permissions": {\n    "allow": ["Bash(ls)"]\n  }\n}\n',
    },
    ("claude-code", "user"): {
        "~/.claude.json": '{"numStartups": 3, "mcpServers": {"docs": {"command": "docs-mcp"}}}',
    },
    ("codex", "project"): {
        "AGENTS.md": "# Agents\n\nRun `make test` before you commit.\n",
        ".codex/config.toml": 'model = "o3"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n',
    },
    ("codex", "user"): {
        "~/.codex/config.toml": 'model = "o3"\n',
        "~/.codex/.env": "OPENAI_LOG=info\n",
    },
    ("gemini-cli", "project"): {
        ".gemini/settings.json": '{\n    "theme": "GitHub"\n}',
        "GEMINI.md": "Be brief.",
    },
    ("gemini-cli", "user"): {"~/.gemini/settings.json": '{"theme": "GitHub"}\n'},
}
# Files a repository usually holds: the token must never be in them.
COMMITTED = [".mcp.json", ".codex/config.toml", ".gemini/settings.json", "AGENTS.md", "GEMINI.md"]


def seed(home: Path, project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = home / name[2:] if name.startswith("~/") else project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def launch(client: str, scope: str, home: Path, project: Path) -> StdioServerParameters:
    """The server as the client would start it from what setup wrote."""
    if client == "claude-code":
        if scope == "user":
            entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["hikyaku"]
            env = entry["env"]
        else:
            entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hikyaku"]
            session = json.loads((project / ".claude" / "settings.local.json").read_text())["env"]
            env = {k: expand_like_claude_code(v, session) for k, v in entry["env"].items()}
        assert entry["type"] == "stdio"
    elif client == "codex":
        config = (
            home / ".codex" / "config.toml"
            if scope == "user"
            else project / ".codex" / "config.toml"
        )
        entry = tomllib.loads(config.read_text())["mcp_servers"]["hikyaku"]
        loaded = dotenv(home / ".codex" / ".env")  # Codex loads it into its own environment
        env = {**entry["env"], **{name: loaded[name] for name in entry["env_vars"]}}
    else:
        folder = home / ".gemini" if scope == "user" else project / ".gemini"
        entry = json.loads((folder / "settings.json").read_text())["mcpServers"]["hikyaku"]
        loaded = {} if scope == "user" else dotenv(folder / ".env")
        env = {k: expand_like_gemini(v, loaded) for k, v in entry["env"].items()}
    assert isinstance(entry["args"], list)
    return StdioServerParameters(command=entry["command"], args=entry["args"], env=base_env(**env))


@pytest.mark.parametrize("scope", ["project", "user"])
@pytest.mark.parametrize("client", ["claude-code", "codex", "gemini-cli"])
def test_setup_writes_what_the_client_reads_once_and_removes_it(
    client_broker, api_key, place, client, scope
):
    home, project = place
    seed(home, project, SEEDS[(client, scope)])
    before = snapshot(home, project)
    env = setup_env(home, client_broker.url, HIKYAKU_API_KEY=api_key)
    args = ["setup", client, "--project", str(project), *(["--user"] if scope == "user" else [])]

    first = hikyaku(*args, env=env)
    assert first.returncode == 0, first.stderr
    assert f"set up {'for you' if scope == 'user' else 'in ' + str(project)}" in first.stdout
    written = snapshot(home, project)
    for name in written:  # every file in the format its client parses
        if name.endswith(".json"):
            json.loads(written[name])
        elif name.endswith(".toml"):
            tomllib.loads(written[name].decode())
    agent_id = re.search(r"as agent ([0-9a-f-]{36})", first.stdout).group(1)
    (token,) = {m for text in written.values() for m in re.findall(rb"hka_\w+", text)}
    for name in COMMITTED:
        assert token not in written.get(str(project / name), b""), name
    for name, text in written.items():
        if token in text and str(project) in name:
            if name not in before:  # a file setup created for the token is its owner's only
                assert os.stat(name).st_mode & 0o077 == 0, name
            ignored = subprocess.run(["git", "-C", str(project), "check-ignore", "-q", name])
            assert ignored.returncode == 0, f"{name} holds the token and git would commit it"
    for name, text in before.items():  # what the user had is still there
        if name.endswith(".json"):
            assert _contains(json.loads(written[name]), json.loads(text)), name
        else:
            assert text.strip() in written[name], name
    instructions = {
        "claude-code": (home / ".claude" if scope == "user" else project / ".claude")
        / "skills/hikyaku/SKILL.md",
        "codex": home / ".codex" / "AGENTS.md" if scope == "user" else project / "AGENTS.md",
        "gemini-cli": home / ".gemini" / "GEMINI.md" if scope == "user" else project / "GEMINI.md",
    }[client]
    assert "hikyaku" in instructions.read_text()

    async def body(mcp: Client) -> None:
        who = await call(mcp, "whoami")
        assert who.structured_content["agent"]["agent_id"] == agent_id
        assert {t.name for t in (await mcp.list_tools()).tools} >= {"poll", "send", "complete"}

    run(lambda: session_with(Client(stdio_client(launch(client, scope, home, project))), body))

    again = hikyaku(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert "already set up" in again.stdout and agent_id in again.stdout
    assert snapshot(home, project) == written

    removed = hikyaku(*args, "--remove", env=env)
    assert removed.returncode == 0, removed.stderr
    assert snapshot(home, project) == before
    assert f"Deregistered agent {agent_id}" in removed.stderr
    gone = hikyaku(
        "whoami",
        env=base_env(
            HIKYAKU_URL=client_broker.url,
            HIKYAKU_AGENT_ID=agent_id,
            HIKYAKU_AGENT_TOKEN=token.decode(),
        ),
    )
    assert gone.returncode == 1 and "401" in gone.stderr


def _contains(big, small) -> bool:
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            k in big and _contains(big[k], v) for k, v in small.items()
        )
    return big == small


def test_dry_run_shows_the_changes_and_makes_none(client_broker, api_key, register, place):
    home, project = place
    seed(home, project, SEEDS[("gemini-cli", "project")])
    before = snapshot(home, project)
    peer = register("peer")
    agents_before = peer.run_json("agents")
    env = setup_env(home, client_broker.url, HIKYAKU_API_KEY=api_key)
    result = hikyaku("setup", "gemini-cli", "--project", str(project), "--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    assert f"+++ {project / '.gemini' / 'settings.json'}" in result.stdout
    assert re.search(
        r'^\+\s+"HIKYAKU_AGENT_TOKEN": "\$\{HIKYAKU_AGENT_TOKEN\}"', result.stdout, re.M
    )
    assert "+HIKYAKU_AGENT_TOKEN=hka_NEW-AGENT-TOKEN" in result.stdout
    assert "would register a new agent 'project-gemini-cli'" in result.stderr
    assert snapshot(home, project) == before
    assert peer.run_json("agents") == agents_before


def test_the_seat_in_the_environment_is_used_and_kept(client_broker, register, place):
    home, project = place
    me = register("mine")
    env = setup_env(
        home, client_broker.url, HIKYAKU_AGENT_ID=me.agent_id, HIKYAKU_AGENT_TOKEN=me.token
    )
    made = hikyaku("setup", "codex", "--project", str(project), env=env)
    assert made.returncode == 0, made.stderr
    assert f"Using agent {me.agent_id} from the environment" in made.stderr
    assert dotenv(home / ".codex" / ".env")["HIKYAKU_AGENT_TOKEN"] == me.token
    removed = hikyaku("setup", "--remove", "codex", "--project", str(project), env=env)
    assert removed.returncode == 0, removed.stderr
    assert "Deregistered" not in removed.stderr
    assert me.run_json("whoami")["agent_id"] == me.agent_id  # not setup's to deregister


def test_a_seat_the_broker_no_longer_accepts_is_replaced(client_broker, api_key, place):
    home, project = place
    env = setup_env(home, client_broker.url, HIKYAKU_API_KEY=api_key)
    args = ["setup", "gemini-cli", "--project", str(project)]
    assert hikyaku(*args, env=env).returncode == 0
    old = dotenv(project / ".gemini" / ".env")
    as_old = base_env(
        HIKYAKU_URL=client_broker.url,
        HIKYAKU_AGENT_ID=old["HIKYAKU_AGENT_ID"],
        HIKYAKU_AGENT_TOKEN=old["HIKYAKU_AGENT_TOKEN"],
    )
    assert hikyaku("deregister", env=as_old).returncode == 0
    again = hikyaku(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert "is no longer accepted" in again.stderr
    new = dotenv(project / ".gemini" / ".env")
    assert new["HIKYAKU_AGENT_ID"] != old["HIKYAKU_AGENT_ID"]


def test_codex_projects_share_the_users_seat_until_the_last_is_removed(
    client_broker, api_key, tmp_path
):
    home, one, two = tmp_path / "home", tmp_path / "one", tmp_path / "two"
    for folder in (home, one, two):
        folder.mkdir()
    env = setup_env(home, client_broker.url, HIKYAKU_API_KEY=api_key)
    assert hikyaku("setup", "codex", "--project", str(one), env=env).returncode == 0
    seat = dotenv(home / ".codex" / ".env")
    second = hikyaku("setup", "codex", "--project", str(two), env=env)
    assert second.returncode == 0 and f"Using agent {seat['HIKYAKU_AGENT_ID']}" in second.stderr
    assert hikyaku("setup", "--remove", "codex", "--project", str(one), env=env).returncode == 0
    assert not (one / ".codex").exists() and dotenv(home / ".codex" / ".env") == seat
    last = hikyaku("setup", "--remove", "codex", "--project", str(two), env=env)
    assert last.returncode == 0 and f"Deregistered agent {seat['HIKYAKU_AGENT_ID']}" in last.stderr
    assert not (home / ".codex").exists()


def test_print_shows_a_configuration_for_any_other_client(client_broker, register, place):
    home, _project = place
    me = register("elsewhere")
    env = setup_env(
        home, client_broker.url, HIKYAKU_AGENT_ID=me.agent_id, HIKYAKU_AGENT_TOKEN=me.token
    )
    result = hikyaku("setup", "--print", "--command", HIKYAKU_MCP, env=env)
    assert result.returncode == 0, result.stderr
    entry = json.loads(result.stdout)["mcpServers"]["hikyaku"]
    assert entry["command"] == HIKYAKU_MCP
    assert entry["env"]["HIKYAKU_AGENT_TOKEN"] == me.token
    assert entry["env"]["HIKYAKU_MCP_TOOLS"] == "core"
    assert list(Path(home).rglob("*")) == []  # nothing written


def test_refusals_write_nothing_and_register_nobody(client_broker, api_key, register, place):
    home, project = place
    peer = register("peer")
    count = len(peer.run_json("agents"))
    seed(home, project, {".codex/config.toml": '[mcp_servers.hikyaku]\ncommand = "old"\n'})
    before = snapshot(home, project)
    env = setup_env(home, client_broker.url, HIKYAKU_API_KEY=api_key)
    taken = hikyaku("setup", "codex", "--project", str(project), env=env)
    assert taken.returncode == 1
    assert "already defines [mcp_servers.hikyaku]; remove that table" in taken.stderr
    keyless = hikyaku(
        "setup", "claude-code", "--project", str(project), env=setup_env(home, client_broker.url)
    )
    assert keyless.returncode == 1
    assert "setup needs a seat: set HIKYAKU_API_KEY" in keyless.stderr
    usage = hikyaku("setup", "--project", str(project), env=env)
    assert usage.returncode == 2 and "name a CLIENT" in usage.stderr
    assert snapshot(home, project) == before
    assert len(peer.run_json("agents")) == count
