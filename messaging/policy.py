"""Who may talk to whom (docs/PROTOCOL.md §4.5), as one definition rendered two ways.

The rules are data: `DELIVER` (may a message go from its sender to its recipient) and `READ`
(may a party of a task still see and act on it). Each is rendered

- in Python (`holds`, and `may_deliver` / `may_read` on top of it) for the rows a request
  already holds;
- as a SQL condition (`sql`) that the hand-written statements embed, for Postgres and for
  SQLite, where a party is a row of the statement (the recipient a send locks, the peer of a
  listed task) and the other is known.

A term about a party known in Python is decided while rendering, so a statement carries only
what depends on its rows. A refusal is reported by callers exactly like "not found".
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.db import connection

from agents.models import SENSITIVITY_RANK, Agent, Sensitivity

if TYPE_CHECKING:
    from .models import Task

ANYONE = "*"


# The rules --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Admits:
    """`party`'s disclosure ceiling admits the message's sensitivity."""

    party: str


@dataclass(frozen=True)
class Lists:
    """`owner`'s allow-list `field` names `member` (or anyone)."""

    owner: str
    field: str
    member: str


@dataclass(frozen=True)
class External:
    """The sender is an external A2A caller, not an agent of the tenant."""


@dataclass(frozen=True)
class ToSelf:
    """The sender is the recipient."""


@dataclass(frozen=True)
class NoRecipient:
    """The task has no recipient (a broadcast summary)."""


@dataclass(frozen=True)
class All:
    terms: tuple


@dataclass(frozen=True)
class AnyOf:
    terms: tuple


SENDER, RECIPIENT, READER = "sender", "recipient", "reader"
RELATION = All((Lists(SENDER, "send_to", RECIPIENT), Lists(RECIPIENT, "receive_from", SENDER)))
DELIVER = All((Admits(RECIPIENT), AnyOf((External(), All((Admits(SENDER), RELATION))))))
# Read by a party of the task (the reader is its sender or its recipient).
READ = All((Admits(READER), AnyOf((External(), NoRecipient(), ToSelf(), RELATION))))


@dataclass(frozen=True)
class _Op:
    """Terms left undecided after folding the known ones: all of them, or any."""

    all: bool
    parts: list


def _fold(rule, leaf) -> Any:
    """`rule` with every term replaced by `leaf(term)`: True, False or a fragment of the
    rendering at hand. Decided terms fold away; what remains is a fragment or an `_Op`."""
    if isinstance(rule, All | AnyOf):
        is_all = isinstance(rule, All)
        parts = []
        for term in rule.terms:
            value = _fold(term, leaf)
            if value is (not is_all):  # False in an All, True in an AnyOf: decided
                return value
            if value is not is_all:
                parts.append(value)
        if not parts:
            return is_all
        return parts[0] if len(parts) == 1 else _Op(is_all, parts)
    return leaf(rule)


def _rank(level: str) -> int:
    return SENSITIVITY_RANK.get(level, SENSITIVITY_RANK[Sensitivity.INTERNAL])


def _id(party: Any) -> str:
    return str(getattr(party, "id", party))


def _names(allow_list: list[str] | None, member: Any) -> bool:
    allowed = allow_list if allow_list is not None else [ANYONE]
    return ANYONE in allowed or _id(member) in allowed


# Python -------------------------------------------------------------------------------------


def holds(rule, *, sender: Any, recipient: Any, sensitivity: str, reader: Any = None) -> bool:
    """`rule` for known parties: Agents (or bare ids, where only their id matters), None for
    an external sender or a summary's missing recipient."""
    parties = {SENDER: sender, RECIPIENT: recipient, READER: reader}

    def leaf(term) -> bool:
        if isinstance(term, Admits):
            party = parties[term.party]
            return party is None or _rank(sensitivity) <= _rank(party.disclosure_ceiling)
        if isinstance(term, Lists):
            owner, member = parties[term.owner], parties[term.member]
            return owner is None or member is None or _names(getattr(owner, term.field), member)
        if isinstance(term, External):
            return sender is None
        if isinstance(term, ToSelf):
            return sender is not None and recipient is not None and _id(sender) == _id(recipient)
        if isinstance(term, NoRecipient):
            return recipient is None
        raise TypeError(term)

    return _evaluate(_fold(rule, leaf))


def _evaluate(value) -> bool:
    if isinstance(value, bool):
        return value
    decide = all if value.all else any
    return decide(_evaluate(part) for part in value.parts)


def may_deliver(sender: Agent | None, recipient: Agent, sensitivity: str) -> bool:
    """Whether `sender` (None: an external caller) may deliver a message to `recipient`."""
    return holds(DELIVER, sender=sender, recipient=recipient, sensitivity=sensitivity)


def may_read(agent: Agent | None, task: Task) -> bool:
    """Whether a party of `task` (None: an external caller) may still see and act on it,
    with the task's `sender` and `recipient` rows loaded."""
    if agent is None:
        return True
    return holds(
        READ,
        sender=task.sender if task.sender_id is not None else None,
        recipient=task.recipient if task.recipient_id is not None else None,
        reader=agent,
        sensitivity=task.sensitivity,
    )


def within_ceiling(agent: Agent, sensitivity: str) -> bool:
    return _rank(sensitivity) <= _rank(agent.disclosure_ceiling)


def allows_anyone(allow_list: list[str] | None) -> bool:
    return allow_list is None or ANYONE in allow_list


