"""Agent authentication (docs/PROTOCOL.md §2), one implementation for every surface.

REST, JSON-RPC, SSE and MCP-over-HTTP all call `authenticate_agent` with the raw
`Authorization` and `X-Agent-Id` header values. Two identities are accepted:

1. compat: `Bearer <api key>` + `X-Agent-Id` (refused when the tenant requires agent tokens);
2. `Bearer <agent token>`, with `X-Agent-Id` optional and, when present, matching.

An agent's own A2A endpoint (docs/PROTOCOL.md §8) also takes callers that are not agents of its
tenant: `authenticate_peer_caller` names them (docs/PEERS.md).
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from hikyaku import client_address as request_address
from hikyaku import rows
from hikyaku.errors import AgentNotFound, Unauthenticated
from tenants.credentials import (
    AGENT_TOKEN_PREFIX,
    AGENT_TOKEN_RE,
    API_KEY_RE,
    CALLER_TOKEN_RE,
    hash_secret,
    secrets_match,
)
from tenants.models import ApiKey, Tenant
from tenants.services import touch_api_key

from .limits import check_anonymous_rate, check_credential_rate, throttled
from .limits import pseudonym as _pseudonym
from .models import Agent

# What a request needs of the agent it authenticates: identity, credential, policy, webhook.
# The rest (description, skills, …) stays deferred, loaded by the few views that show it:
# decoding it on every call of the hot path would be wasted work.
IDENTITY_FIELDS = tuple(
    f.name
    for f in Agent._meta.concrete_fields
    if f.name not in ("description", "skills", "webhook_secret", "registered_with")
)
KEY_FIELDS = tuple(f.name for f in ApiKey._meta.concrete_fields)
# One answer for every key that does not authenticate, whatever is wrong with it (malformed,
# unknown, revoked, expired): the answer must not tell an attacker which keys exist.
INVALID_KEY = "Invalid, revoked or expired API key."
INVALID_TOKEN = "Invalid agent token, or the agent is not active."


@dataclass(frozen=True)
class AgentIdentity:
    tenant: Tenant
    agent: Agent
    api_key: ApiKey | None  # set for the compat identity, None for an agent token
    credential_hash: str  # what re-validation (open streams) checks again
    # The tenant's policy revision when the identity was read (with it): `still_current_sql`
    # notices a policy change since.
    revision: int = 0
    # Recalled from this process's identity cache rather than read now: nothing may be
    # written for it that does not check `still_current_sql` in the same statement.
    recalled: bool = False

    @property
    def via_token(self) -> bool:
        return self.api_key is None


def bearer_secret(authorization: str | None) -> str:
    """The credential of an `Authorization: Bearer …` header; the scheme is case-insensitive."""
    if not authorization:
        raise Unauthenticated("Missing Authorization header; send 'Authorization: Bearer <key>'.")
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        raise Unauthenticated("Authorization must use the Bearer scheme.")
    return value


def _parse_agent_id(agent_id: str | None) -> uuid.UUID | None:
    if agent_id is None or agent_id.strip() == "":
        return None
    try:
        return uuid.UUID(agent_id.strip())
    except ValueError:
        raise Unauthenticated("X-Agent-Id is not a valid agent id.") from None


@throttled
def authenticate_key(authorization: str | None, *, counted: bool = False) -> ApiKey:
    """An active, unexpired tenant API key (registration needs nothing else). `counted`: the
    request was counted against the key's rate limits already (`recall_agent`)."""
    raw = bearer_secret(authorization)
    if not API_KEY_RE.match(raw):
        raise Unauthenticated(INVALID_KEY)
    api_key = _first_with_tenant(
        ApiKey,
        KEY_FIELDS,
        f"SELECT {rows.select_list(ApiKey, KEY_FIELDS)}, t.name, t.slug, t.require_agent_tokens,"
        " t.policy_revision FROM tenants_apikey JOIN tenants_tenant t ON t.id = tenants_apikey.tenant_id"
        " WHERE key_hash = %s",
        [hash_secret(raw)],
    )
    if api_key is None or not secrets_match(raw, api_key.key_hash) or not api_key.is_active():
        raise Unauthenticated(INVALID_KEY)
    if not counted:
        check_credential_rate(api_key.key_hash, tenant_id=api_key.tenant_id)
    touch_api_key(api_key=api_key, interval_seconds=settings.HIKYAKU_TOUCH_INTERVAL_SECONDS)
    return api_key


