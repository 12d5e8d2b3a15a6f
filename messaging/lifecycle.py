"""The task lifecycle as one definition (docs/PROTOCOL.md §4.4, docs/ARCHITECTURE.md "One
write path").

A task is always in one of seven phases: the stored state, plus whose turn it is for the one
A2A state (INPUT_REQUIRED) that means two things. The phases are also the one vocabulary
people read and type (README, "Task states"). Every action a party can take is a row of
`TRANSITIONS`: who may take it, from which phases, into which phase, and what its message
becomes. Everything else derives from these tables: the services' decisions and refusals
(`refusal`, `apply`), the compare-and-set the stores run (messaging/store), the model's check
constraints and index conditions, the per-agent endpoints' view (`awaiting_after`,
`interrupts`), the stream snapshots (`replays_follow_up`) and the human timelines
(`after_event`). No other module spells a state or whose-turn literal.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import models

from hikyaku.errors import HikyakuError, TaskNotCancelable, UnsupportedOperation


class TaskState(models.TextChoices):
    """The stored state (its A2A 1.0 wire name is TASK_STATE_<NAME>)."""

    INPUT_REQUIRED = "input_required", "Input required"
    WORKING = "working", "Working"
    COMPLETED = "completed", "Completed"
    REJECTED = "rejected", "Rejected"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


class Awaiting(models.TextChoices):
    """Whose turn it is while the task is INPUT_REQUIRED (`metadata.awaiting` on the wire)."""

    NOBODY = "", "Nobody"
    RECIPIENT = "recipient", "Recipient"
    SENDER = "sender", "Sender"


class EventKind(models.TextChoices):
    """What an event row records: the task's creation, or the action that changed it."""

    CREATED = "created", "Created"
    ACK = "ack", "Acknowledged"
    ACCEPT = "accept", "Accepted"
    COMPLETE = "complete", "Completed"
    REJECT = "reject", "Rejected"
    FAIL = "fail", "Failed"
    BLOCK = "block", "Blocked (question to the sender)"
    REPLY = "reply", "Replied"
    COMMENT = "comment", "Commented"
    CANCEL = "cancel", "Canceled"


class Role(StrEnum):
    SENDER = "sender"
    RECIPIENT = "recipient"


@dataclass(frozen=True)
class Phase:
    """A task's state and whose turn it is, named as people read it."""

    name: str  # what people type and read: "unread"
    label: str  # the web UI's badge and filter tab
    state: TaskState
    awaiting: Awaiting
    meaning: str

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def turn(self) -> str | None:
        """Whose turn a filter on this phase must also require; None where the state alone
        names the phase."""
        return self.awaiting if self.state == TaskState.INPUT_REQUIRED else None


UNREAD = Phase(
    "unread",
    "Unread",
    TaskState.INPUT_REQUIRED,
    Awaiting.RECIPIENT,
    "delivered; its recipient has not acted on it yet",
)
WORKING = Phase(
    "working", "Working", TaskState.WORKING, Awaiting.NOBODY, "the recipient is working on it"
)
BLOCKED = Phase(
    "blocked",
    "Blocked",
    TaskState.INPUT_REQUIRED,
    Awaiting.SENDER,
    "the recipient asked the sender a question and waits for the reply",
)
COMPLETED = Phase(
    "completed", "Completed", TaskState.COMPLETED, Awaiting.NOBODY, "done, with any result"
)
REJECTED = Phase(
    "rejected", "Rejected", TaskState.REJECTED, Awaiting.NOBODY, "the recipient declined it"
)
FAILED = Phase(
    "failed", "Failed", TaskState.FAILED, Awaiting.NOBODY, "the recipient could not do it"
)
CANCELED = Phase(
    "canceled", "Canceled", TaskState.CANCELED, Awaiting.NOBODY, "the sender retracted it"
)

PHASES = (UNREAD, WORKING, BLOCKED, COMPLETED, REJECTED, FAILED, CANCELED)
BY_NAME = {phase.name: phase for phase in PHASES}
TERMINAL_STATES = (TaskState.COMPLETED, TaskState.REJECTED, TaskState.FAILED, TaskState.CANCELED)
LIVE = frozenset(phase for phase in PHASES if not phase.terminal)
# What a new delivery is, and what a broadcast summary is (it never waits for anyone).
CREATED_PHASE = UNREAD
SUMMARY_PHASE = COMPLETED


