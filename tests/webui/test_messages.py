"""Inbox, sent box, task page and sending as an agent, through the Django test client."""

import base64
import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from messaging.models import Task
from messaging.parties import Sender
from messaging.services import act_on_task, send_message
from tests import factories

pytestmark = pytest.mark.django_db


def send(sender, to, *parts, message_id=None, **metadata):
    return send_message(
        sender=Sender(tenant=sender.tenant, agent=sender.model),
        message={
            "messageId": message_id or uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": list(parts) or [{"text": "hello"}],
            "metadata": {"destination": to if isinstance(to, str) else to.id, **metadata},
        },
    )


def act(agent, task, action, *parts):
    return act_on_task(
        sender=Sender(tenant=agent.tenant, agent=agent.model),
        task_id=str(task.pk),
        action=action,
        message={"messageId": uuid.uuid4().hex, "parts": list(parts)},
    )


def task_ids(html: str) -> list[str]:
    return re.findall(r'data-task-id="([^"]+)"', html)


def queries_for(client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured)


# Inbox and sent ---------------------------------------------------------------------------


def test_inbox_lists_what_the_agent_received_newest_first(owner_client, agent, peer):
    first = send(agent, peer, {"text": "first"})
    second = send(agent, peer, {"text": "second <b>bold</b>"})
    send(peer, agent, {"text": "not for bob"})
    html = owner_client.get(f"/ui/t/acme/agents/{peer.id}/inbox/").content.decode()
    assert task_ids(html) == [str(second.pk), str(first.pk)]
    assert "second &lt;b&gt;bold&lt;/b&gt;" in html and "Unread" in html


def test_inbox_filters_by_state_and_searches_text(owner_client, agent, peer):
    done = send(agent, peer, {"text": "deploy the frontend"})
    act(peer, done, "ack")
    open_task = send(agent, peer, {"text": "review the backend"})
    base = f"/ui/t/acme/agents/{peer.id}/inbox/"
    assert task_ids(owner_client.get(base + "?state=completed").content.decode()) == [str(done.pk)]
    assert task_ids(owner_client.get(base + "?state=input_required").content.decode()) == [
        str(open_task.pk)
    ]
    assert task_ids(owner_client.get(base + "?q=BACKEND").content.decode()) == [str(open_task.pk)]
    html = owner_client.get(base + "?q=nothing-like-this").content.decode()
    assert task_ids(html) == [] and "No match" in html


def test_inbox_tabs_speak_the_human_state_names(owner_client, agent, peer):
    unread, blocked = send(agent, peer), send(agent, peer)
    act(peer, blocked, "accept")
    act(peer, blocked, "block", {"text": "Which branch?"})
    base = f"/ui/t/acme/agents/{peer.id}/inbox/"
    html = owner_client.get(base).content.decode()
    tabs = re.findall(r'data-testid="state-(\w+)">([^<]+)<span class="count" [^>]*>(\d+)', html)
    assert tabs[1:4] == [
        ("unread", "Unread", "1"),
        ("working", "Working", "0"),
        ("blocked", "Blocked", "1"),
    ]
    assert "Input required" not in html
    assert task_ids(owner_client.get(base + "?state=unread").content.decode()) == [str(unread.pk)]
    assert task_ids(owner_client.get(base + "?state=blocked").content.decode()) == [str(blocked.pk)]
    page = owner_client.get(f"/ui/t/acme/tasks/{blocked.pk}/").content.decode()
    assert re.findall(r'data-testid="transition">([^<]+)<', page) == [
        "→ Unread",
        "Unread → Working",
        "Working → Blocked",
    ]


def test_inbox_pages_with_a_cursor(owner_client, agent, peer):
    sent = [send(agent, peer, {"text": f"message {n}"}) for n in range(30)]
    base = f"/ui/t/acme/agents/{peer.id}/inbox/"
    first = owner_client.get(base).content.decode()
    assert len(task_ids(first)) == 25
    older = re.search(r'href="\?cursor=([^"]+)"', first).group(1)
    second = owner_client.get(f"{base}?cursor={older}").content.decode()
    assert task_ids(second) == [str(t.pk) for t in reversed(sent[:5])]
    assert "Older" not in second and "Newest" in second
    assert owner_client.get(f"{base}?cursor=garbage").status_code == 200