@throttled
def authenticate_agent(
    *, authorization: str | None, agent_id: str | None, counted: bool = False
) -> AgentIdentity:
    """The agent a request acts as. `counted`: the request was counted against the
    credential's rate limits already (an identity `recall_agent` returned that has to be
    read again), so it is not counted twice."""
    raw = bearer_secret(authorization)
    claimed_id = _parse_agent_id(agent_id)
    if raw.startswith(AGENT_TOKEN_PREFIX) and not AGENT_TOKEN_RE.match(raw):
        # Meant as an agent token (a truncated paste, say): say so, not "Invalid API key."
        raise Unauthenticated(INVALID_TOKEN)

    if AGENT_TOKEN_RE.match(raw):
        token_hash = hash_secret(raw)
        agent = _first_with_tenant(
            Agent,
            IDENTITY_FIELDS,
            f"SELECT {rows.select_list(Agent, IDENTITY_FIELDS)}, t.name, t.slug,"
            " t.require_agent_tokens, t.policy_revision FROM agents_agent JOIN tenants_tenant t"
            " ON t.id = agents_agent.tenant_id WHERE agents_agent.token_hash = %s"
            f" AND agents_agent.status = %s AND {TOKEN_KEY_ACTIVE.format(agent='agents_agent')}",
            [token_hash, Agent.Status.ACTIVE, rows.prep(ApiKey, "expires_at", timezone.now())],
        )
        if (
            agent is None
            or not secrets_match(raw, agent.token_hash or "")
            or (agent.token_expires_at is not None and agent.token_expires_at <= timezone.now())
        ):
            # The same words for an expired token as for an unknown one: no oracle.
            raise Unauthenticated(INVALID_TOKEN)
        if claimed_id is not None and claimed_id != agent.id:
            raise Unauthenticated("X-Agent-Id does not match the agent token.")
        if not counted:
            check_credential_rate(token_hash, tenant_id=agent.tenant_id)
        _touch_agent(agent)
        identity = AgentIdentity(
            tenant=agent.tenant,
            agent=agent,
            api_key=None,
            credential_hash=token_hash,
            revision=agent.tenant.policy_revision,
        )
        _remember((token_hash, claimed_id), identity)
        return identity

    api_key = authenticate_key(authorization, counted=counted)
    if api_key.tenant.require_agent_tokens:
        raise Unauthenticated("This tenant requires agent tokens: send 'Bearer <agent token>'.")
    if claimed_id is None:
        raise Unauthenticated("Missing X-Agent-Id header (or use an agent token).")
    agent = rows.first(
        Agent,
        IDENTITY_FIELDS,
        f"SELECT {rows.select_list(Agent, IDENTITY_FIELDS)} FROM agents_agent"
        " WHERE id = %s AND tenant_id = %s AND status = %s",
        [
            rows.prep(Agent, "id", claimed_id),
            rows.prep(Agent, "tenant", api_key.tenant_id),
            Agent.Status.ACTIVE,
        ],
    )
    if agent is None:
        raise Unauthenticated("Unknown or inactive agent for this API key.")
    agent.tenant = api_key.tenant
    _touch_agent(agent)
    identity = AgentIdentity(
        tenant=api_key.tenant,
        agent=agent,
        api_key=api_key,
        credential_hash=api_key.key_hash,
        revision=api_key.tenant.policy_revision,
    )
    _remember((api_key.key_hash, claimed_id), identity)
    return identity


# The identity cache (docs/ARCHITECTURE.md, "Credentials"): what authentication established,
# per credential and claimed agent id, so that a send need not read it again. A recalled
# identity is never trusted on its own: the write it makes checks `still_current_sql` in
# the same statement, and a write that finds it no longer current writes nothing and
# raises `Unverified`, after which the request authenticates afresh (and gets its 401).
# A process's cache therefore cannot outlive a revocation made by any other process.
CACHE_SIZE = 10_000
_cache: OrderedDict[tuple[str, uuid.UUID | None], AgentIdentity] = OrderedDict()
_cache_lock = threading.Lock()


class Unverified(Exception):
    """A recalled identity met an operation that cannot check it in its own statement, or
    a statement that found it no longer current: authenticate afresh and try again."""


