import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent, Sensitivity
from tenants.models import Tenant

from .lifecycle import CREATED_PHASE, TERMINAL_STATES, Awaiting, EventKind, TaskState


class Task(models.Model):
    """One delivery of one message to one recipient, represented as an A2A Task.

    `message`, `history` and `artifacts` hold A2A 1.0 ProtoJSON (what MessageToDict gives)."""

    class Type(models.TextChoices):
        UNICAST = "unicast", "Unicast"
        BROADCAST = "broadcast", "Broadcast delivery"
        BROADCAST_SUMMARY = "broadcast_summary", "Broadcast summary"

    Awaiting = Awaiting

    # Every index is paid for on every send and every state change, so foreign keys whose
    # lookups a composite index below already serves have none of their own (Meta.indexes).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="tasks", db_index=False
    )
    # Null for external A2A callers (docs/PROTOCOL.md §8); `caller_id` then names them.
    sender = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="sent_tasks",
        db_index=False,
    )
    caller_id = models.CharField(max_length=200, blank=True)
    # Null only for broadcast summaries, which never appear in an inbox.
    recipient = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="received_tasks",
        db_index=False,
    )
    context_id = models.CharField(max_length=64)
    type = models.CharField(max_length=24, choices=Type.choices, default=Type.UNICAST)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=CREATED_PHASE.state)
    awaiting = models.CharField(
        max_length=16, choices=Awaiting.choices, default=CREATED_PHASE.awaiting, blank=True
    )
    broadcast_id = models.UUIDField(null=True, blank=True)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="replies",
        db_index=False,
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
    # Set once a push config is attached, so transitions of the (many) tasks without one
    # skip looking for configs (messaging/push/delivery.py).
    push_configured = models.BooleanField(default=False)
    # NULL, not "", for tasks without a messageId so the unique constraint ignores them.
    message_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    content_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    status_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=TaskState.values),
                name="task_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(awaiting__in=Awaiting.values), name="task_awaiting_valid"
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
            # Partial: most tasks are neither broadcasts nor replies, and a row outside an
            # index's condition costs that index nothing.
            models.Index(
                fields=["broadcast_id"],
                condition=Q(broadcast_id__isnull=False),
                name="task_broadcast",
            ),
            models.Index(
                fields=["thread_root_id"],
                condition=Q(thread_root_id__isnull=False),
                name="task_thread",
            ),
            models.Index(fields=["parent"], condition=Q(parent__isnull=False), name="task_parent"),
            # Retention sweeps: only terminal tasks expire.
            models.Index(
                fields=["updated_at"],
                condition=Q(state__in=list(TERMINAL_STATES)),
                name="task_retention",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class TaskEvent(models.Model):
    """Append-only record of every change of a task: the audit log, the source of every
    stream, and the replay log (`Last-Event-ID`). Never updated; deleted only by retention."""

    Kind = EventKind

    id = models.BigAutoField(primary_key=True)
    # An event's tenant and actor are its task's tenant and one of its task's parties, which
    # the task's own foreign keys already hold to existing rows, so the database does not
    # check them again for every event (deletion still cascades, in Django).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events", db_index=False)
    # Copied from the task so a stream's query is one index range scan.
    sender_agent_id = models.UUIDField(null=True, blank=True)
    recipient_agent_id = models.UUIDField(null=True, blank=True)
    # Unindexed: only deleting an agent looks events up by actor (Agent rows are normally
    # deregistered, not deleted), and every event would pay for the index.
    actor = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
        db_constraint=False,
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
            # The web UI's tenant-wide stream.
            models.Index(fields=["tenant", "id"], name="event_tenant_stream"),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.kind} on {self.task_id}"


class PushConfig(models.Model):
    """An A2A TaskPushNotificationConfig: a webhook for one task, set by one of its parties.

    Each party sees and manages only the configs it created (the other party's tokens and
    credentials are none of its business)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="push_configs")
    config_id = models.CharField(max_length=200)  # the A2A config `id`, per task and creator
    url = models.URLField(max_length=2000)
    token = models.CharField(max_length=1000, blank=True)
    auth_scheme = models.CharField(max_length=100, blank=True)
    # Sent as `Authorization: <scheme> <credentials>`; the broker must send it, so it is kept.
    auth_credentials = models.TextField(max_length=4000, blank=True)
    # Null for external A2A callers (docs/PROTOCOL.md §8); `created_by_caller` then names them.
    created_by = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    created_by_caller = models.CharField(max_length=200, blank=True)
    dialect = models.CharField(max_length=8, default="1.0")  # shape of the payload: 1.0 or 0.3
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "push notification config"
        constraints = [
            # Config ids are per party: each sees and manages only its own.
            models.UniqueConstraint(
                fields=["task", "created_by", "config_id"],
                condition=Q(created_by__isnull=False),
                name="pushconfig_agent_id",
            ),
            models.UniqueConstraint(
                fields=["task", "created_by_caller", "config_id"],
                condition=Q(created_by__isnull=True),
                name="pushconfig_caller_id",
            ),
            models.CheckConstraint(
                condition=Q(created_by__isnull=False) | ~Q(created_by_caller=""),
                name="pushconfig_has_a_creator",
            ),
        ]

    def __str__(self) -> str:
        return f"push config {self.config_id} on {self.task_id}"


class WebhookDelivery(models.Model):
    """One event for one destination, and the fate of its attempts: the delivery log."""

    class Target(models.TextChoices):
        AGENT = "agent", "Agent webhook"
        PUSH_CONFIG = "push_config", "Task push config"

    class Outcome(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (retries exhausted)"
        REFUSED = "refused", "Refused (destination not allowed)"
        DROPPED = "dropped", "Dropped (no longer allowed to see it)"

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    # Plain ids, not foreign keys: the log outlives neither the tenant nor its retention
    # window, but must not pin tasks and events that retention removes.
    event_id = models.BigIntegerField()
    task_id = models.UUIDField()
    target = models.CharField(max_length=16, choices=Target.choices)
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    push_config = models.ForeignKey(
        PushConfig, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    url = models.URLField(max_length=2000)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=["pending", "delivered", "failed", "refused", "dropped"]),
                name="delivery_outcome_valid",
            ),
            models.CheckConstraint(
                condition=Q(target__in=["agent", "push_config"]), name="delivery_target_valid"
            ),
            # Fan-out is idempotent: one row per event and destination.
            models.UniqueConstraint(
                fields=["event_id", "agent"],
                condition=Q(target="agent"),
                name="delivery_event_agent",
            ),
            models.UniqueConstraint(
                fields=["event_id", "push_config"],
                condition=Q(target="push_config"),
                name="delivery_event_push_config",
            ),
        ]
        indexes = [
            # The sweeper: pending deliveries whose next attempt is due.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(outcome="pending"),
                name="delivery_due",
            ),
            models.Index(fields=["created_at"], name="delivery_retention"),
            models.Index(fields=["task_id", "id"], name="delivery_task"),
        ]

    def __str__(self) -> str:
        return f"delivery #{self.id} of event {self.event_id} ({self.outcome})"
