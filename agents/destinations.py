"""Where the broker may send webhooks (docs/PROTOCOL.md §7): the SSRF guard.

A webhook destination is refused when its host resolves to an address that is not globally
routable (loopback, private, link-local, shared 100.64/10, multicast, reserved, unspecified —
including the IPv4 address inside an IPv4-mapped IPv6 address), unless
`HIKYAKU_WEBHOOK_ALLOWED_HOSTS` permits it. That setting is a comma-separated list of host
names (matched exactly, case-insensitively) and IP addresses or CIDRs (matched against every
address the host resolves to).

Two checks, at two times:
- `check_url` when a URL is stored (agent registration/update, push config creation): scheme,
  and the host when it is an IP literal or `localhost`. No DNS lookup, so a request never waits
  on a resolver.
- `resolve` right before each delivery: resolves the host and returns the addresses that may be
  connected to. The delivery connects to exactly those addresses (messaging/push/http.py), so a
  DNS answer that changes between the check and the connection (rebinding) cannot slip through.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

from hikyaku.errors import InvalidRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class DestinationRefused(Exception):
    """The destination is not allowed (its reason is safe to log and show to the owner)."""


class ResolutionFailed(OSError):
    """The host name did not resolve. Not a refusal: resolvers fail transiently (EAI_AGAIN,
    a server timing out) and names get created, so the attempt fails and is retried."""


@lru_cache(maxsize=8)
def _allow_list(raw: tuple[str, ...]) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for entry in raw:
        entry = entry.strip().lower()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.rstrip("."))
    return frozenset(hosts), tuple(networks)


def allow_list() -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    raw = settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS
    if isinstance(raw, str):
        raw = raw.split(",")
    return _allow_list(tuple(raw))


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_allowed(address: IPAddress, *, host: str) -> bool:
    """Whether a resolved address of `host` may be connected to."""
    hosts, networks = allow_list()
    if host.lower().rstrip(".") in hosts:
        return True
    address = _unmapped(address)
    if any(address in network for network in networks):
        return True
    return address.is_global and not address.is_multicast


def split_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, or DestinationRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise DestinationRefused("The URL cannot be parsed.") from None
    if parts.scheme not in ("http", "https"):
        raise DestinationRefused("Only http and https URLs are allowed.")
    if not parts.hostname:
        raise DestinationRefused("The URL has no host.")
    if parts.username or parts.password:
        raise DestinationRefused("Credentials in the URL are not allowed; use authentication.")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def check_url(url: str, *, field: str) -> None:
    """Refuse (InvalidRequest naming `field`) a URL that can be judged bad without DNS."""
    try:
        _, host, _ = split_url(url)
        literal: IPAddress | None
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is None and host.lower().rstrip(".") in ("localhost", "localhost.localdomain"):
            literal = ipaddress.ip_address("127.0.0.1")
        if literal is not None and not address_allowed(literal, host=host):
            raise DestinationRefused(
                f"{host} is a private, loopback or link-local address "
                "(allow it with HIKYAKU_WEBHOOK_ALLOWED_HOSTS)."
            )
    except DestinationRefused as exc:
        raise InvalidRequest(f"{field}: {exc}", details={field: [str(exc)]}) from None


def resolve(host: str, port: int) -> list[tuple[int, str]]:
    """The (family, address) pairs of `host` that may be connected to, in resolver order.
    Raises DestinationRefused when any of its addresses is not allowed (one bad address
    refuses the host: a partly-internal name is not a public one), ResolutionFailed when the
    name does not resolve now (retried like a refused connection)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ResolutionFailed(f"{host} does not resolve ({exc.strerror or exc}).") from None
    except UnicodeError:
        raise DestinationRefused(f"{host} is not a valid host name.") from None
    except OSError as exc:
        raise ResolutionFailed(f"{host} does not resolve ({exc}).") from None
    addresses: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if not address_allowed(address, host=host):
            raise DestinationRefused(
                f"{host} resolves to {address}, a private, loopback or link-local address "
                "(allow it with HIKYAKU_WEBHOOK_ALLOWED_HOSTS)."
            )
        if (family, str(address)) not in addresses:
            addresses.append((family, str(address)))
    if not addresses:
        raise ResolutionFailed(f"{host} does not resolve (no address).")
    return addresses