def _remember(key: tuple[str, uuid.UUID | None], identity: AgentIdentity) -> None:
    with _cache_lock:
        _cache[key] = identity
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def forget(identity: AgentIdentity) -> None:
    """Drop this identity's cached entries (with and without the agent id claimed)."""
    with _cache_lock:
        for claimed in (None, identity.agent.pk):
            _cache.pop((identity.credential_hash, claimed), None)


@throttled
def recall_agent(*, authorization: str | None, agent_id: str | None) -> AgentIdentity | None:
    """The identity `authenticate_agent` last established for these headers in this process,
    marked `recalled`, or None (then authenticate). Counts the request against the
    credential's rate limits as authentication does."""
    try:
        raw = bearer_secret(authorization)
        claimed_id = _parse_agent_id(agent_id)
    except Unauthenticated:
        return None
    key = (hash_secret(raw), claimed_id)
    with _cache_lock:
        identity = _cache.get(key)
    if identity is None:
        return None
    check_credential_rate(identity.credential_hash, tenant_id=identity.tenant.id)
    _touch_agent(identity.agent)
    if identity.api_key is not None:
        touch_api_key(
            api_key=identity.api_key, interval_seconds=settings.HIKYAKU_TOUCH_INTERVAL_SECONDS
        )
    return AgentIdentity(
        tenant=identity.tenant,
        agent=identity.agent,
        api_key=identity.api_key,
        credential_hash=identity.credential_hash,
        revision=identity.revision,
        recalled=True,
    )


def still_current_sql(identity: AgentIdentity) -> tuple[str, list]:
    """An SQL condition, true while `identity` holds as it was read: its credential is
    current (`identity_current_sql`), its agent keeps the name it had, and its tenant's
    policy revision has not moved (every change to who may talk to whom bumps it,
    agents/history.py). A statement that writes for a recalled identity includes it."""
    condition, params = identity_current_sql("%s", "%s", via_token=identity.via_token)
    agent_id = rows.prep(Agent, "id", identity.agent.pk)
    return (
        f"({condition} AND EXISTS (SELECT 1 FROM agents_agent ga JOIN tenants_tenant gt"
        " ON gt.id = ga.tenant_id WHERE ga.id = %s AND ga.name = %s"
        " AND gt.policy_revision = %s))",
        [
            *params,
            agent_id,
            identity.credential_hash,
            agent_id,
            identity.agent.name,
            identity.revision,
        ],
    )


# A token minted under an API key works only while that key is active (Agent.token_key_id):
# revoking or expiring a key stops the tokens it registered, whatever other keys the tenant
# holds. One parameter: the current time.
TOKEN_KEY_ACTIVE = (
    "({agent}.token_key_id IS NULL OR EXISTS (SELECT 1 FROM tenants_apikey tk"
    " WHERE tk.id = {agent}.token_key_id AND tk.revoked_at IS NULL"
    " AND (tk.expires_at IS NULL OR tk.expires_at > %s)))"
)


def identity_is_current(identity: AgentIdentity) -> bool:
    """Whether an identity established earlier still holds (revocation, expiry, rotation,
    deregistration, disabling, and the tenant's token requirement). One query.

    A hand-written statement like authentication itself (the ORM spent ~0.4 ms compiling the
    join, see hikyaku/rows.py)."""
    condition, params = identity_current_sql("%s", "%s", via_token=identity.via_token)
    params += [rows.prep(Agent, "id", identity.agent.pk), identity.credential_hash]
    return rows.one(f"SELECT 1 WHERE {condition}", params) is not None


def current_time_param() -> Any:
    """The current time as `identity_current_sql` takes it (prepared for the database)."""
    # Both timestamps it compares with are DateTimeFields.
    return rows.prep(Agent, "token_expires_at", timezone.now())


def identity_current_sql(
    agent: str, credential_hash: str, *, via_token: bool, now: Any = None
) -> tuple[str, list]:
    """`identity_is_current` as an SQL condition over two SQL expressions (the agent's id
    and the credential's hash), for a statement that checks credentials in the same read as
    its work (the stream processes' inbox reads, a recalled identity's write). Returns the
    condition and the parameters of its own placeholders, which all come before those of the
    two expressions. `now`: `current_time_param()` when the caller already has it (a
    statement checking both kinds of credential)."""
    if now is None:
        now = current_time_param()
    if via_token:
        return _current_sql(agent, credential_hash, True), [_ACTIVE, now, now]
    require_tokens = False  # a key identity holds only where the tenant allows keys
    return _current_sql(agent, credential_hash, False), [_ACTIVE, require_tokens, now]


