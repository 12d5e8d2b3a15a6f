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
    """Who sends or acts: a tenant agent, or an external A2A caller (docs/PROTOCOL.md §8)."""

    tenant: Tenant
    agent: Agent | None
    caller_id: str = ""

    @property
    def label(self) -> str:
        return self.agent.name if self.agent else f"external:{self.caller_id}"


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
