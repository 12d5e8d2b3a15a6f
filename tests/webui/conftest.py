"""Web UI fixtures: people with roles in `tenant` (acme), and logged-in clients for them."""

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
