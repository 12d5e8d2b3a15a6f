"""Where each coding agent reads its MCP servers, its environment and its instructions.

One table per client says which files `hikyaku setup CLIENT` writes, in the client's own format:

| client | MCP server | the agent token | instructions |
|---|---|---|---|
| claude-code, project | `.mcp.json` (`${VAR:-}` references) | `.claude/settings.local.json` `env` (git-ignored) | `.claude/skills/hikyaku/SKILL.md` |
| claude-code, --user | `~/.claude.json` `mcpServers` | `~/.claude.json` (Claude Code's own per-user file) | `~/.claude/skills/hikyaku/SKILL.md` |
| codex, project | `.codex/config.toml` (`env_vars` forwards) | `~/.codex/.env` (Codex loads it) | `AGENTS.md` section |
| codex, --user | `~/.codex/config.toml` | `~/.codex/.env` | `~/.codex/AGENTS.md` section |
| gemini-cli, project | `.gemini/settings.json` (`$VAR` references) | `.gemini/.env` (git-ignored) | `GEMINI.md` section |
| gemini-cli, --user | `~/.gemini/settings.json` | `~/.gemini/settings.json` | `~/.gemini/GEMINI.md` section |

Files that usually get committed (`.mcp.json`, `.codex/config.toml`, `.gemini/settings.json`)
only ever refer to the token by name. docs/CODING-AGENTS.md explains each choice.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigurationError
from .edits import Edit, JsonKeys, TextBlock, WholeFile, dotenv_line, read_file, toml_string

SERVER = "hikyaku"
IDENTITY = ("HIKYAKU_URL", "HIKYAKU_AGENT_ID", "HIKYAKU_AGENT_TOKEN")
SKILL = Path(__file__).resolve().parent.parent.parent / "skills" / "hikyaku"


@dataclass(frozen=True)
class Seat:
    url: str
    agent_id: str
    token: str

    def env(self) -> dict[str, str]:
        return dict(zip(IDENTITY, (self.url, self.agent_id, self.token), strict=True))


@dataclass(frozen=True)
class Target:
    """Which client, for whom: a project (`project`) or the user (`home`)."""

    client: str
    user: bool
    project: Path
    home: Path

    @property
    def root(self) -> Path:
        return self.home if self.user else self.project

    @property
    def owner(self) -> str:
        return f"{self.client}:{'user' if self.user else 'project'}:{self.root}"


@dataclass
class Options:
    command: str
    tools: str
    mcp: bool = True
    instructions: bool = True


@dataclass
class Plan:
    edits: list[Edit]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Client:
    name: str
    display: str
    plan: Callable[[Target, Seat, Options], Plan]
    stored: Callable[[Target], dict[str, str]]  # the identity a previous run wrote


def skill_text() -> str:
    return (SKILL / "SKILL.md").read_text()


def instructions_text() -> str:
    return (SKILL / "instructions.md").read_text()


def _block(path: Path, body: str, client: str, purpose: str, **kwargs: Any) -> TextBlock:
    what = f"{purpose} (undo: hikyaku setup --remove {client})"
    return TextBlock(path, body, what=what, **kwargs)


def _md_section(path: Path, client: str) -> TextBlock:
    return _block(path, instructions_text(), client, "how to use the broker", comment="<!--")


def _gitignore(path: Path, pattern: str, client: str) -> TextBlock:
    return _block(path, pattern, client, "keeps the agent token out of git")


def _dotenv(path: Path, seat: Seat, client: str) -> TextBlock:
    body = "\n".join(dotenv_line(k, v) for k, v in seat.env().items())
    return _block(path, body, client, "the agent's identity", secret=True)


def server_entry(options: Options, env: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {**extra, "command": options.command, "args": [], "env": env}


# Claude Code: .mcp.json expands ${VAR:-default} from the environment, and the `env` of
# .claude/settings.local.json is that environment for every session (and its Bash tool, so the
# `hikyaku` CLI acts as the same agent). ~/.claude.json does not expand references, so there
# the server's env holds the values; that file is Claude Code's own and never in a repository.


def _claude_dir(target: Target) -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or target.home / ".claude")


def _claude_json(target: Target) -> Path:
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured) / ".claude.json" if configured else target.home / ".claude.json"


def _claude_plan(target: Target, seat: Seat, options: Options) -> Plan:
    edits: list[Edit] = []
    tools = {"HIKYAKU_MCP_TOOLS": options.tools}
    if target.user:
        if options.mcp:
            entry = server_entry(options, {**seat.env(), **tools}, type="stdio")
            edits.append(JsonKeys(_claude_json(target), ("mcpServers",), {SERVER: entry}, True))
        else:  # the plugin's server expands ${HIKYAKU_*:-} from the user's settings
            edits.append(
                JsonKeys(_claude_dir(target) / "settings.json", ("env",), seat.env(), True)
            )
        skill_dir = _claude_dir(target) / "skills" / SERVER
    else:
        if options.mcp:
            refs = {name: f"${{{name}:-}}" for name in IDENTITY}
            refs["HIKYAKU_URL"] = f"${{HIKYAKU_URL:-{seat.url}}}"
            entry = server_entry(options, {**refs, **tools}, type="stdio")
            edits.append(JsonKeys(target.project / ".mcp.json", ("mcpServers",), {SERVER: entry}))
        settings = target.project / ".claude" / "settings.local.json"
        edits.append(JsonKeys(settings, ("env",), seat.env(), secret=True))
        ignore = target.project / ".claude" / ".gitignore"
        edits.append(_gitignore(ignore, "settings.local.json", target.client))
        skill_dir = target.project / ".claude" / "skills" / SERVER
    if options.instructions:
        edits.append(WholeFile(skill_dir / "SKILL.md", skill_text()))
    notes = ["Start a new Claude Code session (or run /mcp) to load the server."]
    if options.mcp and not target.user:
        notes.append("Claude Code asks once whether to use the project's .mcp.json servers.")
    return Plan(edits, notes)


def _claude_stored(target: Target) -> dict[str, str]:
    if target.user:
        servers = JsonKeys(_claude_json(target), ("mcpServers",), {})
        entry = servers.read(read_file(servers.path)).get(SERVER) or {}
        found = dict(entry.get("env") or {})
        settings = JsonKeys(_claude_dir(target) / "settings.json", ("env",), {})
        return found or settings.read(read_file(settings.path))
    settings = JsonKeys(target.project / ".claude" / "settings.local.json", ("env",), {})
    return settings.read(read_file(settings.path))


# Codex starts MCP servers with a small fixed environment plus what `env_vars` names, and loads
# $CODEX_HOME/.env into its own environment at start: the token lives there, for every scope,
# so one Codex user has one seat. Project configs (.codex/config.toml) count in trusted
# projects only.


def _codex_home(target: Target) -> Path:
    return Path(os.environ.get("CODEX_HOME") or target.home / ".codex")


def _codex_plan(target: Target, seat: Seat, options: Options) -> Plan:
    home = _codex_home(target)
    edits: list[Edit] = [_dotenv(home / ".env", seat, target.client)]
    config = home / "config.toml" if target.user else target.project / ".codex" / "config.toml"
    if options.mcp:
        forwarded = ", ".join(toml_string(name) for name in IDENTITY)
        table = "\n".join(
            [
                f"[mcp_servers.{SERVER}]",
                f"command = {toml_string(options.command)}",
                "args = []",
                f"env = {{ HIKYAKU_MCP_TOOLS = {toml_string(options.tools)} }}",
                f"env_vars = [{forwarded}]",
            ]
        )
        block = _block(config, table, target.client, "the MCP server")
        _refuse_foreign_table(config, block)
        edits.append(block)
    if options.instructions:
        agents_md = home / "AGENTS.md" if target.user else target.project / "AGENTS.md"
        edits.append(_md_section(agents_md, target.client))
    notes = ["Start a new Codex session to load the server (`/mcp` lists it)."]
    if options.mcp and not target.user:
        notes.append("Codex reads .codex/config.toml only in a project you trust.")
    return Plan(edits, notes)


def _refuse_foreign_table(path: Path, ours: TextBlock) -> None:
    """A second [mcp_servers.hikyaku] table would make the file invalid TOML."""
    text = read_file(path)
    if not text:
        return
    without_ours = ours.revert(text, text) or ""
    try:
        parsed = tomllib.loads(without_ours)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML ({exc}); fix it first.") from None
    if SERVER in (parsed.get("mcp_servers") or {}):
        raise ConfigurationError(
            f"{path} already defines [mcp_servers.{SERVER}]; remove that table, then run setup again."
        )


def _codex_stored(target: Target) -> dict[str, str]:
    env = TextBlock(_codex_home(target) / ".env", "")
    return env.read(read_file(env.path))


# Gemini CLI expands $VAR / ${VAR} in settings.json from its environment, which includes the
# first .env it finds walking up from the working directory (.gemini/.env before .env).


def _gemini_plan(target: Target, seat: Seat, options: Options) -> Plan:
    edits: list[Edit] = []
    tools = {"HIKYAKU_MCP_TOOLS": options.tools}
    notes = ["Start a new Gemini CLI session to load the server (`/mcp` lists it)."]
    if target.user:
        if options.mcp:
            entry = server_entry(options, {**seat.env(), **tools})
            path = target.home / ".gemini" / "settings.json"
            edits.append(JsonKeys(path, ("mcpServers",), {SERVER: entry}, secret=True))
        md = target.home / ".gemini" / "GEMINI.md"
    else:
        folder = target.project / ".gemini"
        if options.mcp:
            refs = {name: f"${{{name}}}" for name in IDENTITY}
            entry = server_entry(options, {**refs, **tools})
            edits.append(JsonKeys(folder / "settings.json", ("mcpServers",), {SERVER: entry}))
        edits.append(_dotenv(folder / ".env", seat, target.client))
        edits.append(_gitignore(folder / ".gitignore", ".env", target.client))
        if read_file(folder / ".env") is None and (target.project / ".env").exists():
            notes.append(
                "Gemini CLI loads only the first .env it finds: .gemini/.env now comes before "
                "the project's .env, so move anything Gemini CLI needs from .env into it."
            )
        md = target.project / "GEMINI.md"
    if options.instructions:
        edits.append(_md_section(md, target.client))
    return Plan(edits, notes)


def _gemini_stored(target: Target) -> dict[str, str]:
    if target.user:
        servers = JsonKeys(target.home / ".gemini" / "settings.json", ("mcpServers",), {})
        entry = servers.read(read_file(servers.path)).get(SERVER) or {}
        return dict(entry.get("env") or {})
    env = TextBlock(target.project / ".gemini" / ".env", "")
    return env.read(read_file(env.path))


CLIENTS: dict[str, Client] = {
    client.name: client
    for client in (
        Client("claude-code", "Claude Code", _claude_plan, _claude_stored),
        Client("codex", "Codex", _codex_plan, _codex_stored),
        Client("gemini-cli", "Gemini CLI", _gemini_plan, _gemini_stored),
    )
}


def generic_entry(seat: Seat, options: Options) -> dict[str, Any]:
    """For any other client: the `mcpServers` shape most of them read, values inline."""
    env = {**seat.env(), "HIKYAKU_MCP_TOOLS": options.tools}
    return {"mcpServers": {SERVER: server_entry(options, env)}}
