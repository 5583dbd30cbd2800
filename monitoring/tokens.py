"""Join tokens and agent credentials: random strings of which only a SHA-256 hash is stored.

A join token looks like a Kubernetes bootstrap token, `id.secret` (`[a-z0-9]{6}.[a-z0-9]{16}`):
the id finds the row, the secret proves possession. An agent credential is `ebca_` plus 43
URL-safe characters (256 bits); it is looked up by its hash. Both have enough entropy that a
fast hash is enough: nobody can guess them, so nobody needs a slow hash to resist guessing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string

_ALPHABET = string.ascii_lowercase + string.digits
JOIN_TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})\Z")
CREDENTIAL_PREFIX = "ebca_"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def same_digest(value: str, expected_hex: str) -> bool:
    return hmac.compare_digest(digest(value), expected_hex)


def join_token_new() -> tuple[str, str]:
    """Return (token_id, secret); the token the agent gets is `f"{token_id}.{secret}"`."""
    token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    return token_id, secret


def join_token_parse(token: str) -> tuple[str, str] | None:
    match = JOIN_TOKEN_RE.match((token or "").strip())
    return (match.group(1), match.group(2)) if match else None


def credential_new() -> str:
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
