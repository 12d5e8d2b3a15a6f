import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent, Sensitivity
from tenants.models import Tenant


class TaskState(models.TextChoices):
    INPUT_REQUIRED = "input_required", "Input required"
    WORKING = "working", "Working"
    COMPLETED = "completed", "Completed"
    REJECTED = "rejected", "Rejected"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.REJECTED, TaskState.FAILED, TaskState.CANCELED}
)


class Task(models.Model):
    """One delivery of one message to one recipient, represented as an A2A Task.

    `message`, `history` and `artifacts` hold A2A 1.0 ProtoJSON (what MessageToDict gives)."""

    class Type(models.TextChoices):
        UNICAST = "unicast", "Unicast"
        BROADCAST = "broadcast", "Broadcast delivery"
        BROADCAST_SUMMARY = "broadcast_summary", "Broadcast summary"

    class Awaiting(models.TextChoices):
        NOBODY = "", "Nobody"
        RECIPIENT = "recipient", "Recipient"
        SENDER = "sender", "Sender"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tasks")
    # Null for external A2A callers (DESIGN.md §8); `caller_id` then names them.
    sender = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="sent_tasks"
    )
    caller_id = models.CharField(max_length=200, blank=True)
    # Null only for broadcast summaries, which never appear in an inbox.
    recipient = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="received_tasks"
    )
    context_id = models.CharField(max_length=64)
    type = models.CharField(max_length=24, choices=Type.choices, default=Type.UNICAST)
    state = models.CharField(
        max_length=16, choices=TaskState.choices, default=TaskState.INPUT_REQUIRED
    )
    awaiting = models.CharField(
        max_length=16, choices=Awaiting.choices, default=Awaiting.RECIPIENT, blank=True
    )
    broadcast_id = models.UUIDField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replies"
    )
    thread_root_id = models.UUIDField(null=True, blank=True)
    depth = models.PositiveSmallIntegerField(default=0)
    message = models.JSONField()
    history = models.JSONField(default=list)
    artifacts = models.JSONField(default=list)
    metadata = models.JSONField(default=dict)
    sensitivity = models.CharField(
        max_length=16, choices=Sensitivity.choices, default=Sensitivity.INTERNAL
    )
    search_text = models.TextField(blank=True)
    # NULL, not "", for tasks without a messageId so the unique constraint ignores them.
    message_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    content_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    status_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    state__in=[
                        "input_required",
                        "working",
                        "completed",
                        "rejected",
                        "failed",
                        "canceled",
                    ]
                ),
                name="task_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(awaiting__in=["", "recipient", "sender"]), name="task_awaiting_valid"
            ),
            models.CheckConstraint(
                condition=Q(type__in=["unicast", "broadcast", "broadcast_summary"]),
                name="task_type_valid",
            ),
            models.CheckConstraint(
                condition=Q(type="broadcast_summary") | Q(recipient__isnull=False),
                name="task_delivery_has_recipient",
            ),
            models.CheckConstraint(
                condition=Q(sender__isnull=False) | ~Q(caller_id=""),
                name="task_has_a_sender",
            ),
            # messageId is the sender's idempotency key (broadcast deliveries carry none:
            # the summary holds it).
            models.UniqueConstraint(
                fields=["sender", "message_id"],
                condition=Q(sender__isnull=False, message_id__isnull=False),
                name="task_sender_message_id_unique",
            ),
            models.UniqueConstraint(
                fields=["tenant", "caller_id", "message_id"],
                condition=Q(sender__isnull=True, message_id__isnull=False),
                name="task_caller_message_id_unique",
            ),
        ]
        indexes = [
            # Inbox (ListTasks), newest status change first, with and without a state filter.
            models.Index(fields=["recipient", "-status_at", "-id"], name="task_inbox"),
            models.Index(
                fields=["recipient", "state", "-status_at", "-id"], name="task_inbox_state"
            ),
            # Outbox (metadata.box = outbox).
            models.Index(fields=["sender", "-status_at", "-id"], name="task_outbox"),
            models.Index(fields=["broadcast_id"], name="task_broadcast"),
            models.Index(fields=["thread_root_id"], name="task_thread"),
            # Retention sweeps.
            models.Index(fields=["state", "updated_at"], name="task_retention"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class TaskEvent(models.Model):
    """Append-only record of every change of a task: the audit log, the source of every
    stream, and the replay log (`Last-Event-ID`). Never updated; deleted only by retention."""

    class Kind(models.TextChoices):
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

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    # Copied from the task so a stream's query is one index range scan.
    sender_agent_id = models.UUIDField(null=True, blank=True)
    recipient_agent_id = models.UUIDField(null=True, blank=True)
    actor = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["recipient_agent_id", "id"], name="event_recipient_stream"),
            models.Index(fields=["sender_agent_id", "id"], name="event_sender_stream"),
            models.Index(fields=["task", "id"], name="event_task_timeline"),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.kind} on {self.task_id}"
