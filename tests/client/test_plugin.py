"""The Claude Code plugin in the repository: its manifests hold only the fields Claude Code reads
and point at files that exist, and its skill teaches exactly the CLI's commands.

The fields are those of Claude Code's plugin and marketplace references (plugins-reference,
plugin-marketplaces): Claude Code ignores unknown keys with a warning, so a typo would load
silently; these tests refuse them instead."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from hikyaku_client.cli import build_parser
from tests.client.conftest import HIKYAKU, base_env
from tests.live import ROOT

PLUGIN_DIR = ROOT / ".claude-plugin"
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
PERSON = {"name", "email", "url"}
PLUGIN_FIELDS = {
    "$schema", "name", "version", "description", "author", "homepage", "repository", "license",
    "keywords", "commands", "agents", "skills", "hooks", "mcpServers", "outputStyles",
    "lspServers", "userConfig",
}  # fmt: skip
COMPONENT_PATHS = {"commands", "agents", "skills", "hooks", "outputStyles", "lspServers"}
MARKETPLACE_FIELDS = {"$schema", "name", "owner", "metadata", "plugins", "description", "version"}
ENTRY_FIELDS = PLUGIN_FIELDS | {"source", "category", "tags", "strict"}
SERVER_FIELDS = {"type", "command", "args", "env", "cwd"}
# Claude Code fails to load a server whose ${VAR} has no default and is unset.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")


def load(name: str) -> dict:
    return json.loads((PLUGIN_DIR / name).read_text())


def plugin_path(value: str) -> Path:
    assert value.startswith("./"), f"component paths are relative and start with ./: {value!r}"
    path = (ROOT / value).resolve()
    assert ROOT in path.parents or path == ROOT, f"{value!r} leaves the plugin"
    return path


def test_plugin_manifest_holds_the_fields_claude_code_reads():
    manifest = load("plugin.json")
    assert set(manifest) <= PLUGIN_FIELDS, set(manifest) - PLUGIN_FIELDS
    assert KEBAB.match(manifest["name"]) and len(manifest["name"]) <= 64
    assert SEMVER.match(manifest["version"])
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert manifest["version"] == version  # one version for the package and the plugin
    assert isinstance(manifest["description"], str) and manifest["description"]
    assert set(manifest["author"]) <= PERSON and manifest["author"]["name"]
    assert all(isinstance(k, str) for k in manifest["keywords"])
    for key in COMPONENT_PATHS & set(manifest):
        values = manifest[key] if isinstance(manifest[key], list) else [manifest[key]]
        for value in values:
            assert plugin_path(value).exists(), f"{key}: {value} does not exist"


def test_plugin_declares_the_stdio_server_with_identity_from_the_environment():
    servers = load("plugin.json")["mcpServers"]
    assert set(servers) == {"hikyaku"}
    server = servers["hikyaku"]
    assert set(server) <= SERVER_FIELDS
    assert server.get("type", "stdio") == "stdio"
    assert server["command"].endswith("hikyaku-mcp}") or server["command"] == "hikyaku-mcp"
    assert all(isinstance(arg, str) for arg in server["args"])
    env = server["env"]
    assert {"HIKYAKU_URL", "HIKYAKU_AGENT_ID", "HIKYAKU_AGENT_TOKEN", "HIKYAKU_MCP_TOOLS"} <= set(
        env
    )
    for name, value in [("command", server["command"]), *env.items()]:
        references = REFERENCE.findall(value)
        assert all(default for _var, default in references), f"{name}: {value} needs a default"
        assert "hka_" not in value and "hky_" not in value  # no credential in the plugin
    assert REFERENCE.fullmatch(env["HIKYAKU_AGENT_TOKEN"])  # only ever from the environment


def test_marketplace_lists_the_plugin_at_the_repository_root():
    marketplace = load("marketplace.json")
    assert set(marketplace) <= MARKETPLACE_FIELDS
    assert KEBAB.match(marketplace["name"])
    assert set(marketplace["owner"]) <= PERSON and marketplace["owner"]["name"]
    (entry,) = marketplace["plugins"]
    assert set(entry) <= ENTRY_FIELDS
    assert entry["source"] == "./"  # relative sources resolve from the marketplace root
    root = plugin_path(entry["source"])
    manifest = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
    assert entry["name"] == manifest["name"]
    assert "version" not in entry  # plugin.json's version is the one Claude Code uses


def skills() -> list[Path]:
    folder = plugin_path(load("plugin.json")["skills"])
    found = sorted(folder.glob("*/SKILL.md"))
    assert found, f"no skill under {folder}"
    return found


def front_matter(path: Path) -> tuple[dict[str, str], str]:
    text = path.read_text()
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    assert match, f"{path} has no front matter"
    fields = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        assert sep, f"{path}: front matter line {line!r}"
        fields[key.strip()] = value.strip()
    return fields, match.group(2)


def test_each_skill_has_the_front_matter_claude_code_reads():
    for path in skills():
        fields, body = front_matter(path)
        assert set(fields) <= {"name", "description", "allowed-tools", "license", "metadata"}
        assert fields["name"] == path.parent.name and KEBAB.match(fields["name"])
        assert 20 < len(fields["description"]) <= 1024
        assert body.strip()


SKILL = ROOT / "hikyaku_client" / "skills" / "hikyaku" / "SKILL.md"
INVOCATION = re.compile(r"(?:^|\$\()\s*(hikyaku\s[^|)\n]*)", re.MULTILINE)


def skill_examples() -> list[str]:
    """Every `hikyaku …` command line in the skill's shell blocks."""
    text = SKILL.read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    return [m.strip() for block in blocks for m in INVOCATION.findall(block)]


def cli_commands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return set(sub.choices)


def test_the_skill_shows_exactly_the_clis_commands():
    parser = build_parser()
    shown: set[str] = set()
    for line in skill_examples():
        words = shlex.split(line.replace("$", "X"))  # variables stand for ids
        try:
            args = parser.parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"the skill's example does not parse: {line}")
        shown.add(args.command)
    assert shown == cli_commands(), (
        f"missing from SKILL.md: {sorted(cli_commands() - shown)}; "
        f"not commands: {sorted(shown - cli_commands())}"
    )


def test_each_command_of_the_skill_has_help(capsys):
    from hikyaku_client.cli import main

    for command in sorted(cli_commands()):
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: hikyaku {command}")
        assert f"hikyaku {command}" in SKILL.read_text()


def test_the_console_script_runs_the_same_parser():
    result = subprocess.run(
        [HIKYAKU, "setup", "--help"], env=base_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: hikyaku setup")


def test_the_instructions_section_names_only_real_commands_and_tools():
    from hikyaku_client.mcp_profiles import ALL

    text = (SKILL.parent / "instructions.md").read_text()
    for line in re.findall(r"`(hikyaku [^`]*)`", text):
        if not line.endswith("--help"):
            assert build_parser().parse_args(shlex.split(line)[1:]).command in cli_commands()
    for word in re.findall(r"`([a-z_]+)`", text):
        assert word in set(ALL) | cli_commands() | {"hikyaku"}, word