_ACTIVE = Agent.Status.ACTIVE.value


@functools.cache
def _current_sql(agent: str, credential_hash: str, via_token: bool) -> str:
    if via_token:
        return (
            "EXISTS (SELECT 1 FROM agents_agent ca WHERE ca.status = %s"
            " AND (ca.token_expires_at IS NULL OR ca.token_expires_at > %s)"
            f" AND {TOKEN_KEY_ACTIVE.format(agent='ca')}"
            f" AND ca.id = {agent} AND ca.token_hash = {credential_hash})"
        )
    # Every condition applies to the same key row.
    return (
        "EXISTS (SELECT 1 FROM agents_agent ca JOIN tenants_tenant ct ON ct.id = ca.tenant_id"
        " JOIN tenants_apikey ck ON ck.tenant_id = ct.id WHERE ca.status = %s"
        " AND ct.require_agent_tokens = %s AND ck.revoked_at IS NULL"
        " AND (ck.expires_at IS NULL OR ck.expires_at > %s)"
        f" AND ca.id = {agent} AND ck.key_hash = {credential_hash})"
    )


def current_identities(identities: Iterable[AgentIdentity]) -> set[tuple[uuid.UUID, str]]:
    """`identity_is_current` for many identities at once: the `(agent id, credential hash)`
    pairs that still hold."""
    identities = list(identities)
    stale = stale_identities(identities)
    return {(i.agent.pk, i.credential_hash) for i in identities} - stale


def stale_identities(identities: Iterable[AgentIdentity]) -> set[tuple[uuid.UUID, str]]:
    """The `(agent id, credential hash)` pairs of these identities that no longer hold (the
    open streams of a process, checked every few seconds): the same condition as
    `identity_is_current` (`identity_current_sql`), in one statement per kind of credential
    and chunk, which returns only what failed — usually nothing, so checking ten thousand
    streams reads next to nothing."""
    by_kind: dict[bool, list[AgentIdentity]] = {True: [], False: []}
    for identity in identities:
        by_kind[identity.via_token].append(identity)
    stale: set[tuple[uuid.UUID, str]] = set()
    for via_token, group in by_kind.items():
        for start in range(0, len(group), CHECK_CHUNK):
            stale |= _stale(group[start : start + CHECK_CHUNK], via_token)
    return stale


# Identities per statement (SQLite allows 32,766 parameters).
CHECK_CHUNK = 5000


def _stale(identities: list[AgentIdentity], via_token: bool) -> set[tuple[uuid.UUID, str]]:
    condition, constants = identity_current_sql("c.agent", "c.hash", via_token=via_token)
    if connection.vendor == "postgresql":
        # One text parameter ("<agent id hex><hash>" per line): one statement text whatever
        # the number (prepared once), and adapting one string costs next to nothing where
        # arrays of ten thousand values cost milliseconds.
        values = (
            "SELECT CAST(substr(x, 1, 32) AS uuid), substr(x, 33)"
            " FROM unnest(string_to_array(%s, E'\\n')) AS x"
        )
        params = ["\n".join(i.agent.pk.hex + i.credential_hash for i in identities)]
    else:
        values = "VALUES " + ", ".join(["(%s, %s)"] * len(identities))
        params = [
            v for i in identities for v in (rows.prep(Agent, "id", i.agent.pk), i.credential_hash)
        ]
    sql = f"WITH c(agent, hash) AS ({values}) SELECT c.agent, c.hash FROM c WHERE NOT {condition}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *constants])
        found = cursor.fetchall()
    return {(rows.convert(Agent, ("id",), (agent,))["id"], h) for agent, h in found}


def _first_with_tenant(model, fields: tuple[str, ...], sql: str, params: list):
    """One row of `model` joined with its tenant, in one hand-written query.

    Authentication runs on every request; the ORM would spend several times the database
    round trip compiling this join (see hikyaku/rows.py)."""
    row = rows.one(sql, params)
    if row is None:
        return None
    obj = rows.build(model, fields, row[: len(fields)])
    name, slug, requires_tokens, revision = row[len(fields) :]
    obj.tenant = Tenant.from_db(
        connection.alias,
        ["id", "name", "slug", "require_agent_tokens", "policy_revision"],
        [obj.tenant_id, name, slug, bool(requires_tokens), revision],
    )
    return obj


