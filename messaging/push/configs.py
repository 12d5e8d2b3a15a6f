"""Push notification configs (A2A TaskPushNotificationConfig) for the parties of a task.

A party of a task (its sender or recipient, under the current policy) may attach webhooks to
it; anything else — another tenant's task, a task the policy hides, an unknown id — is the
same "task not found". Each party sees and manages only the configs it created."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from agents.destinations import check_url
from hikyaku.errors import InvalidRequest, TaskNotFound

from ..models import PushConfig, Task
from ..parties import Sender
from ..selectors import party_task

MAX_CONFIGS_PER_PARTY = 10


@dataclass(frozen=True)
class ConfigInput:
    """A parsed TaskPushNotificationConfig (A2A 1.0 field names)."""

    task_id: str
    url: str
    config_id: str = ""
    token: str = ""
    auth_scheme: str = ""
    auth_credentials: str = ""


def _mine(sender: Sender, task: Task):
    configs = PushConfig.objects.filter(tenant=sender.tenant, task=task)
    if sender.agent is not None:
        return configs.filter(created_by=sender.agent)
    return configs.filter(created_by__isnull=True, created_by_caller=sender.caller_id)


def set_push_config(*, sender: Sender, config: ConfigInput, dialect: str = "1.0") -> PushConfig:
    """Create, or replace when the id exists, a push config on a task the caller is a party
    of. An empty id defaults to the task id (as a2a-sdk does). Ids are per party: the
    sender's and the recipient's configs never collide."""
    task = party_task(sender=sender, task_id=config.task_id)
    if task.type == Task.Type.BROADCAST_SUMMARY:
        raise TaskNotFound(f"Task not found: {config.task_id}")
    if not config.url:
        raise InvalidRequest("url is required.", details={"field": "url"})
    check_url(config.url, field="url")
    config_id = config.config_id or str(task.id)
    if len(config_id) > 200:
        raise InvalidRequest("id is too long (200 characters at most).", details={"field": "id"})
    if len(config.token) > 1000 or len(config.auth_credentials) > 4000:
        raise InvalidRequest("token or credentials too long.", details={"field": "token"})
    values = {
        "url": config.url,
        "token": config.token,
        "auth_scheme": config.auth_scheme[:100],
        "auth_credentials": config.auth_credentials,
        "dialect": dialect,
    }
    try:
        with transaction.atomic():
            # The task row first (the lifecycle's lock order): a transition that commits
            # after this sees the flag and the config.
            Task.objects.filter(pk=task.pk).update(push_configured=True)
            current = _mine(sender, task).select_for_update().filter(config_id=config_id).first()
            if current is not None:
                PushConfig.objects.filter(pk=current.pk).update(**values)
                current.refresh_from_db()
                return current
            if _mine(sender, task).count() >= MAX_CONFIGS_PER_PARTY:
                raise InvalidRequest(
                    f"At most {MAX_CONFIGS_PER_PARTY} push notification configs per task "
                    "and party.",
                    details={"field": "id"},
                )
            return PushConfig.objects.create(
                tenant=sender.tenant,
                task=task,
                config_id=config_id,
                created_by=sender.agent,
                created_by_caller="" if sender.agent else sender.caller_id,
                **values,
            )
    except IntegrityError:
        # A concurrent create of the same id won; the caller retries and replaces it.
        raise InvalidRequest(
            f"Push notification config id {config_id!r} is being created concurrently.",
            details={"field": "id"},
        ) from None


def get_push_config(*, sender: Sender, task_id: str, config_id: str = "") -> PushConfig:
    """One of the caller's configs on a task; without an id, the one whose id is the task id
    (the default id) or else the caller's oldest."""
    task = party_task(sender=sender, task_id=task_id)
    configs = _mine(sender, task)
    config = (
        configs.filter(config_id=config_id).first()
        if config_id
        else (configs.filter(config_id=str(task.id)).first() or configs.order_by("id").first())
    )
    if config is None:
        raise TaskNotFound(f"Push notification config not found: {config_id or task_id}")
    return config


def list_push_configs(
    *, sender: Sender, task_id: str, page_size: int = 50, page_token: str = ""
) -> tuple[Task, list[PushConfig], str]:
    task = party_task(sender=sender, task_id=task_id)
    configs = _mine(sender, task).order_by("id")
    if page_token:
        try:
            after = int(page_token)
        except ValueError:
            raise InvalidRequest("Invalid pageToken.", details={"field": "pageToken"}) from None
        configs = configs.filter(id__gt=after)
    page = list(configs[: page_size + 1])
    token = ""
    if len(page) > page_size:
        page = page[:page_size]
        token = str(page[-1].id)
    return task, page, token


def delete_push_config(*, sender: Sender, task_id: str, config_id: str) -> None:
    """Idempotent, as in a2a-sdk: deleting an id that does not exist is not an error."""
    task = party_task(sender=sender, task_id=task_id)
    _mine(sender, task).filter(config_id=config_id or str(task.id)).delete()
