"""What a tenant file may say (docs/TENANTFILE.md), checked strictly, each problem on its line.

Field values go through the REST API's own validators (the registration serializer's fields,
the policy's ceilings, the SSRF guard on webhook URLs), so a file accepts exactly what the API
accepts. `check` needs no database; `check_against` adds what only the tenant's live agents
can tell: names that must be unique, and relations naming agents outside the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify
from rest_framework import serializers

from hikyaku.errors import InvalidRequest

from ..api import SkillsField, StrictCharField
from ..destinations import check_url
from ..models import Agent, Sensitivity
from ..services import MAX_ALLOW_LIST
from .parse import Document, Path

VERSION = 1
TOP_KEYS = ("version", "tenant", "agents")
TENANT_KEYS = ("slug", "name")
AGENT_KEYS = (
    "name",
    "description",
    "skills",
    "public",
    "status",
    "send_to",
    "receive_from",
    "disclosure_ceiling",
    "webhook_url",
)
RELATIONS = ("send_to", "receive_from")
ANYONE = "*"


@dataclass(frozen=True)
class AgentSpec:
    """One agent as the file wants it. Relations are agent names, or {"*"} for anyone."""

    name: str
    description: str
    skills: list[dict[str, Any]]
    public: bool
    status: str
    send_to: frozenset[str]
    receive_from: frozenset[str]
    disclosure_ceiling: str
    webhook_url: str
    index: int  # position in the file's `agents` list


@dataclass
class TenantFile:
    slug: str
    name: str
    agents: list[AgentSpec] = field(default_factory=list)  # the valid ones
    # (index, name, entry) of every agent entry with a name, valid or not, so the checks
    # against the tenant report everything in one pass.
    entries: list[tuple[int, str, dict]] = field(default_factory=list)

    def names(self) -> set[str]:
        return {name for _, name, _ in self.entries}


class StrictBooleanField(serializers.BooleanField):
    """true or false, not "yes" or 1."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class RelationField(serializers.ListField):
    child = StrictCharField(max_length=200, min_length=1, trim_whitespace=True)


class AgentIn(serializers.Serializer):
    name = StrictCharField(max_length=200, min_length=1, trim_whitespace=True)
    description = StrictCharField(
        max_length=2000, allow_blank=True, trim_whitespace=False, required=False, default=""
    )
    skills = SkillsField(required=False, default=list)
    public = StrictBooleanField(required=False, default=False)
    status = serializers.ChoiceField(
        choices=[Agent.Status.ACTIVE, Agent.Status.DISABLED], required=False, default="active"
    )
    send_to = RelationField(required=False, default=[ANYONE], max_length=MAX_ALLOW_LIST)
    receive_from = RelationField(required=False, default=[ANYONE], max_length=MAX_ALLOW_LIST)
    disclosure_ceiling = serializers.ChoiceField(
        choices=Sensitivity.values, required=False, default=Sensitivity.INTERNAL
    )
    # Checked below by agents.destinations, as every stored URL is.
    webhook_url = StrictCharField(allow_blank=True, required=False, default="")


def check(document: Document) -> TenantFile | None:
    """The file's content, or None when it is not shaped like a tenant file. Problems are
    added to `document.problems`; the result is only trustworthy when there are none."""
    data = document.data
    if document.problems and data is None:
        return None
    if not isinstance(data, dict):
        document.problem((), "a tenant file is a mapping with version, tenant and agents")
        return None
    _known_keys(document, (), data, TOP_KEYS, "the file")
    _version(document, data)
    slug, name = _tenant(document, data.get("tenant"))
    result = TenantFile(slug=slug, name=name)
    agents = data.get("agents")
    if "agents" not in data:
        document.problem((), "missing key 'agents' (a list, possibly empty)")
    elif not isinstance(agents, list):
        document.problem(("agents",), "'agents' must be a list")
    else:
        first_line: dict[str, int] = {}
        for index, raw in enumerate(agents):
            spec = _agent(document, index, raw)
            name = raw.get("name") if isinstance(raw, dict) else None
            if not isinstance(name, str) or not name.strip():
                continue
            name, line = name.strip(), document.line(("agents", index, "name"))
            if name in first_line:
                document.problem(
                    ("agents", index, "name"),
                    f"duplicate agent name {name!r} (first at line {first_line[name]})",
                )
                continue
            first_line[name] = line
            result.entries.append((index, name, raw))
            if spec is not None:
                result.agents.append(spec)
    return result