def test_inbox_runs_in_constant_queries(owner_client, agent, peer):
    send(agent, peer)
    path = f"/ui/t/acme/agents/{peer.id}/inbox/"
    baseline = queries_for(owner_client, path)
    for n in range(10):
        send(agent if n % 2 else factories.agent(agent.tenant, name=f"s{n}"), peer)
    assert queries_for(owner_client, path) == baseline
    # session, user, membership, agent, page of tasks, state counts, switcher
    assert baseline == 7


def test_sent_box_shows_a_broadcast_once(owner_client, tenant, agent, peer):
    factories.agent(tenant, name="carol")
    unicast = send(agent, peer)
    summary = send(agent, "*", {"text": "to everyone"})
    html = owner_client.get(f"/ui/t/acme/agents/{agent.id}/sent/").content.decode()
    assert task_ids(html) == [str(summary.pk), str(unicast.pk)]
    assert "Everyone (2)" in html


def test_the_list_fragment_is_the_list_alone(owner_client, agent, peer):
    task = send(agent, peer)
    html = owner_client.get(f"/ui/t/acme/agents/{peer.id}/inbox/?fragment=1").content.decode()
    assert str(task.pk) in html and "<html" not in html


def test_deregistered_agents_history_stays_readable(owner_client, agent, peer):
    task = send(agent, peer)
    owner_client.post(f"/ui/t/acme/agents/{peer.id}/deregister/")
    html = owner_client.get(f"/ui/t/acme/agents/{peer.id}/inbox/").content.decode()
    assert task_ids(html) == [str(task.pk)]


# The task page ----------------------------------------------------------------------------


def test_task_page_shows_the_full_timeline(owner_client, agent, peer):
    task = send(agent, peer, {"text": "build it"})
    act(peer, task, "accept")
    act(peer, task, "comment", {"text": "halfway there"})
    act(peer, task, "complete", {"text": "done: v1.2.3"})
    html = owner_client.get(f"/ui/t/acme/tasks/{task.pk}/").content.decode()
    kinds = re.findall(r'data-event-kind="(\w+)"', html)
    assert kinds == ["created", "accept", "comment", "complete"]
    timeline = html[html.index('data-testid="timeline"') :]
    assert "<strong>alice</strong>" in timeline and "<strong>bob</strong>" in timeline
    assert "Working → Completed" in timeline
    assert "halfway there" in timeline
    assert "Result" in html and "done: v1.2.3" in html


