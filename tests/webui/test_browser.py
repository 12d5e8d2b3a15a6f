"""The web UI in a real headless chromium against a real server process.

Screenshots of the main pages land in test-artifacts/screenshots/ (and, with
HIKYAKU_UPDATE_SCREENSHOTS=1, in docs/screenshots/ for the README tour).
"""

import re

import httpx
import pytest
from playwright.sync_api import expect

from agents.models import Agent
from tenants.models import ApiKey

pytestmark = pytest.mark.browser

PASSWORD = "a long and quite unusual passphrase 42"


def sign_up(ui, email: str) -> None:
    page = ui.page
    page.goto("/accounts/signup/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.get_by_role("button", name="Sign Up").click()
    page.wait_for_url("**/ui/")


def tenant_with_key(ui, email: str, tenant: str, prefix: str, label: str = "") -> tuple[str, str]:
    """Sign up, create a tenant (its creator lands on its keys page) and a key: the tenant's
    slug (`prefix` and six random characters) and the key."""
    page = ui.page
    sign_up(ui, email)
    page.fill("input[name=name]", tenant)
    page.get_by_role("button", name="Create tenant").click()
    page.wait_for_url(re.compile(rf".*/ui/t/{prefix}-[a-z0-9]{{6}}/keys/$"))
    slug = page.url.split("/ui/t/")[1].split("/")[0]
    if label:
        page.fill("input[name=label]", label)
    page.get_by_role("button", name="Create key").click()
    return slug, page.get_by_test_id("new-api-key").inner_text().strip()


def register_agent(base_url: str, key: str, name: str, description: str) -> dict:
    response = httpx.post(
        f"{base_url}/api/v1/agents",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "name": name,
            "description": description,
            "skills": [{"id": f"{name}-skill", "name": f"{name.title()} work"}],
        },
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_missing_chromium_skips_unless_ci_requires_it(monkeypatch):
    from tests.webui.conftest import require_chromium

    monkeypatch.delenv("HIKYAKU_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        require_chromium("/nonexistent/chromium")
    monkeypatch.setenv("HIKYAKU_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="forbids skipping"):
        require_chromium("/nonexistent/chromium")


def test_sign_up_create_tenant_key_agents_and_revoke(browser_session):
    ui, page = browser_session, browser_session.page

    # Sign up: the allauth form, styled like the rest of the site.
    page.goto("/accounts/signup/")
    expect(page.get_by_role("heading", name="Sign Up")).to_be_visible()
    ui.shot("01-sign-up")
    sign_up(ui, "ada@example.com")
    expect(page.get_by_text("Create your first tenant")).to_be_visible()

    # Create a tenant: its creator becomes its owner and lands on the keys page.
    page.fill("input[name=name]", "Acme Robotics")
    page.get_by_role("button", name="Create tenant").click()
    page.wait_for_url(re.compile(r".*/ui/t/acme-robotics-[a-z0-9]{6}/keys/$"))
    slug = page.url.split("/ui/t/")[1].split("/")[0]  # the name and a random suffix
    expect(page.get_by_text("No keys yet")).to_be_visible()

    # Create a key: shown once, with a copy button and a warning.
    page.fill("input[name=label]", "CI runners")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_text("Copy it now — it will not be shown again.")).to_be_visible()
    raw_key = page.get_by_test_id("new-api-key").inner_text().strip()
    assert re.fullmatch(r"hky_[0-9a-f]{32}", raw_key)
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == raw_key
    ui.shot("03-key-created")

    # Reloading (which resubmits the form) never shows the key again, nor does the list.
    page.reload()
    expect(page.get_by_text("That key was already created")).to_be_visible()
    assert raw_key not in page.content()
    assert "/keys/new/" not in page.url
    page.goto(f"/ui/t/{slug}/keys/")
    assert raw_key not in page.content()
    assert ApiKey.objects.filter(tenant__slug=slug).count() == 1

    # Two agents register with the key over the REST API (real HTTP).
    alice = register_agent(ui.base_url, raw_key, "alice", "Reviews pull requests")
    bob = register_agent(ui.base_url, raw_key, "bob", "Builds and ships")

    # They appear on the agents page, with their details.
    page.goto(f"/ui/t/{slug}/agents/")
    table = page.get_by_test_id("agents")
    expect(table.locator(f"tr[data-agent-id='{alice['agent_id']}']")).to_contain_text("alice")
    expect(table.locator(f"tr[data-agent-id='{bob['agent_id']}']")).to_contain_text("Bob work")
    expect(page.get_by_test_id("tab-active")).to_contain_text("2")
    ui.shot("04-agents")
    table.get_by_role("link", name="alice").click()
    expect(page.get_by_role("heading", name="alice")).to_be_visible()
    ui.shot("05-agent-detail")

    # Send a message from the UI as alice to bob; it lands in bob's inbox, unread.
    page.get_by_role("link", name="Send as alice").click()
    page.select_option("select[name=to]", bob["agent_id"])
    page.fill("textarea[name=text]", "Please review <PR #12> before the release.")
    page.fill("textarea[name=data]", '{"pr": 12, "repo": "acme/robot"}')
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(re.compile(rf".*/ui/t/{slug}/tasks/[0-9a-f-]{{36}}/$"))
    task_id = page.url.rstrip("/").rsplit("/", 1)[1]
    expect(page.get_by_test_id("task-state")).to_have_text("Unread")
    page.goto(f"/ui/t/{slug}/agents/{bob['agent_id']}/inbox/")
    row = page.locator(f"tr[data-task-id='{task_id}']")
    expect(row).to_contain_text("Please review <PR #12> before the release.")
    expect(row.get_by_test_id("task-state")).to_have_text("Unread")
    ui.shot("06-inbox")

    # Bob acknowledges it over JSON-RPC (A2A 1.0); the task page shows it completed.
    acked = httpx.post(
        f"{ui.base_url}/a2a/",
        headers={"Authorization": f"Bearer {bob['agent_token']}", "A2A-Version": "1.0"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "ack-1",
                    "role": "ROLE_USER",
                    "taskId": task_id,
                    "parts": [{"text": "Looks good, merging."}],
                    "metadata": {"action": "ack"},
                }
            },
        },
    )
    assert "error" not in acked.json(), acked.text
    page.goto(f"/ui/t/{slug}/tasks/{task_id}/")
    expect(page.get_by_test_id("task-state")).to_have_text("Completed")
    expect(page.get_by_test_id("timeline").locator("li")).to_have_count(2)
    expect(page.get_by_test_id("timeline")).to_contain_text("Looks good, merging.")
    expect(page.locator("pre[data-part=data]")).to_contain_text('"repo": "acme/robot"')
    ui.shot("07-task")

    # The keys page counts the key's agents.
    page.goto(f"/ui/t/{slug}/keys/")
    row = page.locator(f"tr[data-key-prefix='{raw_key[4:12]}']")
    expect(row.locator("td[data-label=Agents]")).to_have_text("2")
    expect(row).to_contain_text("CI runners")
    ui.shot("02-keys")

    # Revoke it, after a confirmation that warns about the agents.
    row.get_by_role("link", name="Revoke").click()
    warning = page.get_by_test_id("last-key-warning")
    expect(warning).to_contain_text("last active key")
    expect(warning).to_contain_text("deregisters all 2 agents")
    ui.shot("08-revoke-confirm")
    page.get_by_role("button", name="Revoke key and deregister agents").click()
    page.wait_for_url(f"**/ui/t/{slug}/keys/")
    expect(page.get_by_text("2 agent(s) were deregistered")).to_be_visible()
    expect(row.locator("td[data-label=Status]")).to_have_text("Revoked")

    # The agents are deregistered, the key no longer works.
    page.goto(f"/ui/t/{slug}/agents/?status=deregistered")
    expect(page.get_by_test_id("agents")).to_contain_text("alice")
    expect(page.get_by_test_id("agents")).to_contain_text("bob")
    assert set(Agent.objects.values_list("status", flat=True)) == {"deregistered"}
    denied = httpx.get(
        f"{ui.base_url}/api/v1/agents",
        headers={"Authorization": f"Bearer {raw_key}", "X-Agent-Id": alice["agent_id"]},
    )
    assert denied.status_code == 401

    ui.assert_no_console_errors()


