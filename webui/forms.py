"""Forms of the web UI. They parse and validate input; the services do the writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from agents.models import Agent, Sensitivity
from agents.services import RevokedKeyAgents
from hikyaku import parsers
from hikyaku.errors import HikyakuError, InvalidRequest
from messaging import lifecycle
from messaging.a2a.wire import Dialect, parse_message
from tenants.models import Membership

EXPIRY_CHOICES = [
    ("never", "Never"),
    ("7", "In 7 days"),
    ("30", "In 30 days"),
    ("90", "In 90 days"),
    ("365", "In 1 year"),
    ("custom", "On a date…"),
]


def add_service_error(form: forms.Form, error: HikyakuError) -> None:
    """Show a domain error on the fields it names (details), else on the whole form."""
    fields = [f for f in (error.details or {}) if f in form.fields]
    if not fields:
        form.add_error(None, error.message)
    for field in fields:
        form.add_error(field, error.message)


class TenantForm(forms.Form):
    name = forms.CharField(max_length=200, widget=forms.TextInput(attrs={"autofocus": True}))
    slug = forms.SlugField(
        max_length=57,
        required=False,
        label="Address",
        help_text="The start of the tenant's address in URLs (letters, digits and dashes; "
        "made from the name when empty), followed by a few random characters that keep it "
        "apart from every other tenant's.",
    )


class RevokeKeyForm(forms.Form):
    """What becomes of the agents whose tokens the revoked key minted (they stop either way)."""

    agents = forms.ChoiceField(
        choices=RevokedKeyAgents.choices,
        initial=RevokedKeyAgents.REVOKE_TOKENS,
        required=False,
        widget=forms.RadioSelect,
        label="Agents registered with this key",
    )

    def clean_agents(self) -> str:
        return self.cleaned_data.get("agents") or RevokedKeyAgents.REVOKE_TOKENS


class AddMemberForm(forms.Form):
    email = forms.EmailField(
        help_text="The person must already have a Hikyaku account (they can sign up first)."
    )
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class ApiKeyForm(forms.Form):
    label = forms.CharField(
        max_length=200,
        required=False,
        help_text="What or who uses this key, e.g. “CI runners”.",
    )
    expires = forms.ChoiceField(choices=EXPIRY_CHOICES, initial="never", label="Expires")
    expires_on = forms.DateField(
        required=False,
        label="Expiry date (UTC)",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Only with “On a date…”: the key stops working at the start of this day.",
    )
    # A one-time token of the form instance. Submitting the same form twice (a reload of the
    # page that showed the new key resubmits it) creates nothing and shows no key.
    once = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def clean(self) -> dict:
        data = super().clean()
        choice = data.get("expires")
        if choice == "custom":
            day = data.get("expires_on")
            if day is None:
                self.add_error("expires_on", "Pick the expiry date.")
            elif day <= timezone.now().date():
                self.add_error("expires_on", "The expiry date must be in the future.")
        return data

    def expires_at(self) -> datetime | None:
        choice = self.cleaned_data["expires"]
        if choice == "never":
            return None
        if choice == "custom":
            day = self.cleaned_data["expires_on"]
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        return timezone.now() + timedelta(days=int(choice))


BROADCAST = "*"


class SendMessageForm(forms.Form):
    """A message sent by a person as one of the tenant's active agents."""

    sender = forms.ChoiceField(label="Send as")
    to = forms.ChoiceField(label="To")
    text = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        max_length=100_000,
    )
    data = forms.CharField(
        required=False,
        label="Data (JSON, optional)",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
        help_text='Sent as a data part, e.g. {"ticket": 42}.',
    )
    sensitivity = forms.ChoiceField(choices=Sensitivity.choices, initial=Sensitivity.INTERNAL)
    # The message's messageId: resubmitting the same form never delivers twice.
    once = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args: Any, agents: list[Agent], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(str(agent.pk), agent.name) for agent in agents]
        self.fields["sender"].choices = choices
        # No recipient is preselected: a broadcast goes to every agent, so it is chosen, never
        # defaulted to.
        self.fields["to"].choices = [
            ("", "Choose a recipient…"),
            *choices,
            (BROADCAST, "Everyone (broadcast)"),
        ]

    def clean_data(self) -> Any:
        raw = self.cleaned_data["data"].strip()
        if not raw:
            return None
        try:
            return parsers.loads(raw)  # the JSON the API accepts (no NaN, no lone surrogates)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None

    def clean(self) -> dict:
        data = super().clean()
        if not data.get("text", "").strip() and data.get("data") is None:
            raise forms.ValidationError("Write a message, or give data, or both.")
        if not self.errors:
            try:  # what the JSON-RPC surface accepts (a number a data part can hold, …)
                parse_message(self.message(), Dialect.V1_0)
            except InvalidRequest as exc:
                raise forms.ValidationError(exc.message) from None
        return data

    def message(self) -> dict[str, Any]:
        """The A2A 1.0 Message (ProtoJSON), as the JSON-RPC surface would hand it over."""
        parts: list[dict[str, Any]] = []
        if self.cleaned_data["text"].strip():
            parts.append({"text": self.cleaned_data["text"]})
        if self.cleaned_data["data"] is not None:
            parts.append({"data": self.cleaned_data["data"]})
        metadata: dict[str, Any] = {"destination": self.cleaned_data["to"]}
        if self.cleaned_data["sensitivity"] != Sensitivity.INTERNAL:
            metadata["sensitivity"] = self.cleaned_data["sensitivity"]
        return {
            "messageId": self.cleaned_data["once"],
            "role": "ROLE_USER",
            "parts": parts,
            "metadata": metadata,
        }


