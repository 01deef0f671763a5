"""Signed access tokens: ``<subject>.<expires_at>.<signature>`` with an HMAC-SHA256 signature."""

from __future__ import annotations

import hashlib
import hmac

TOKEN_TTL_SECONDS = 15 * 60


class InvalidToken(Exception):
    """The token is malformed, forged or expired."""


def _sign(secret: bytes, payload: str) -> str:
    return hmac.new(secret, payload.encode(), hashlib.sha256).hexdigest()


def issue_token(subject: str, *, secret: bytes, now: int, ttl: int = TOKEN_TTL_SECONDS) -> str:
    payload = f"{subject}.{now + ttl}"
    return f"{payload}.{_sign(secret, payload)}"


def verify_token(token: str, *, secret: bytes, now: int) -> str:
    """The token's subject, or ``InvalidToken``."""
    try:
        subject, expires_at, signature = token.rsplit(".", 2)
        expiry = int(expires_at)
    except ValueError as error:
        raise InvalidToken("malformed token") from error
    if not hmac.compare_digest(signature, _sign(secret, f"{subject}.{expires_at}")):
        raise InvalidToken("bad signature")
    # BUG (the demo's failing spec): the expiry is never enforced.
    del expiry
    return subject