def test_log_in_out_and_password_reset_pages(browser_session):
    ui, page = browser_session, browser_session.page
    sign_up(ui, "grace@example.com")
    page.get_by_test_id("user-menu").click()
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(lambda url: "/ui/" not in url)

    page.goto("/ui/tenants/new/")
    page.wait_for_url("**/accounts/login/?next=/ui/tenants/new/")
    expect(page.get_by_text("Log in with")).to_have_count(0)  # no OIDC provider configured
    ui.shot("00-log-in")
    page.fill("input[name=login]", "grace@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.get_by_role("button", name="Sign In").click()
    page.wait_for_url("**/ui/tenants/new/")  # back where the login began

    page.goto("/accounts/password/reset/")
    expect(page.get_by_role("heading", name="Password Reset")).to_be_visible()
    ui.shot("09-password-reset")
    ui.assert_no_console_errors()


def test_the_landing_page_says_what_hikyaku_is(browser_session):
    ui, page = browser_session, browser_session.page
    page.goto("/")
    page.wait_for_url("**/ui/")
    expect(page.get_by_role("heading", name="Hikyaku", exact=True)).to_be_visible()
    expect(
        page.get_by_text("A message broker and agent registry for coding agents")
    ).to_be_visible()
    page.get_by_role("link", name="Sign up").first.click()
    page.wait_for_url("**/accounts/signup/")
    ui.assert_no_console_errors()


def test_the_ui_works_on_a_phone(phone_session, browser_session):
    # Set up as the desktop user, then look at the same pages on a phone.
    slug, raw_key = tenant_with_key(
        browser_session, "hopper@example.com", "Mobile Lab", "mobile-lab"
    )
    for name in ("scout", "builder", "reviewer"):
        register_agent(browser_session.base_url, raw_key, name, f"The {name} of the lab")

    phone = phone_session.page
    phone.goto("/accounts/login/")
    phone.fill("input[name=login]", "hopper@example.com")
    phone.fill("input[name=password]", PASSWORD)
    phone.get_by_role("button", name="Sign In").click()
    phone.wait_for_url("**/ui/")
    phone.goto(f"/ui/t/{slug}/agents/")
    expect(phone.get_by_test_id("agents")).to_contain_text("reviewer")
    # Nothing is wider than the screen: tables turn into stacked cards.
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone_session.shot("10-phone-agents")
    phone.get_by_test_id("tenant-switcher").click()
    expect(phone.get_by_role("link", name="+ New tenant")).to_be_visible()
    phone.goto(f"/ui/t/{slug}/keys/")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone_session.shot("11-phone-keys")
    phone_session.assert_no_console_errors()
    browser_session.assert_no_console_errors()


def test_inbox_and_task_pages_update_live_without_reload(browser_session):
    """Bob's inbox is open in one tab; alice sends from another tab and the row appears in
    bob's without a reload. Bob acks over JSON-RPC and the open task page turns Completed."""
    ui, page = browser_session, browser_session.page
    slug, raw_key = tenant_with_key(ui, "lin@example.com", "Live Co", "live-co", label="live")
    alice = register_agent(ui.base_url, raw_key, "alice", "Sends")
    bob = register_agent(ui.base_url, raw_key, "bob", "Receives")

    inbox = page.context.new_page()
    inbox.goto(f"/ui/t/{slug}/agents/{bob['agent_id']}/inbox/")
    expect(inbox.locator("[data-live-status]")).to_have_attribute("data-live-status", "live")

    page.goto(f"/ui/t/{slug}/agents/{alice['agent_id']}/")
    page.get_by_role("link", name="Send as alice").click()
    page.select_option("select[name=to]", bob["agent_id"])
    page.fill("textarea[name=text]", "Ship it when green.")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(re.compile(rf".*/ui/t/{slug}/tasks/[0-9a-f-]{{36}}/$"))
    task_id = page.url.rstrip("/").rsplit("/", 1)[1]

    # No reload of the inbox tab: the row arrives through the session stream.
    row = inbox.locator(f"tr[data-task-id='{task_id}']")
    expect(row).to_contain_text("Ship it when green.")
    expect(row.get_by_test_id("task-state")).to_have_text("Unread")
    # The filter tabs count along (they are outside the refreshed list).
    expect(inbox.locator("[data-count=all]")).to_have_text("1")
    expect(inbox.locator("[data-count=unread]")).to_have_text("1")

    # The task page (open in the first tab) follows the ack without a reload.
    expect(page.get_by_test_id("task-state")).to_have_text("Unread")
    acked = httpx.post(
        f"{ui.base_url}/a2a/",
        headers={"Authorization": f"Bearer {bob['agent_token']}", "A2A-Version": "1.0"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "live-ack-1",
                    "role": "ROLE_USER",
                    "taskId": task_id,
                    "parts": [{"text": "on it"}],
                }
            },
        },
    )
    assert "error" not in acked.json(), acked.text
    expect(page.get_by_test_id("task-state")).to_have_text("Completed")
    expect(row.get_by_test_id("task-state")).to_have_text("Completed")
    expect(inbox.locator("[data-count=unread]")).to_have_text("0")
    expect(inbox.locator("[data-count=completed]")).to_have_text("1")
    ui.assert_no_console_errors()