# What each lifecycle action is called on its button, and whether it needs words: a question,
# a reply or a comment is nothing without them; the others may say why or what came of it.
ACTION_VERBS = {
    "ack": "Acknowledge",
    "accept": "Accept",
    "complete": "Complete",
    "reject": "Reject",
    "fail": "Fail",
    "block": "Ask the sender",
    "reply": "Reply",
    "comment": "Comment",
    "cancel": "Cancel",
}
NEEDS_TEXT = {"block", "reply", "comment"}
GRAVE = {"reject", "fail", "cancel"}


class TaskActionForm(forms.Form):
    """A lifecycle action a person takes on a task for one of its parties (the submit
    button's value, `<agent id>:<action>`), with an optional message. Any action of a party
    that may act is a valid choice: whether it is open now is the service's decision (so a
    resubmitted action is recognised as applied, and a stale page gets the lifecycle's own
    refusal)."""

    action = forms.ChoiceField()
    text = forms.CharField(
        required=False,
        label="Message",
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=100_000,
        help_text="A question for “Ask the sender”, the answer for “Reply”; a reason or "
        "result for the others (optional). Cancel sends no message.",
    )
    # The action's messageId: resubmitting the same form never acts twice.
    once = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args: Any, parties: list, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parties = parties
        self.fields["action"].choices = [
            (f"{party.agent.pk}:{action}", ACTION_VERBS[action])
            for party in parties
            for action in lifecycle.TRANSITIONS
        ]
        self.fields["action"].error_messages["invalid_choice"] = (
            "That agent cannot act on this task: it is not active, or its policy no longer "
            "lets it see the task."
        )

    def groups(self) -> list[dict[str, Any]]:
        """The buttons, by the agent they act for: its name, its roles, and each action's
        value, verb and whether it ends the task badly."""
        return [
            {
                "agent": party.agent,
                "roles": " and ".join(sorted(party.roles)),
                "buttons": [
                    (f"{party.agent.pk}:{t.action}", ACTION_VERBS[t.action], t.action in GRAVE)
                    for t in party.actions
                ],
            }
            for party in self.parties
            if party.actions
        ]

    def clean(self) -> dict:
        data = super().clean()
        choice = data.get("action")
        if choice:
            agent_id, action = choice.split(":")
            data["agent"] = next(p.agent for p in self.parties if str(p.agent.pk) == agent_id)
            data["verb"] = action
            if action in NEEDS_TEXT and not data.get("text", "").strip():
                self.add_error("text", f"Write what to send with “{ACTION_VERBS[action]}”.")
        return data

    def message(self, task_id: Any) -> dict[str, Any]:
        """The follow-up as the JSON-RPC surface hands it over (docs/PROTOCOL.md §4.4)."""
        text = self.cleaned_data["text"]
        return {
            "messageId": self.cleaned_data["once"],
            "taskId": str(task_id),
            "role": "ROLE_USER",
            "parts": [{"text": text}] if text.strip() else [],
            "metadata": {"action": self.cleaned_data["verb"]},
        }