def check_against(
    document: Document,
    tenant_file: TenantFile,
    live_agents: Iterable[Agent],
    *,
    prune: bool = False,
) -> None:
    """Problems only the tenant's live (active or disabled) agents reveal: relations to
    agents that are neither in the file nor live in the tenant (names are unique among live
    agents, docs/PROTOCOL.md §1)."""
    live_names = {agent.name for agent in live_agents}
    in_file = tenant_file.names()
    for index, name, entry in tenant_file.entries:
        for relation in RELATIONS:
            targets = entry.get(relation)
            if not isinstance(targets, list):
                continue
            for position, target in enumerate(targets):
                if not isinstance(target, str) or not target.strip():
                    continue
                target = target.strip()
                path = ("agents", index, relation, position)
                if target == ANYONE or target in in_file:
                    continue
                where = f"agent {name!r}: {relation}"
                if target not in live_names:
                    document.problem(
                        path,
                        f"{where} names {target!r}, which is neither in this file nor a "
                        f"live agent of tenant {tenant_file.slug!r}",
                    )
                elif prune:
                    document.problem(
                        path,
                        f"{where} names {target!r}, which is not in this file, so --prune "
                        "would deregister it",
                    )


def _known_keys(document: Document, path: Path, data: dict, known: tuple, where: str) -> None:
    for key in data:
        if key not in known:
            document.problem(
                (*path, key), f"unknown key {key!r} in {where} (expected: {', '.join(known)})"
            )


def _version(document: Document, data: dict) -> None:
    if "version" not in data:
        document.problem((), f"missing key 'version' (this release reads version {VERSION})")
        return
    version = data["version"]
    if isinstance(version, bool) or version != VERSION:
        document.problem(
            ("version",),
            f"unsupported version {version!r}: this release reads version {VERSION}",
        )


def _tenant(document: Document, tenant: Any) -> tuple[str, str]:
    if tenant is None:
        document.problem(("tenant",), "missing mapping 'tenant' with its slug and name")
        return "", ""
    if not isinstance(tenant, dict):
        document.problem(("tenant",), "'tenant' must be a mapping with slug and name")
        return "", ""
    _known_keys(document, ("tenant",), tenant, TENANT_KEYS, "tenant")
    slug, name = tenant.get("slug"), tenant.get("name", "")
    if not isinstance(slug, str) or not slug or slugify(slug) != slug or len(slug) > 64:
        document.problem(
            ("tenant", "slug"),
            "tenant.slug must be a slug: lowercase letters, digits, '-' or '_' (at most 64)",
        )
        slug = ""
    if not isinstance(name, str) or len(name) > 200:
        document.problem(("tenant", "name"), "tenant.name must be text of at most 200 characters")
        name = ""
    return slug, name.strip()  # "" when left out: a new tenant is named after its slug


def _agent(document: Document, index: int, raw: Any) -> AgentSpec | None:
    path: Path = ("agents", index)
    if not isinstance(raw, dict):
        document.problem(path, "each agent must be a mapping with at least a name")
        return None
    _known_keys(document, path, raw, AGENT_KEYS, "an agent")
    data = AgentIn(data={k: v for k, v in raw.items() if k in AGENT_KEYS})
    valid = data.is_valid()
    label = raw.get("name") if isinstance(raw.get("name"), str) else f"#{index + 1}"
    errors = data.errors if not valid else {}
    for field_path, message in _flatten(errors):
        document.problem((*path, *field_path), f"agent {label!r}: {field_path[0]}: {message}")
    url = raw.get("webhook_url")
    if "webhook_url" not in errors and isinstance(url, str) and url:
        try:
            check_url(url, field="webhook_url")  # the SSRF guard, as when the API stores one
        except InvalidRequest as exc:
            document.problem((*path, "webhook_url"), f"agent {label!r}: {exc.message}")
            return None
    if not valid:
        return None
    values = data.validated_data
    return AgentSpec(
        name=values["name"],
        description=values["description"],
        skills=values["skills"],
        public=values["public"],
        status=values["status"],
        send_to=_relation(values["send_to"]),
        receive_from=_relation(values["receive_from"]),
        disclosure_ceiling=values["disclosure_ceiling"],
        webhook_url=values["webhook_url"],
        index=index,
    )


def _relation(names: list[str]) -> frozenset[str]:
    # As the policy service stores it: "*" anywhere allows anyone.
    return frozenset({ANYONE}) if ANYONE in names else frozenset(names)


def _flatten(errors: Any, path: tuple = ()) -> list[tuple[tuple, str]]:
    """DRF's nested error structure as (path below the agent, message) pairs."""
    if isinstance(errors, dict):
        return [pair for key, value in errors.items() for pair in _flatten(value, (*path, key))]
    if isinstance(errors, list):
        if all(not isinstance(e, dict | list) for e in errors):
            return [(path, " ".join(str(e) for e in errors))]
        return [pair for value in errors for pair in _flatten(value, path)]
    return [(path, str(errors))]