def test_task_page_renders_parts_safely(owner_client, agent, peer):
    task = send(
        agent,
        peer,
        {"text": "<script>alert(1)</script>\nsecond line"},
        {"data": {"ticket": 42, "tags": ["<x>"]}},
        {"url": "https://example.com/report?a=1&b=2", "filename": "report.html"},
        {"url": "javascript:alert(1)"},
        {"raw": "aGVsbG8=", "filename": "hello.txt", "mediaType": "text/plain"},
    )
    html = owner_client.get(f"/ui/t/acme/tasks/{task.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;<br>second line" in html
    assert (
        "{\n  &quot;tags&quot;: [\n    &quot;&lt;x&gt;&quot;\n  ],\n  &quot;ticket&quot;: 42\n}"
        in html
    )
    assert (
        '<a href="https://example.com/report?a=1&amp;b=2" rel="noopener noreferrer" '
        'target="_blank">report.html</a>'
    ) in html
    assert 'href="javascript:' not in html and "<code>javascript:alert(1)</code>" in html
    assert "hello.txt" in html and "5\xa0bytes" in html
    assert 'data-testid="file-text">hello<' in html


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_text_file_is_shown_as_text_and_any_file_downloads(owner_client, agent, peer):
    script = b"<script>alert(1)</script>"
    task = send(
        agent,
        peer,
        {"raw": b64(b"line one\n<b>two</b>\n"), "filename": "fix.txt", "mediaType": "text/plain"},
        {
            "raw": b64(b"\x00\x01\xff"),
            "filename": "blob.bin",
            "mediaType": "application/octet-stream",
        },
        {"raw": b64(script), "filename": "page.html", "mediaType": "text/html"},
    )
    html = owner_client.get(f"/ui/t/acme/tasks/{task.pk}/").content.decode()
    assert "Binary content" not in html
    texts = re.findall(r'data-testid="file-text">([^<]*)<', html)
    assert texts[0] == "line one\n&lt;b&gt;two&lt;/b&gt;\n"  # shown, escaped
    assert "&lt;script&gt;" in html and "<script>alert" not in html
    links = re.findall(r'href="(/ui/t/acme/tasks/[^"]+/files/[0-9a-f]+/)" download', html)
    assert len(links) == 3
    text_file, blob, page = (owner_client.get(link) for link in links)
    assert text_file.content == b"line one\n<b>two</b>\n"
    assert text_file["Content-Disposition"] == (
        "attachment; filename=\"fix.txt\"; filename*=UTF-8''fix.txt"
    )
    assert blob.content == b"\x00\x01\xff"
    for response in (text_file, blob, page):
        assert response["Content-Type"] == "application/octet-stream"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Content-Security-Policy"] == "sandbox; default-src 'none'"
    assert page.content == script  # downloaded as bytes, never rendered on our origin
    missing = owner_client.get(links[0].replace("/files/", "/files/0").rsplit("/", 2)[0] + "/x/")
    assert missing.status_code == 404


def test_task_page_shows_the_question_of_a_blocked_task(owner_client, agent, peer):
    task = send(agent, peer)
    act(peer, task, "accept")
    act(peer, task, "block", {"text": "Which branch?"})
    html = owner_client.get(f"/ui/t/acme/tasks/{task.pk}/").content.decode()
    assert "Question to the sender" in html and "Which branch?" in html
    assert 'data-testid="task-state">Blocked<' in html


def test_a_broadcast_summary_lists_its_deliveries(owner_client, tenant, agent, peer):
    carol = factories.agent(tenant, name="carol")
    summary = send(agent, "*", {"text": "standup"})
    html = owner_client.get(f"/ui/t/acme/tasks/{summary.pk}/").content.decode()
    deliveries = html[html.index('data-testid="deliveries"') :]
    assert "bob" in deliveries and "carol" in deliveries
    assert Task.objects.filter(broadcast_id=summary.broadcast_id).count() == 3
    assert carol.model.name in deliveries


def test_task_page_runs_in_constant_queries(owner_client, agent, peer):
    task = send(agent, peer)
    path = f"/ui/t/acme/tasks/{task.pk}/"
    baseline = queries_for(owner_client, path)
    act(peer, task, "accept")
    for n in range(5):
        act(peer if n % 2 else agent, task, "comment", {"text": f"note {n}"})
    assert queries_for(owner_client, path) == baseline


# Sending as an agent ----------------------------------------------------------------------


def send_form(client, **fields):
    page = client.get("/ui/t/acme/send/")
    once = re.search(r'name="once" value="([^"]+)"', page.content.decode()).group(1)
    data = {"text": "", "data": "", "sensitivity": "internal", "once": once, **fields}
    return client.post("/ui/t/acme/send/", data)


def test_a_member_sends_a_unicast_as_an_agent(member_client, agent, peer):
    response = send_form(member_client, sender=agent.id, to=peer.id, text="please review #12")
    task = Task.objects.get(recipient=peer.model)
    assert response["Location"] == f"/ui/t/acme/tasks/{task.pk}/"
    assert task.sender_id == agent.model.id and task.state == "input_required"
    assert task.message["parts"] == [{"text": "please review #12"}]
    assert task.events.get().kind == "created"


def test_sending_a_broadcast_with_data(owner_client, tenant, agent, peer):
    factories.agent(tenant, name="carol")
    send_form(owner_client, sender=agent.id, to="*", text="release", data='{"version": "1.2"}')
    summary = Task.objects.get(type="broadcast_summary")
    assert summary.metadata["recipientCount"] == 2
    assert summary.message["parts"] == [{"text": "release"}, {"data": {"version": "1.2"}}]


@pytest.mark.parametrize(
    "data, message",
    [
        ('{"n": NaN}', "Not valid JSON"),
        ('{"n": ' + "9" * 4000 + "}", "a number is too large"),
    ],
)
def test_the_send_form_refuses_data_the_api_would_refuse(owner_client, agent, peer, data, message):
    """Data a JSON-RPC client could not send (a NaN, a number no part can hold) is a form
    error, not a task that every 0.3 reader of it then fails on."""
    response = send_form(owner_client, sender=agent.id, to=peer.id, text="x", data=data)
    assert response.status_code == 400 and message in response.content.decode()
    assert not Task.objects.exists()


def test_the_send_form_preselects_no_recipient_and_requires_one(owner_client, agent, peer):
    page = owner_client.get("/ui/t/acme/send/").content.decode()
    to = page[page.index('name="to"') : page.index("</select>", page.index('name="to"'))]
    assert re.findall(r"<option[^>]*selected[^>]*>([^<]*)<", to) == ["Choose a recipient…"]
    assert "Everyone (broadcast)" in to
    response = send_form(owner_client, sender=agent.id, to="", text="hi")
    assert response.status_code == 400 and "This field is required." in response.content.decode()
    assert not Task.objects.exists()


def test_resubmitting_the_send_form_delivers_once(owner_client, agent, peer):
    page = owner_client.get("/ui/t/acme/send/")
    once = re.search(r'name="once" value="([^"]+)"', page.content.decode()).group(1)
    data = {
        "sender": agent.id,
        "to": peer.id,
        "text": "once",
        "data": "",
        "sensitivity": "internal",
    }
    first = owner_client.post("/ui/t/acme/send/", {**data, "once": once})
    again = owner_client.post("/ui/t/acme/send/", {**data, "once": once})
    assert first["Location"] == again["Location"]
    assert Task.objects.filter(recipient=peer.model).count() == 1


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"text": "", "data": ""}, "Write a message, or give data, or both."),
        ({"text": "x", "data": "{nope"}, "Not valid JSON"),
    ],
)
def test_send_form_errors(owner_client, agent, peer, fields, error):
    response = send_form(owner_client, sender=agent.id, to=peer.id, **fields)
    assert response.status_code == 400 and error in response.content.decode()
    assert not Task.objects.exists()