def rpc(base_url: str, token: str, method: str, params: dict) -> dict:
    response = httpx.post(
        f"{base_url}/a2a/",
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
    )
    body = response.json()
    assert "error" not in body, response.text
    return body["result"]


def follow_up(base_url: str, token: str, task_id: str, action: str, text: str) -> dict:
    message = {
        "messageId": f"{action}-{task_id[:8]}-{len(text)}",
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": [{"text": text}],
        "metadata": {"action": action},
    }
    return rpc(base_url, token, "SendMessage", {"message": message})


def test_a_person_answers_and_completes_a_task_from_its_page(browser_session):
    """Bob's agent asks alice's a question; a person answers it from the task page for alice,
    then completes the task for bob. A live update arriving while they type keeps their
    words; the agents see the person's actions through the API."""
    ui, page = browser_session, browser_session.page
    slug, raw_key = tenant_with_key(ui, "mo@example.com", "Hands On", "hands-on")
    alice = register_agent(ui.base_url, raw_key, "alice", "Asks for work")
    bob = register_agent(ui.base_url, raw_key, "bob", "Does the work")
    sent = rpc(
        ui.base_url,
        alice["agent_token"],
        "SendMessage",
        {
            "message": {
                "messageId": "fix-login",
                "role": "ROLE_USER",
                "parts": [{"text": "Fix the login redirect."}],
                "metadata": {"destination": "bob"},
            }
        },
    )
    task_id = sent["task"]["id"]
    follow_up(ui.base_url, bob["agent_token"], task_id, "accept", "on it")
    follow_up(ui.base_url, bob["agent_token"], task_id, "block", "Which branch?")

    page.goto(f"/ui/t/{slug}/tasks/{task_id}/")
    expect(page.get_by_test_id("task-state")).to_have_text("Blocked")
    expect(page.locator("[data-live-status]")).to_have_attribute("data-live-status", "live")
    actions = page.get_by_test_id("task-actions")
    for_alice = actions.locator("[data-agent=alice]")
    expect(for_alice.get_by_role("button")).to_have_text(["Reply", "Comment"])
    expect(actions.locator("[data-agent=bob]").get_by_role("button")).to_have_text(
        ["Complete", "Reject", "Comment"]
    )

    # The person types; bob's agent comments meanwhile. The live update waits for them.
    page.fill("textarea[name=text]", "release/2.4, please")
    follow_up(ui.base_url, bob["agent_token"], task_id, "comment", "Still waiting on you.")
    page.wait_for_timeout(1500)
    expect(page.locator("textarea[name=text]")).to_have_value("release/2.4, please")
    ui.shot("12-task-actions")
    for_alice.get_by_role("button", name="Reply").click()
    page.wait_for_url(f"**/ui/t/{slug}/tasks/{task_id}/")
    expect(page.get_by_test_id("task-state")).to_have_text("Working")
    timeline = page.get_by_test_id("timeline")
    expect(timeline).to_contain_text("Still waiting on you.")
    reply = timeline.locator("li[data-event-kind=reply]")
    expect(reply).to_contain_text("mo@example.com for alice")
    expect(reply).to_contain_text("Blocked → Working")
    expect(reply).to_contain_text("release/2.4, please")

    # Bob's agent sees the answer in its task, as any reply.
    task = rpc(ui.base_url, bob["agent_token"], "GetTask", {"id": task_id})
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    assert task["history"][-1]["parts"] == [{"text": "release/2.4, please"}]

    # Then the person completes it for bob: the result shows, and nothing is left to do.
    page.fill("textarea[name=text]", "Fixed in abc123")
    actions.locator("[data-agent=bob]").get_by_role("button", name="Complete").click()
    page.wait_for_url(f"**/ui/t/{slug}/tasks/{task_id}/")
    expect(page.get_by_test_id("task-state")).to_have_text("Completed")
    expect(page.get_by_role("heading", name="Result")).to_be_visible()
    expect(page.get_by_test_id("task-actions")).to_have_count(0)
    done = rpc(ui.base_url, alice["agent_token"], "GetTask", {"id": task_id})
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][-1]["parts"] == [{"text": "Fixed in abc123"}]
    events = httpx.get(
        f"{ui.base_url}/api/v1/tasks/{task_id}/events",
        headers={"Authorization": f"Bearer {alice['agent_token']}"},
    ).json()["events"]
    assert [(e["kind"], e["actor"]["name"], e["actor"]["person"]) for e in events[-2:]] == [
        ("reply", "alice", "mo@example.com"),
        ("complete", "bob", "mo@example.com"),
    ]
    ui.assert_no_console_errors()
