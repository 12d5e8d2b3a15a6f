"""The task states people read and type: one vocabulary for every surface (README, "Task
states"). The CLI prints these names, the MCP tools and the web UI show them, and every status
filter accepts them beside the wire names (`TASK_STATE_WORKING`, `input-required`).

The wire has one INPUT_REQUIRED for two situations; people see whose turn it is: `unread`
(the recipient has not acted on the message yet) or `blocked` (the recipient asked the sender
a question and waits for the reply).
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import Task, TaskEvent, TaskState


@dataclass(frozen=True)
class HumanState:
    name: str  # what people type and read: "unread"
    label: str  # the web UI's badge and filter tab
    state: str  # the stored state
    awaiting: str | None  # whose turn it must be; None: any
    meaning: str


HUMAN_STATES = (
    HumanState(
        "unread",
        "Unread",
        TaskState.INPUT_REQUIRED,
        Task.Awaiting.RECIPIENT,
        "delivered; its recipient has not acted on it yet",
    ),
    HumanState("working", "Working", TaskState.WORKING, None, "the recipient is working on it"),
    HumanState(
        "blocked",
        "Blocked",
        TaskState.INPUT_REQUIRED,
        Task.Awaiting.SENDER,
        "the recipient asked the sender a question and waits for the reply",
    ),
    HumanState("completed", "Completed", TaskState.COMPLETED, None, "done, with any result"),
    HumanState("rejected", "Rejected", TaskState.REJECTED, None, "the recipient declined it"),
    HumanState("failed", "Failed", TaskState.FAILED, None, "the recipient could not do it"),
    HumanState("canceled", "Canceled", TaskState.CANCELED, None, "the sender retracted it"),
)
BY_NAME = {human.name: human for human in HUMAN_STATES}


def of_task(state: str, awaiting: str) -> HumanState:
    """The human state of a task in `state`, waiting for `awaiting`."""
    for human in HUMAN_STATES:
        if human.state == state and human.awaiting in (None, awaiting):
            return human
    return BY_NAME["unread"] if state == TaskState.INPUT_REQUIRED else BY_NAME[state]


def after_event(kind: str, to_state: str, before: HumanState | None) -> HumanState:
    """The human state an event of a task's timeline left it in, given the one before it
    (events carry the stored states; whose turn it is follows from the verb)."""
    if to_state != TaskState.INPUT_REQUIRED:
        return BY_NAME.get(to_state) or BY_NAME["unread"]
    if kind == TaskEvent.Kind.BLOCK:
        return BY_NAME["blocked"]
    if kind == TaskEvent.Kind.CREATED or before is None:
        return BY_NAME["unread"]
    return before