def test_cannot_send_as_or_to_an_agent_outside_the_active_ones(owner_client, agent, peer, stranger):
    for fields in (
        {"sender": stranger.id, "to": peer.id},
        {"sender": agent.id, "to": stranger.id},
    ):
        response = send_form(owner_client, text="hi", **fields)
        assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    assert not Task.objects.exists()


def test_policy_refusals_are_form_errors(owner_client, agent, peer):
    agent.model.send_to = []
    agent.model.save(update_fields=["send_to"])
    response = send_form(owner_client, sender=agent.id, to=peer.id, text="hi")
    assert response.status_code == 400
    assert "Destination agent not found" in response.content.decode()


# Acting on a task as a person -------------------------------------------------------------


def task_page(client, task) -> str:
    return client.get(f"/ui/t/acme/tasks/{task.pk}/").content.decode()


def offered(html: str) -> dict[str, list[str]]:
    """The action buttons of a task page, by the agent they act for."""
    found = {}
    for name, block in re.findall(
        r'data-testid="actions-for" data-agent="([^"]+)">(.*?)</div>', html, re.S
    ):
        found[name] = re.findall(r'name="action" value="[^:"]+:(\w+)"', block)
    return found


def act_form(client, task, agent, action, text=""):
    html = task_page(client, task)
    once = re.search(r'name="once" value="([^"]+)"', html).group(1)
    return client.post(
        f"/ui/t/acme/tasks/{task.pk}/act/",
        {"action": f"{agent.id}:{action}", "text": text, "once": once},
    )