def phase_of(state: str, awaiting: str) -> Phase:
    """The phase of a stored (state, awaiting) pair."""
    if state == TaskState.INPUT_REQUIRED:
        return BLOCKED if awaiting == Awaiting.SENDER else UNREAD
    return _BY_STATE[state]


_BY_STATE = {phase.state: phase for phase in PHASES if phase.state != TaskState.INPUT_REQUIRED}


@dataclass(frozen=True)
class Transition:
    """One row of the lifecycle table."""

    action: EventKind
    by: frozenset[Role]  # who may take it (both: either party)
    sources: frozenset[Phase]
    target: Phase | None  # None: no change of phase (a comment)
    # What the action's message becomes beside its history entry: "artifact" (a result),
    # "status" (the task's status message: a reason or a question), or nothing. A cancel
    # carries no message at all.
    parts_become: str | None = None
    carries_message: bool = True

    def refusal(self, phase: Phase, roles: set[str], task_id: Any) -> HikyakuError | None:
        """Why `roles` may not take this action on a task in `phase`, or None."""
        if self.action == EventKind.CANCEL:
            if phase.terminal:
                return TaskNotCancelable(f"Task {task_id} is {phase.state} and cannot be canceled.")
            if not (self.by & set(roles)) or phase not in self.sources:
                return TaskNotCancelable(
                    "Only the sender can cancel a task, and only while it is unread."
                )
            return None
        if phase.terminal:
            return UnsupportedOperation(
                f"Task {task_id} is {phase.state}; terminal tasks are final."
            )
        if not (self.by & set(roles)):
            (only,) = self.by
            return UnsupportedOperation(f"Only the task's {only} can {self.action} it.")
        if phase not in self.sources:
            return UnsupportedOperation(f"Cannot {self.action} a task that is {_describe(phase)}.")
        return None


def _describe(phase: Phase) -> str:
    if phase is UNREAD:
        return "unread"
    if phase is BLOCKED:
        return "waiting for the sender's reply"
    return phase.state


_RECIPIENT = frozenset({Role.RECIPIENT})
_SENDER = frozenset({Role.SENDER})
_EITHER = _RECIPIENT | _SENDER
_OWES_ANSWER = frozenset({UNREAD, WORKING})

TRANSITIONS: dict[str, Transition] = {
    t.action: t
    for t in (
        Transition(EventKind.ACK, _RECIPIENT, frozenset({UNREAD}), COMPLETED),
        Transition(EventKind.ACCEPT, _RECIPIENT, frozenset({UNREAD}), WORKING),
        Transition(EventKind.COMPLETE, _RECIPIENT, LIVE, COMPLETED, parts_become="artifact"),
        Transition(EventKind.REJECT, _RECIPIENT, LIVE, REJECTED, parts_become="status"),
        Transition(EventKind.FAIL, _RECIPIENT, frozenset({WORKING}), FAILED, "status"),
        Transition(EventKind.BLOCK, _RECIPIENT, frozenset({WORKING}), BLOCKED, "status"),
        Transition(EventKind.REPLY, _SENDER, frozenset({BLOCKED}), WORKING),
        Transition(EventKind.COMMENT, _EITHER, LIVE, None),
        Transition(EventKind.CANCEL, _SENDER, frozenset({UNREAD}), CANCELED, carries_message=False),
    )
}
# The verbs a follow-up message may name (CancelTask is its own method).
ACTIONS = sorted(action for action, t in TRANSITIONS.items() if t.carries_message)
DEFAULT_ACTION = EventKind.ACK


def open_to(phase: Phase, roles: set[str]) -> list[Transition]:
    """The actions a party holding `roles` may take on a task in `phase`, in table order:
    every row that `refusal` lets through (what the web UI offers a person)."""
    return [t for t in TRANSITIONS.values() if t.refusal(phase, roles, "") is None]


# On an agent's own A2A endpoint the caller owns the task the way A2A means it, and may
# cancel it until it is final (docs/PEERS.md).
CANCEL_WHILE_LIVE = Transition(EventKind.CANCEL, _SENDER, LIVE, CANCELED, carries_message=False)


