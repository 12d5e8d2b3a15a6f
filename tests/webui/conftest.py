"""Web UI fixtures: people with roles in `tenant` (acme), and logged-in clients for them."""

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tenants import services as tenant_services
from tests import factories


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Creating users with the production hasher costs ~0.3 s each; these tests log in with
    force_login, so a fast hasher changes nothing they check."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def user(db):
    """A user without any tenant."""
    return factories.user("newcomer@example.com")


@pytest.fixture
def user_client(user):
    return logged_in(user)


@pytest.fixture
def owner(tenant):
    user = factories.user("owner@example.com")
    tenant_services.add_member(tenant=tenant, user=user, role="owner")
    return user


@pytest.fixture
def owner_client(owner):
    return logged_in(owner)


@pytest.fixture
def member(tenant, owner):
    user = factories.user("member@example.com")
    tenant_services.add_member(tenant=tenant, user=user, role="member")
    return user


@pytest.fixture
def member_client(member):
    return logged_in(member)


@pytest.fixture
def outsider(other_tenant):
    """The owner of another tenant (globex), member of nothing else."""
    user = factories.user("outsider@example.com")
    tenant_services.add_member(tenant=other_tenant, user=user, role="owner")
    return user


@pytest.fixture
def outsider_client(outsider):
    return logged_in(outsider)


# Browser tests: Debian's chromium driven by Playwright against a real server process --------

CHROMIUM = os.environ.get("HIKYAKU_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
DOCS_SCREENSHOTS = REPO / "docs" / "screenshots"


def require_chromium(path: str) -> None:
    """Skip when chromium is missing — or fail, when HIKYAKU_REQUIRE_BROWSER=1 (CI)."""
    if Path(path).exists():
        return
    message = (
        f"browser tests need Debian's chromium at {path} "
        "(apt-get install chromium; or set HIKYAKU_CHROMIUM)"
    )
    if os.environ.get("HIKYAKU_REQUIRE_BROWSER") == "1":
        pytest.fail(message + " — HIKYAKU_REQUIRE_BROWSER=1 forbids skipping them")
    pytest.skip(message)


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium (never a downloaded browser). Missing, the browser tests skip — or
    fail when HIKYAKU_REQUIRE_BROWSER=1, as CI sets it."""
    require_chromium(CHROMIUM)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on the main thread, which makes Django's
    # async-safety check refuse ORM calls from the test itself.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@dataclass
class BrowserSession:
    """A page in a fresh browser context, and what it logged."""

    page: Any
    base_url: str
    console_errors: list[str] = field(default_factory=list)

    def shot(self, name: str, *, full_page: bool = True) -> Path:
        """Save a screenshot to test-artifacts/screenshots/ (and to docs/screenshots/ for the
        README tour when HIKYAKU_UPDATE_SCREENSHOTS=1)."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        if os.environ.get("HIKYAKU_UPDATE_SCREENSHOTS") == "1":
            DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS_SCREENSHOTS / path.name)
        return path

    def assert_no_console_errors(self) -> None:
        """No script error and no Content-Security-Policy violation happened."""
        assert self.console_errors == []


def open_session(browser, base_url: str, **context_args: Any) -> tuple[Any, BrowserSession]:
    context = browser.new_context(base_url=base_url, **context_args)
    context.set_default_timeout(10_000)
    page = context.new_page()
    session = BrowserSession(page=page, base_url=base_url)
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and session.console_errors.append(f"{m.text} ({m.location.get('url')})")
        ),
    )
    page.on("pageerror", lambda error: session.console_errors.append(str(error)))
    return context, session


@pytest.fixture
def browser_session(broker, chromium, transactional_db):
    """A desktop-sized page on the real server; the database is flushed afterwards."""
    context, session = open_session(
        chromium,
        broker.url,
        viewport={"width": 1280, "height": 820},
        permissions=["clipboard-read", "clipboard-write"],
    )
    yield session
    context.close()


@pytest.fixture
def phone_session(broker, chromium, transactional_db):
    """A phone-sized page (390×844, touch) on the real server."""
    context, session = open_session(
        chromium,
        broker.url,
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    yield session
    context.close()