def test_the_task_page_offers_what_the_lifecycle_leaves_open_to_each_party(
    owner_client, agent, peer
):
    task = send(agent, peer)
    assert offered(task_page(owner_client, task)) == {
        "bob": ["ack", "accept", "complete", "reject", "comment"],
        "alice": ["comment", "cancel"],
    }
    act(peer, task, "accept")
    act(peer, task, "block", {"text": "Which branch?"})
    html = task_page(owner_client, task)
    assert offered(html) == {
        "bob": ["complete", "reject", "comment"],
        "alice": ["reply", "comment"],
    }
    assert list(offered(html)) == ["alice", "bob"]  # whose turn it is first
    act(agent, task, "reply", {"text": "main"})
    act(peer, task, "complete")
    html = task_page(owner_client, task)
    assert offered(html) == {} and 'data-testid="task-actions"' not in html


def test_a_member_answers_a_question_and_the_event_names_them(member_client, agent, peer):
    task = send(agent, peer)
    act(peer, task, "accept")
    act(peer, task, "block", {"text": "Which branch?"})
    response = act_form(member_client, task, agent, "reply", "release/2.4, please")
    assert response.status_code == 302 and response["Location"] == f"/ui/t/acme/tasks/{task.pk}/"
    task.refresh_from_db()
    assert (task.state, task.awaiting) == ("working", "")
    event = task.events.order_by("-id").first()
    assert (event.kind, event.actor_id, event.actor_label) == (
        "reply",
        agent.model.id,
        "person:member@example.com",
    )
    assert task.history[-1]["parts"] == [{"text": "release/2.4, please"}]
    assert task.history[-1]["role"] == "ROLE_USER"
    timeline = task_page(member_client, task).split('data-testid="timeline"')[1]
    assert "<strong>member@example.com for alice</strong>" in timeline
    assert "Blocked → Working" in timeline


def test_a_person_takes_the_recipients_part_from_accept_to_complete(owner_client, agent, peer):
    task = send(agent, peer)
    assert act_form(owner_client, task, peer, "accept").status_code == 302
    assert act_form(owner_client, task, peer, "complete", "Fixed in abc123").status_code == 302
    task.refresh_from_db()
    assert task.state == "completed"
    assert task.artifacts[-1]["parts"] == [{"text": "Fixed in abc123"}]
    assert task.history[-1]["role"] == "ROLE_AGENT"
    kinds = list(task.events.order_by("id").values_list("kind", "actor_label"))
    assert kinds == [
        ("created", ""),
        ("accept", "person:owner@example.com"),
        ("complete", "person:owner@example.com"),
    ]


def test_a_person_cancels_an_unread_task_for_its_sender(owner_client, agent, peer):
    task = send(agent, peer)
    assert act_form(owner_client, task, agent, "cancel").status_code == 302
    task.refresh_from_db()
    assert task.state == "canceled"
    event = task.events.order_by("-id").first()
    assert (event.kind, event.actor_label) == ("cancel", "person:owner@example.com")


def test_what_the_agents_api_sees_of_a_persons_action(owner_client, agent, peer):
    """The REST timeline, the web stream's data and a webhook's body name the person beside
    the agent."""
    from messaging.api import EventOut
    from messaging.push.payloads import stream_response
    from messaging.stream.feeds import web_event

    task = send(agent, peer)
    act_form(owner_client, task, peer, "reject", "Not ours")
    event = task.events.select_related("actor").order_by("-id").first()
    assert EventOut(event).data["actor"] == {
        "agent_id": str(peer.model.id),
        "name": "bob",
        "person": "owner@example.com",
    }
    task.refresh_from_db()
    assert web_event(event, task)["person"] == "owner@example.com"
    metadata = stream_response(task, event)["statusUpdate"]["metadata"]
    assert metadata["actorAgentId"] == str(peer.model.id)
    assert metadata["actorPerson"] == "owner@example.com"
    created = task.events.select_related("actor").order_by("id").first()
    assert EventOut(created).data["actor"]["person"] is None
    assert web_event(created, task)["person"] is None


@pytest.mark.parametrize("action", ["reply", "block", "comment"])
def test_an_action_that_needs_words_without_them_is_a_form_error(owner_client, agent, peer, action):
    task = send(agent, peer)
    before = task.events.count()
    act(peer, task, "accept")
    if action == "reply":
        act(peer, task, "block", {"text": "Which branch?"})
    response = act_form(owner_client, task, agent if action == "reply" else peer, action, "  ")
    assert response.status_code == 400
    assert "Write what to send with" in response.content.decode()
    assert task.events.count() == before + (2 if action == "reply" else 1)


