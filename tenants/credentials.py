"""Generation and hashing of bearer secrets (API keys and agent tokens).

Secrets are 128+ bits of randomness, so a fast SHA-256 is the right hash: lookups go by hash
through a unique index, and the final comparison is constant-time.
"""

import hashlib
import hmac
import re
import secrets
import string

API_KEY_PREFIX = "hky_"
API_KEY_RE = re.compile(r"^hky_[0-9a-f]{32}$")
AGENT_TOKEN_PREFIX = "hka_"
AGENT_TOKEN_RE = re.compile(r"^hka_[A-Za-z0-9]{40}$")
# Caller tokens name an anonymous caller of a public agent (docs/PEERS.md). They are not
# stored: any holder of the same token is the same caller, so clients may mint their own.
CALLER_TOKEN_RE = re.compile(r"^hkc_[A-Za-z0-9_-]{32,128}$")
_TOKEN_ALPHABET = string.ascii_letters + string.digits


def hash_secret(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def secrets_match(raw: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(raw), stored_hash)


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_hex(16)


def new_agent_token() -> str:
    return AGENT_TOKEN_PREFIX + "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(40))


def display_prefix(raw: str) -> str:
    """The 8 characters after the type prefix, safe to show and to search by."""
    return raw[4:12]


WEBHOOK_SECRET_PREFIX = "whsec_"


def new_webhook_secret() -> str:
    """The key of an agent's webhook signatures (HMAC-SHA256), 256 random bits."""
    return WEBHOOK_SECRET_PREFIX + secrets.token_hex(32)