def _touch_agent(agent: Agent) -> None:
    now = timezone.now()
    interval = settings.HIKYAKU_TOUCH_INTERVAL_SECONDS
    if agent.last_seen_at and (now - agent.last_seen_at).total_seconds() < interval:
        return
    Agent.objects.filter(pk=agent.pk).update(last_seen_at=now)
    agent.last_seen_at = now


# Callers of an agent's own A2A endpoint ---------------------------------------------------


@dataclass(frozen=True)
class PeerCaller:
    """Who calls an agent's own A2A endpoint (docs/PROTOCOL.md §8, docs/PEERS.md).

    Either one of the callee tenant's agents acting as itself (`agent`), or an external
    caller named by `caller_id`: "tenant-key" (a key of the callee's tenant without
    X-Agent-Id), "ext:<hmac>" (a credential of another tenant, public agents only),
    "anon:<hash>" (a caller token) or "ip:<hmac>" (no credential: the client address)."""

    agent: Agent | None
    caller_id: str = ""
    anonymous: bool = False
    identity: AgentIdentity | None = None  # how `agent` authenticated


def client_address(meta: Mapping[str, str]) -> str:
    """The client's address: the connection's peer, or the entry HIKYAKU_TRUSTED_PROXY_HOPS
    from the end of X-Forwarded-For (each trusted proxy appends the address it saw)."""
    return request_address.from_meta(meta)


@throttled
def authenticate_tenant(*, authorization: str | None, agent_id: str | None) -> Tenant:
    """The tenant of a tenant key or an agent identity (reading cards needs nothing else)."""
    raw = bearer_secret(authorization)
    if AGENT_TOKEN_RE.match(raw) or (agent_id and agent_id.strip()):
        return authenticate_agent(authorization=authorization, agent_id=agent_id).tenant
    return authenticate_key(authorization).tenant


def has_credential(authorization: str | None) -> bool:
    """Whether the request carries a credential other than an (anonymous) caller token."""
    if not authorization or not authorization.strip():
        return False
    _, _, value = authorization.strip().partition(" ")
    return not CALLER_TOKEN_RE.match(value.strip())


def not_public() -> Unauthenticated:
    """What an agent's own endpoint answers a caller without credentials (or with only a
    caller token) when the agent is not public, and when there is no such agent: one answer,
    so that nobody learns which ids exist (docs/PEERS.md)."""
    return Unauthenticated(
        "This agent is not public or does not exist: "
        "send 'Authorization: Bearer <api key or agent token>'."
    )


@throttled
def authenticate_peer_caller(
    *, callee: Agent, authorization: str | None, agent_id: str | None, address: str
) -> PeerCaller:
    """Name the caller of `callee`'s A2A endpoint, or refuse: 401 for missing or bad
    credentials (and for anonymous callers of an agent that is not public), 404 for a
    credential of another tenant when the agent is not public."""
    if not has_credential(authorization):
        if not callee.public:
            raise not_public()
        check_anonymous_rate(address)
        if authorization and authorization.strip():
            token = bearer_secret(authorization)
            return PeerCaller(
                agent=None, caller_id="anon:" + hash_secret(token)[:24], anonymous=True
            )
        return PeerCaller(
            agent=None, caller_id="ip:" + _pseudonym("addr:" + address), anonymous=True
        )
    raw = bearer_secret(authorization)
    if AGENT_TOKEN_RE.match(raw) or (agent_id and agent_id.strip()):
        identity = authenticate_agent(authorization=authorization, agent_id=agent_id)
        if identity.tenant.id == callee.tenant_id:
            return PeerCaller(agent=identity.agent, identity=identity)
        principal = f"agent:{identity.agent.id}"
    else:
        api_key = authenticate_key(authorization)
        if api_key.tenant_id == callee.tenant_id:
            return PeerCaller(agent=None, caller_id="tenant-key")
        principal = f"tenant:{api_key.tenant_id}"
    if not callee.public:
        raise AgentNotFound(f"Agent not found: {callee.id}")
    return PeerCaller(agent=None, caller_id="ext:" + _pseudonym(principal))
