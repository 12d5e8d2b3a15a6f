"""Who may talk to whom (docs/PROTOCOL.md §4.5): allow-lists and disclosure ceilings.

Every send, read and transition asks these functions, so narrowing a policy closes access to
history too. A refusal is reported by callers exactly like "not found".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Q

from agents.models import SENSITIVITY_RANK, Agent

if TYPE_CHECKING:
    from .models import Task


def _allows(allow_list: list[str] | None, agent_id: object) -> bool:
    allowed = allow_list if allow_list is not None else ["*"]
    return "*" in allowed or str(agent_id) in allowed


def allows_anyone(allow_list: list[str] | None) -> bool:
    return _allows(allow_list, "*")


def within_ceiling(agent: Agent, sensitivity: str) -> bool:
    return SENSITIVITY_RANK.get(sensitivity, 1) <= SENSITIVITY_RANK.get(agent.disclosure_ceiling, 1)


def may_deliver(sender: Agent | None, recipient: Agent, sensitivity: str) -> bool:
    """Whether `sender` (None: an external caller) may deliver a message to `recipient`."""
    if not within_ceiling(recipient, sensitivity):
        return False
    if sender is None:
        return True
    return (
        within_ceiling(sender, sensitivity)
        and _allows(sender.send_to, recipient.id)
        and _allows(recipient.receive_from, sender.id)
    )


def sender_may_send(sender: Agent | None, recipient_id: object, sensitivity: str) -> bool:
    """The sender's half of `may_deliver`, checkable before the recipient row is read."""
    if sender is None:
        return True
    return within_ceiling(sender, sensitivity) and _allows(sender.send_to, recipient_id)


def recipient_accepts_sql(table: str, sender: Agent | None, sensitivity: str) -> tuple[str, list]:
    """The recipient's half of `may_deliver` as a Postgres condition on `table` (an
    agents_agent row), for sends that lock and check the recipient in one statement. It must
    say exactly what `within_ceiling(recipient, …)` and `receive_from` say above."""
    ranks = " ".join(f"WHEN '{level}' THEN {rank}" for level, rank in SENSITIVITY_RANK.items())
    sql = f"(CASE {table}.disclosure_ceiling {ranks} ELSE 1 END) >= %s"
    params: list = [SENSITIVITY_RANK.get(sensitivity, 1)]
    if sender is not None:
        sql += (
            f" AND ({table}.receive_from @> '[\"*\"]'::jsonb"
            f" OR {table}.receive_from @> jsonb_build_array(%s::text))"
        )
        params.append(str(sender.id))
    return sql, params


def may_read(agent: Agent | None, task: Task) -> bool:
    """Whether a party of `task` may still see and act on it under the current policy."""
    if agent is None:
        return True
    if not within_ceiling(agent, task.sensitivity):
        return False
    if task.sender_id is None or task.recipient_id is None or task.sender_id == task.recipient_id:
        return True
    if agent.id == task.sender_id:
        return _allows(agent.send_to, task.recipient_id) and _peer_allows(
            task.recipient, "receive_from", agent.id
        )
    return _allows(agent.receive_from, task.sender_id) and _peer_allows(
        task.sender, "send_to", agent.id
    )


def _peer_allows(peer: Agent | None, field: str, agent_id: object) -> bool:
    return peer is None or _allows(getattr(peer, field), agent_id)


def _restricted_peers(agent: Agent) -> list[tuple[str, list[str], list[str]]]:
    """(id, send_to, receive_from) of the tenant's agents whose allow-lists are not the
    default ["*"]: usually none or a handful. Allow-lists are stored normalised by
    agents.services.set_agent_policy, so "allows anyone" is exactly ["*"]."""
    rows = (
        Agent.objects.filter(tenant_id=agent.tenant_id)
        .exclude(send_to=["*"], receive_from=["*"])
        .values_list("id", "send_to", "receive_from")
    )
    return [(str(pk), send_to, receive_from) for pk, send_to, receive_from in rows]


def readable_q(
    agent: Agent | None,
    *,
    sender_field: str = "sender_id",
    recipient_field: str = "recipient_id",
    sensitivity_field: str = "sensitivity",
) -> Q:
    """`may_read` as a filter, for tasks (or events, through their field names) that `agent`
    is a party of, so lists, counts and pages are exact. One small query (the restricted
    peers). Callers still restrict to the agent's own tasks themselves."""
    if agent is None:
        return Q()
    me = str(agent.id)
    ceiling = SENSITIVITY_RANK.get(agent.disclosure_ceiling, 1)
    allowed_levels = [level for level, rank in SENSITIVITY_RANK.items() if rank <= ceiling]
    q = Q(**{f"{sensitivity_field}__in": allowed_levels})
    restricted = _restricted_peers(agent)
    # Peers whose own lists exclude me: as senders to me, as recipients of mine.
    senders_refusing = [pk for pk, send_to, _ in restricted if not _allows(send_to, me)]
    recipients_refusing = [
        pk for pk, _, receive_from in restricted if not _allows(receive_from, me)
    ]

    as_recipient = Q(**{recipient_field: agent.id})
    inbound = Q(**{f"{sender_field}__isnull": True}) | Q(**{sender_field: agent.id})
    inbound_ok = ~Q(**{f"{sender_field}__in": senders_refusing})
    if not _allows(agent.receive_from, "*"):
        inbound_ok &= Q(**{f"{sender_field}__in": agent.receive_from or []})
    as_sender = Q(**{sender_field: agent.id})
    outbound = Q(**{f"{recipient_field}__isnull": True}) | Q(**{recipient_field: agent.id})
    outbound_ok = ~Q(**{f"{recipient_field}__in": recipients_refusing})
    if not _allows(agent.send_to, "*"):
        outbound_ok &= Q(**{f"{recipient_field}__in": agent.send_to or []})
    return q & ((as_recipient & (inbound | inbound_ok)) | (as_sender & (outbound | outbound_ok)))
