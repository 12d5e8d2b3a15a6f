"""Who acts on the messaging core, and in which role (docs/PROTOCOL.md §4.4, §8).

A value module: the write services, the selectors and every protocol surface import it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.models import Agent
    from tenants.models import Tenant

    from .models import Task


@dataclass(frozen=True)
class Sender:
    """Who sends or acts: a tenant agent, an external A2A caller (docs/PROTOCOL.md §8), or a
    person of the tenant acting for one of its agents from the web UI (`person`: their
    e-mail; the agent's role, policy and addresses are the ones that apply)."""

    tenant: Tenant
    agent: Agent | None
    caller_id: str = ""
    person: str = ""
    # Set when the agent's identity was recalled from the process's identity cache
    # (agents/auth.py): an SQL condition and its parameters that every write made for this
    # sender checks in its own statement; the write services refuse to write without it.
    check: tuple[str, list] | None = None


PERSON = "person:"
EXTERNAL = "external:"


def actor_label(sender: Sender) -> str:
    """What an event row keeps beside its actor agent (docs/PROTOCOL.md, "Event"): the person
    who acted for the agent, the external caller who acted without one, or nothing."""
    if sender.person:
        return f"{PERSON}{sender.person}"
    return "" if sender.agent else f"{EXTERNAL}{sender.caller_id}"


def person_of(label: str) -> str:
    """The person an event's `actor_label` names; empty when an agent or caller acted."""
    return label[len(PERSON) :] if label.startswith(PERSON) else ""


def actor_display(agent_name: str | None, label: str) -> str:
    """How people read an event's actor: "alice", "ann@example.com for alice",
    "external:ci-7", or "system" (retention, an administrator)."""
    person = person_of(label)
    if person:
        return f"{person} for {agent_name}" if agent_name else person
    return agent_name or label or "system"


def party_roles(sender: Sender, task: Task) -> set[str]:
    """The roles ("sender", "recipient", both for a task sent to oneself) `sender` holds on
    `task`; empty for anyone else."""
    roles = set()
    if sender.agent is not None:
        if task.sender_id == sender.agent.id:
            roles.add("sender")
        if task.recipient_id == sender.agent.id:
            roles.add("recipient")
    elif task.sender_id is None and task.caller_id and task.caller_id == sender.caller_id:
        roles.add("sender")
    return roles