def test_an_action_overtaken_by_the_agent_is_refused_and_the_page_shows_the_new_state(
    owner_client, agent, peer
):
    task = send(agent, peer)
    html = task_page(owner_client, task)
    once = re.search(r'name="once" value="([^"]+)"', html).group(1)
    act(peer, task, "ack")  # the agent acts while the person reads the page
    response = owner_client.post(
        f"/ui/t/acme/tasks/{task.pk}/act/",
        {"action": f"{peer.id}:accept", "text": "taking it", "once": once},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "is completed; terminal tasks are final." in html  # the lifecycle's own refusal
    assert 'data-testid="task-state">Completed<' in html
    assert "Nothing more can be done on this task." in html
    assert "taking it" in html  # the person's words are kept
    assert list(task.events.values_list("kind", flat=True).order_by("id")) == ["created", "ack"]


def test_an_agent_whose_policy_closed_meanwhile_cannot_act(owner_client, agent, peer):
    """The page offered an action, then an owner closed the relationship: the task is out
    of both agents' sight, so neither may act on it, and nothing is written."""
    task = send(agent, peer)
    html = task_page(owner_client, task)
    once = re.search(r'name="once" value="([^"]+)"', html).group(1)
    peer.model.receive_from = []
    peer.model.save(update_fields=["receive_from"])
    response = owner_client.post(
        f"/ui/t/acme/tasks/{task.pk}/act/",
        {"action": f"{agent.id}:cancel", "text": "", "once": once},
    )
    assert response.status_code == 400
    assert "That agent cannot act on this task" in response.content.decode()
    assert offered(task_page(owner_client, task)) == {}
    assert task.events.count() == 1


def test_resubmitting_an_action_acts_once(owner_client, agent, peer):
    task = send(agent, peer)
    html = task_page(owner_client, task)
    once = re.search(r'name="once" value="([^"]+)"', html).group(1)
    data = {"action": f"{peer.id}:accept", "text": "", "once": once}
    first = owner_client.post(f"/ui/t/acme/tasks/{task.pk}/act/", data)
    again = owner_client.post(f"/ui/t/acme/tasks/{task.pk}/act/", data)
    assert first.status_code == again.status_code == 302
    assert list(task.events.values_list("kind", flat=True).order_by("id")) == ["created", "accept"]


def test_no_action_for_a_deregistered_agent_or_another_tenants_task(
    owner_client, outsider_client, tenant, agent, peer
):
    from agents import services as agent_services

    task = send(agent, peer)
    agent_services.deregister_agent(agent=peer.model)
    assert offered(task_page(owner_client, task)) == {"alice": ["comment", "cancel"]}
    response = act_form(owner_client, task, agent, "cancel")
    assert response.status_code == 302
    other = owner_client.post(
        f"/ui/t/acme/tasks/{task.pk}/act/", {"action": f"{peer.id}:accept", "once": "x"}
    )
    assert other.status_code == 400 and "That agent cannot act" in other.content.decode()
    stranger = outsider_client.post(
        f"/ui/t/acme/tasks/{task.pk}/act/", {"action": f"{agent.id}:comment", "once": "y"}
    )
    assert stranger.status_code == 404


def test_a_get_of_the_action_url_goes_back_to_the_task(owner_client, agent, peer):
    task = send(agent, peer)
    response = owner_client.get(f"/ui/t/acme/tasks/{task.pk}/act/")
    assert response.status_code == 302 and response["Location"] == f"/ui/t/acme/tasks/{task.pk}/"


def test_a_message_sent_from_the_web_ui_names_the_person(member_client, agent, peer):
    send_form(member_client, sender=agent.id, to=peer.id, text="please review #12")
    event = Task.objects.get(recipient=peer.model).events.get()
    assert (event.actor_id, event.actor_label) == (agent.model.id, "person:member@example.com")
