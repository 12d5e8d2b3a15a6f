"""Where the broker may send webhooks (docs/PROTOCOL.md §7): the SSRF guard.

A webhook destination is refused when its host resolves to an address that is not globally
routable (loopback, private, link-local, shared 100.64/10, multicast, reserved, unspecified —
including the IPv4 address inside an IPv4-mapped IPv6 address), unless
`HIKYAKU_WEBHOOK_ALLOWED_HOSTS` permits it. That setting is a comma-separated list of host
names (matched exactly, case-insensitively) and IP addresses or CIDRs (matched against every
address the host resolves to).

Two checks, at two times:
- `check_url` when a URL is stored — one validator for every way in (an agent's webhook URL
  over REST, in the admin or in a tenant file; a push config over JSON-RPC): the URL's shape
  (http or https, no credentials, no whitespace, a host name or address that parses, at most
  2,000 characters), and the host when it is an IP literal in any spelling the resolver
  accepts (`127.1`, `2130706433`, `0x7f000001`, `0`, `[::1]`) or a `localhost` name. No DNS
  lookup, so a request never waits on a resolver; single-label names (compose service names)
  are judged at delivery, by their addresses.
- `resolve` right before each delivery: resolves the host and returns the addresses that may be
  connected to. The delivery connects to exactly those addresses (messaging/push/http.py), so a
  DNS answer that changes between the check and the connection (rebinding) cannot slip through.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

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


MAX_URL_LENGTH = 2000
# A host name after IDNA encoding: dot-separated labels of letters, digits, hyphens and
# underscores (container and service names use them), one trailing dot allowed.
_HOST_NAME = re.compile(r"(?:[A-Za-z0-9_-]{1,63}\.)*[A-Za-z0-9_-]{1,63}\.?")
# Every character of a numeric IPv4 spelling (decimal, octal or hex parts, 1 to 4 of them).
_NUMERIC_HOST = re.compile(r"[0-9A-Fa-fXx.]+")


def url_problem(url: str) -> str | None:
    """Why a destination URL must not be stored, or None. One rule for every surface."""
    try:
        literal_check(url)
    except DestinationRefused as exc:
        return str(exc)
    return None


def check_url(url: str, *, field: str) -> None:
    """Refuse (InvalidRequest naming `field`) a URL that can be judged bad without DNS."""
    problem = url_problem(url)
    if problem is not None:
        raise InvalidRequest(f"{field}: {problem}", details={field: [problem]})


def validate_url(url: str) -> None:
    """`check_url` as a Django validator (model and form fields)."""
    problem = url_problem(url)
    if problem is not None:
        raise ValidationError(problem, code="invalid_destination")


def literal_check(url: str) -> None:
    """The shape of the URL, and its host when that is an address or a loopback name."""
    if len(url) > MAX_URL_LENGTH:
        raise DestinationRefused(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    _, host, _ = split_url(url)
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise DestinationRefused("The URL contains whitespace or control characters.")
    literal = host_address(host)
    if literal is not None and not address_allowed(literal, host=host):
        raise DestinationRefused(
            f"{host} is a private, loopback or link-local address "
            "(allow it with HIKYAKU_WEBHOOK_ALLOWED_HOSTS)."
        )


def host_address(host: str) -> IPAddress | None:
    """The address a host stands for without asking DNS — an IP literal in any spelling the
    system resolver accepts, or a loopback name — else None. Refuses a host that is no
    valid name at all."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(host):
        try:
            # The resolver reads 127.1, 2130706433, 0x7f000001 and 0 as IPv4 addresses.
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            pass
    name = host.lower().rstrip(".")
    if name in ("localhost", "localhost.localdomain") or name.endswith(".localhost"):
        return ipaddress.ip_address("127.0.0.1")
    try:
        encoded = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise DestinationRefused(f"{host!r} is not a valid host name.") from None
    if len(encoded) > 253 or not _HOST_NAME.fullmatch(encoded):
        raise DestinationRefused(f"{host!r} is not a valid host name.")
    return None


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