# Applying a transition ----------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """What a transition does to a task: the new values of the columns it changes (the
    compare-and-set's SET) and the event row's content."""

    state: str
    awaiting: str
    history: list[dict[str, Any]]
    artifacts: list[dict[str, Any]]
    metadata: dict[str, Any]
    status_at: datetime
    updated_at: datetime
    from_state: str
    payload: dict[str, Any]

    COLUMNS = ("state", "awaiting", "history", "artifacts", "metadata", "status_at", "updated_at")


def apply(
    transition: Transition,
    *,
    task: Any,
    roles: set[str],
    message: dict[str, Any] | None,
    now: datetime,
) -> Change:
    """The change `transition` makes to `task` (a Task as read), taken by a party holding
    `roles` with `message` (None for a cancel). Call only when `refusal` is None."""
    history, artifacts = list(task.history), list(task.artifacts)
    metadata = {k: v for k, v in task.metadata.items() if k != "statusMessage"}
    payload: dict[str, Any] = {}
    if transition.carries_message:
        message = message or {}
        follow_up = {
            **follow_up_of(transition, roles, message, task_id=task.id),
            "contextId": task.context_id,
        }
        history.append(follow_up)
        result = result_of(transition, message)
        if result is not None:
            artifacts.append(result)
        if transition.parts_become == "status":
            metadata["statusMessage"] = follow_up
        payload = payload_of(message)
    target = transition.target
    return Change(
        state=target.state if target else task.state,
        awaiting=target.awaiting if target else task.awaiting,
        history=history,
        artifacts=artifacts,
        metadata=metadata,
        status_at=now if target else task.status_at,
        updated_at=now,
        from_state=task.state,
        payload=payload,
    )


def follow_up_of(
    transition: Transition, roles: set[str], message: dict[str, Any], *, task_id: Any
) -> dict[str, Any]:
    """The action's message as its history entry (and status message), but for the
    `contextId`, which is the task's: the recipient speaks as the agent, the sender as the
    user."""
    acting_as_recipient = transition.by == _RECIPIENT or set(roles) == {Role.RECIPIENT}
    role = "ROLE_AGENT" if acting_as_recipient else "ROLE_USER"
    return {**message, "taskId": str(task_id), "role": role}


def result_of(transition: Transition, message: dict[str, Any]) -> dict[str, Any] | None:
    """The result artifact the action adds, if any."""
    parts = message.get("parts") or []
    return artifact("result", parts) if transition.parts_become == "artifact" and parts else None


def payload_of(message: dict[str, Any] | None) -> dict[str, Any]:
    """What the action's event row keeps of its message."""
    if message is None:
        return {}
    return _present({"messageId": message.get("messageId"), "parts": message.get("parts") or []})


def artifact(name: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"artifactId": f"{name}-{uuid.uuid4().hex[:12]}", "name": name, "parts": parts}


def _present(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if v not in (None, [], {})}


# Reading the timeline back --------------------------------------------------------------------


def phase_after(kind: str, before: Phase | None) -> Phase:
    """The phase an event left its task in, given the phase before it (None before the
    task's creation)."""
    if kind == EventKind.CREATED:
        return CREATED_PHASE
    transition = TRANSITIONS.get(kind)
    if transition is None or transition.target is None:
        return before or CREATED_PHASE
    return transition.target


def after_event(kind: str, to_state: str, before: Phase | None) -> Phase:
    """As `phase_after`, for a timeline row that also carries its stored state: only
    INPUT_REQUIRED needs the verb to tell whose turn it is."""
    if to_state != TaskState.INPUT_REQUIRED:
        return phase_of(to_state, Awaiting.NOBODY)
    return phase_after(kind, before)


def awaiting_after(kind: str, before: str) -> str:
    """Whose turn it is after an event, given whose it was before."""
    if kind == EventKind.COMMENT:
        return before
    return phase_after(kind, None).awaiting


def interrupts(kind: str, to_state: str) -> bool:
    """Whether an event leaves the task final or waiting for its sender: where an A2A
    stream on an agent's endpoint ends."""
    return to_state in TERMINAL_STATES or phase_after(kind, None) is BLOCKED


def replays_follow_up(kind: str) -> bool:
    """Whether an event appended one entry to the task's history (all but the creation,
    which is its first entry, and a cancel, which carries no message)."""
    transition = TRANSITIONS.get(kind)
    return transition is not None and transition.carries_message


def owes_answer(state: str, awaiting: str) -> bool:
    """Whether the recipient still has to act: unread, or working on it."""
    return phase_of(state, awaiting) in _OWES_ANSWER