# SQL ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """A party that is an agents_agent row of the statement, under `alias`; `key` is the
    column holding its id where the row may be missing (a LEFT JOIN: an external sender)."""

    alias: str
    key: str = ""

    @property
    def id(self) -> str:
        return self.key or f"{self.alias}.id"


@dataclass(frozen=True)
class Column:
    """The message's sensitivity as a column of the statement."""

    name: str


@dataclass(frozen=True)
class _Known:
    """What the rules read of an agent known in Python, as a key of `_rendered`."""

    id: str
    disclosure_ceiling: str
    send_to: tuple[str, ...] | None
    receive_from: tuple[str, ...] | None


def _known(party: Any) -> Any:
    if not isinstance(party, Agent):
        return party
    return _Known(
        str(party.id),
        party.disclosure_ceiling,
        None if party.send_to is None else tuple(party.send_to),
        None if party.receive_from is None else tuple(party.receive_from),
    )


def sql(
    rule, *, sender: Any, recipient: Any, sensitivity: str | Column, reader: Any = None
) -> tuple[str, list]:
    """`rule` as a condition for this connection's database (Postgres or SQLite): each party
    is a `Row` of the statement or known (an Agent, or None as in `holds`); the sensitivity
    is the message's, or a `Column`. Returns ("TRUE"/"FALSE" or a condition, params).

    A rendering is kept by everything it reads — the rule, the rows, the known agents' ids,
    ceilings and allow-lists, the sensitivity, the database — so an agent whose policy
    changed is rendered anew, and the same text comes back for the same inputs."""
    text, params = _rendered(
        rule, _known(sender), _known(recipient), sensitivity, _known(reader), connection.vendor
    )
    return text, list(params)


@lru_cache(maxsize=4096)
def _rendered(
    rule, sender: Any, recipient: Any, sensitivity: str | Column, reader: Any, vendor: str
) -> tuple[str, tuple]:
    parties = {SENDER: sender, RECIPIENT: recipient, READER: reader}
    postgres = vendor == "postgresql"

    def leaf(term):
        if isinstance(term, Admits):
            party = parties[term.party]
            if isinstance(sensitivity, Column):
                if isinstance(party, Row):
                    raise NotImplementedError("a ceiling against a column is not rendered")
                if party is None:
                    return True
                levels = [level for level in SENSITIVITY_RANK if within_ceiling(party, level)]
                return (f"{sensitivity.name} IN ({_marks(levels)})", levels)
            if not isinstance(party, Row):
                return party is None or _rank(sensitivity) <= _rank(party.disclosure_ceiling)
            levels = [
                level for level, rank in SENSITIVITY_RANK.items() if rank >= _rank(sensitivity)
            ]
            return (f"{party.alias}.disclosure_ceiling IN ({_marks(levels)})", levels)
        if isinstance(term, Lists):
            owner, member = parties[term.owner], parties[term.member]
            if owner is None or member is None:
                return True
            if not isinstance(owner, Row):
                if isinstance(member, Row):
                    return _member_of(member, getattr(owner, term.field))
                return _names(getattr(owner, term.field), member)
            column = f"{owner.alias}.{term.field}"
            if isinstance(member, Row):
                raise NotImplementedError("a rule between two rows is not rendered")
            if postgres:
                return (
                    f"({column} @> '[\"*\"]'::jsonb OR {column} @> jsonb_build_array(%s::text))",
                    [_id(member)],
                )
            return (
                f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value IN ('*', %s))",
                [_id(member)],
            )
        if isinstance(term, External):
            return _absent(sender)
        if isinstance(term, NoRecipient):
            return _absent(recipient)
        if isinstance(term, ToSelf):
            rows_of = [p for p in (sender, recipient) if isinstance(p, Row)]
            if len(rows_of) == 2:
                raise NotImplementedError("ToSelf between two rows is not rendered")
            if rows_of:
                known = recipient if rows_of[0] is sender else sender
                if known is None:
                    return False
                return (f"{rows_of[0].id} = %s", [_prep_id(_id(known))])
            return sender is not None and recipient is not None and _id(sender) == _id(recipient)
        raise TypeError(term)

    text, params = _to_sql(_fold(rule, leaf))
    return text, tuple(params)


def _absent(party: Any):
    if isinstance(party, Row):
        return f"{party.key} IS NULL" if party.key else False
    return party is None


def _member_of(member: Row, allow_list: list[str] | None):
    if allows_anyone(allow_list):
        return True
    ids = [_prep_id(value) for value in allow_list or []]
    ids = [value for value in ids if value is not None]
    if not ids:
        return False
    return (f"{member.id} IN ({_marks(ids)})", ids)


def _prep_id(value: str) -> Any:
    try:
        return Agent._meta.pk.get_db_prep_value(uuid.UUID(str(value)), connection)
    except ValueError:
        return None


def _marks(values: list) -> str:
    return ", ".join(["%s"] * len(values))


def _to_sql(value) -> tuple[str, list]:
    if isinstance(value, bool):
        return ("TRUE" if value else "FALSE"), []
    if isinstance(value, str):
        return value, []
    if isinstance(value, _Op):
        rendered = [_to_sql(part) for part in value.parts]
        text = (" AND " if value.all else " OR ").join(f"({s})" for s, _ in rendered)
        return text, [p for _, params in rendered for p in params]
    return value
