"""Rate limits at authentication (docs/ARCHITECTURE.md, Credentials).

Each credential has its own budget (HIKYAKU_RATE_LIMIT_PER_MINUTE); all the credentials of a
tenant share another (HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE), so that a key minting agents does
not multiply what the tenant may send. Credentials that fail are counted per client address
(the current request's, hikyaku/client_address.py; IPv6 per /64): past
HIKYAKU_AUTH_FAILURES_PER_MINUTE, that address's authentications are refused with 429 before
any lookup until the minute ends. Anonymous callers of public agents count against their
address (HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE), never against the tenant they call.
The counting itself is tenants/ratelimit.py.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

from django.conf import settings

from hikyaku import client_address as request_address
from hikyaku.errors import Unauthenticated
from tenants.ratelimit import check_budget, check_rate, count_failure

Authenticator = TypeVar("Authenticator", bound=Callable)
_authenticating: ContextVar[bool] = ContextVar("hikyaku_authenticating", default=False)


def pseudonym(value: str) -> str:
    """A stable name for `value` that does not reveal it (addresses, other tenants' ids)."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()[:24]


def check_credential_rate(credential_hash: str, *, tenant_id: uuid.UUID) -> None:
    """One request with a valid credential: its own budget, then its tenant's."""
    check_rate(credential_hash)
    check_rate(f"tenant:{tenant_id.hex}", limit=settings.HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE)


def check_anonymous_rate(address: str) -> None:
    """Per-address rate limit for callers without a credential of their own."""
    check_rate(
        "anon:" + pseudonym("addr:" + address),
        limit=settings.HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE,
    )


def _failures_key(address: str) -> str:
    return _failures_key_under(address, settings.SECRET_KEY)


@functools.lru_cache(maxsize=10_000)
def _failures_key_under(address: str, secret_key: str) -> str:
    """The key of an address's failure budget (an HMAC under the secret key: computed once
    per address, not on every request)."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return "authfail:" + pseudonym("addr:" + address)
    if parsed.version == 6 and parsed.ipv4_mapped is None:
        address = str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return "authfail:" + pseudonym("addr:" + address)


def throttled(authenticate: Authenticator) -> Authenticator:
    """Count the failures of an authentication entry point against the client's address, and
    refuse the address's attempts once it is over budget. Nested entry points count once;
    calls outside a request (no address) are not throttled."""

    @functools.wraps(authenticate)
    def wrapper(*args, **kwargs):
        address = request_address.current.get()
        limit = settings.HIKYAKU_AUTH_FAILURES_PER_MINUTE
        if address is None or limit <= 0 or _authenticating.get():
            return authenticate(*args, **kwargs)
        key = _failures_key(address)
        check_budget(key, limit=limit, what="failed authentications from this address")
        outermost = _authenticating.set(True)
        try:
            return authenticate(*args, **kwargs)
        except Unauthenticated:
            authorization = kwargs.get("authorization", args[0] if args else None)
            if authorization and authorization.strip():  # a credential was tried, and failed
                count_failure(key)
            raise
        finally:
            _authenticating.reset(outermost)

    return wrapper  # type: ignore[return-value]
